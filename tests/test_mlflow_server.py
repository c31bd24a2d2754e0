"""The ``mlflow_server`` fixture: a real server that answers and keeps logged models."""

from __future__ import annotations

import urllib.request

import pytest

pytestmark = pytest.mark.mlflow


def test_the_server_answers_health_and_keeps_a_logged_model(mlflow_uri: str) -> None:
    from mlflow import MlflowClient

    with urllib.request.urlopen(f"{mlflow_uri}/health", timeout=5) as reply:
        assert reply.status == 200
    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("fixture-check")
    run = client.create_run(exp)
    model = client.create_logged_model(exp, name="best_model_3_acc=0_91", source_run_id=run.info.run_id)
    client.finalize_logged_model(model.model_id, "READY")
    client.finalize_logged_model(model.model_id, "FAILED")  # a READY model can be marked FAILED again
    assert str(client.get_logged_model(model.model_id).status) == "FAILED"
