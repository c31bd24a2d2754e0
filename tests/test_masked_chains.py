"""No exception tracker_saver raises carries a credential anywhere: its message, args, attributes, cause or context.

A chained cause is what an error reporter shows (Sentry, ``logging`` with ``exc_info``,
``traceback.print_exception(..., chain=True)``), and so is ``__context__`` even when a
``raise ... from None`` hides it from Python's own traceback. Each test gives a secret in a URL's
``user:password@`` and in the environment, makes S3, ClearML or MLflow fail, and walks the whole
chain of what was raised (``tests.helpers.chained``). The cause must still be there, masked
(DESIGN's invariant 5).
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from tests.helpers import chained, exception_texts
from tracker_saver import TrackerSaver, get_model
from tracker_saver.core.errors import ConfigError, RecordNotFoundError, RegistryError, StorageError

SECRET = "s3cret-in-the-chain-Qw8Zp"
ENV_SECRET = "env-s3cret-in-the-chain-Lm4Tx"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def assert_no_secret_in_the_chain(exc: BaseException, third_party: str) -> None:
    """Neither secret anywhere in ``exc``'s chain, and a (masked) cause from ``third_party`` is chained."""
    chain = chained(exc)
    leaks = [f"{type(e).__qualname__}: {exception_texts(e)}" for e in chain if SECRET in exception_texts(e)]
    leaks += [f"{type(e).__qualname__}: {exception_texts(e)}" for e in chain if ENV_SECRET in exception_texts(e)]
    assert not leaks, "a secret is in the chain:\n" + "\n\n".join(leaks)[:4000]
    assert exc.__cause__ is not None, "the cause must stay chained (DESIGN invariant 5)"
    assert any(third_party in f"{type(e).__module__}.{e}" for e in chain[1:]), [type(e) for e in chain]


def test_an_s3_failure_chains_no_secret_from_the_endpoint_url_or_the_environment(
    offline_env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from tracker_saver.storage import open_storage

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", ENV_SECRET)
    options = {"endpoint_url": f"http://u:{SECRET}@127.0.0.1:{_closed_port()}", "max_attempts": 1, "connect_timeout": 1}
    with pytest.raises(ConfigError, match="cannot reach endpoint") as caught:
        TrackerSaver("s3://bucket/team", registry=str(tmp_path / "r.db"), storage_options=options)
    assert_no_secret_in_the_chain(caught.value, "botocore")
    with pytest.raises(StorageError, match="cannot reach endpoint") as caught_get:
        with open_storage("s3://bucket/team", **options).get("p/r/model.slot0.pt"):
            pass
    assert_no_secret_in_the_chain(caught_get.value, "botocore")


@pytest.mark.ceph
def test_an_s3_refusal_chains_no_secret(s3_output_uri: str, ceph_s3: Any, tmp_path: Any) -> None:
    options = {
        "aws_access_key_id": ceph_s3.access_key,
        "aws_secret_access_key": SECRET,
        "aws_session_token": ENV_SECRET,
    }
    with pytest.raises(ConfigError, match="refused") as caught:
        TrackerSaver(s3_output_uri, registry=str(tmp_path / "r.db"), storage_options=options)
    assert_no_secret_in_the_chain(caught.value, "botocore")


@pytest.mark.clearml
def test_a_clearml_refusal_chains_no_secret(clearml_standin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from clearml.backend_interface.base import InterfaceBase

    from tracker_saver.integrations.clearml.registry import ClearMLRegistry

    monkeypatch.setattr(InterfaceBase, "_default_session", None)  # the next registry logs in again
    monkeypatch.delenv("CLEARML_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("CLEARML_API_SECRET_KEY", ENV_SECRET)
    monkeypatch.setenv("CLEARML_API_HOST", clearml_standin.api_host.replace("://", f"://u:{SECRET}@"))
    with pytest.raises(ConfigError, match="refused the credentials") as caught:
        ClearMLRegistry()
    assert_no_secret_in_the_chain(caught.value, "clearml")


def test_an_mlflow_server_that_is_down_chains_no_secret(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", ENV_SECRET)
    registry = f"mlflow:http://user:{SECRET}@127.0.0.1:{_closed_port()}"
    with pytest.raises(RegistryError, match="the tracking server does not answer") as caught:
        TrackerSaver(tmp_path / "out", project="p", run="r", registry=registry, timeout=1)
    assert_no_secret_in_the_chain(caught.value, "mlflow")


@pytest.mark.mlflow
def test_an_mlflow_error_from_a_running_server_chains_no_secret(
    mlflow_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracker_saver.integrations.mlflow.registry import MLflowRegistry

    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", ENV_SECRET)
    registry = MLflowRegistry(mlflow_uri.replace("://", f"://user:{SECRET}@"))
    with pytest.raises(RecordNotFoundError, match="does not exist") as caught:
        get_model("m-0123456789abcdef0123456789abcdef", registry=registry)
    assert_no_secret_in_the_chain(caught.value, "mlflow")
