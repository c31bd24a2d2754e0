"""MLflow's internals that the registry relies on still exist in the installed mlflow, in the shape used.

Every private MLflow attribute tracker_saver touches goes through
``tracker_saver.integrations.mlflow.internals``: an upgrade that breaks it fails here, not
mid-training. No server is needed: the client is built, never connected.
"""

from __future__ import annotations

import inspect

import pytest

pytest.importorskip("mlflow", reason="MLflow tests need mlflow: pip install 'mlflow>=3.9,<4' (the mlflow extra)")

from mlflow import MlflowClient  # noqa: E402

from tracker_saver.core.errors import ConfigError  # noqa: E402
from tracker_saver.integrations.mlflow import internals  # noqa: E402


def test_the_tag_writer_is_the_tracking_clients_and_takes_a_model_id_and_tags() -> None:
    write = internals.tag_writer(MlflowClient("http://127.0.0.1:1"))
    assert list(inspect.signature(write).parameters) == ["model_id", "tags"]
    # The public method reads the model first, then calls exactly this: what the registry skips is the read.
    assert f"self.{internals.TRACKING_CLIENT}.set_logged_model_tags(" in inspect.getsource(
        MlflowClient.set_logged_model_tags
    )


def test_a_client_without_it_is_a_config_error_naming_the_shim() -> None:
    class Changed:  # what an mlflow that renamed the attribute would look like
        pass

    with pytest.raises(
        ConfigError, match=r"no _tracking_client.set_logged_model_tags .*integrations/mlflow/internals.py"
    ):
        internals.tag_writer(Changed())
