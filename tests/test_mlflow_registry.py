"""The MLflow registry against a real ``mlflow server`` (tests/conftest_mlflow.py): the contract
suite, and what MLflow itself shows of the records (read back with MLflow's own client)."""

from __future__ import annotations

import pytest

pytest.importorskip("mlflow", reason="MLflow tests need mlflow: pip install -e '.[mlflow]' -c constraints.txt")

from tests.conftest_mlflow import own_registry  # noqa: E402
from tests.contracts.claims import StreamClaimsContract  # noqa: E402
from tests.contracts.labels import LabelsContract  # noqa: E402
from tests.contracts.records import SHA, RecordStoreContract, live, pending  # noqa: E402
from tracker_saver.core.errors import ConfigError, RecordNotFoundError, RegistryError  # noqa: E402
from tracker_saver.core.records import RecordState  # noqa: E402
from tracker_saver.integrations.mlflow.registry import MLflowRegistry  # noqa: E402
from tracker_saver.registry import open_registry  # noqa: E402

pytestmark = pytest.mark.mlflow


class TestMLflowRegistryContract(RecordStoreContract, LabelsContract, StreamClaimsContract):
    @pytest.fixture
    def registry(self, mlflow_server: str):
        reg = own_registry(mlflow_server)
        yield reg
        reg.close()


@pytest.fixture
def reg(mlflow_server: str) -> MLflowRegistry:
    return own_registry(mlflow_server)


def _model(reg: MLflowRegistry, record_id: str):
    from mlflow import MlflowClient

    return MlflowClient(reg.tracking_uri).get_logged_model(record_id)


def test_a_checkpoint_is_a_logged_model_with_a_legal_name_metrics_and_status(reg: MLflowRegistry) -> None:
    from mlflow import MlflowClient

    record = pending(reg, "best_model_3_acc=0.91.pt", score=0.91, score_name="acc", global_step=3)
    # As the pipeline does: the save's whole metadata again, with what the write adds.
    record = reg.records.make_live(
        record.id, sha256=SHA, size=10, metadata={"score": 0.91, "global_step": 3, "write_s": 0.25}
    )
    model = _model(reg, record.id)
    assert model.name == "best_model_3_acc=0_91"
    assert str(model.status) == "READY"
    assert model.source_run_id
    exp = model.experiment_id
    found = MlflowClient(reg.tracking_uri).search_logged_models([exp], filter_string="metrics.score > 0.5")
    assert [m.model_id for m in found] == [record.id]
    assert MlflowClient(reg.tracking_uri).search_logged_models([exp], filter_string="metrics.score > 0.95") == []
    assert model.params["score_name"] == "acc"
    # Logged once, at creation: making the record live logs only what it adds (size, timings).
    client = MlflowClient(reg.tracking_uri)
    outputs = client.get_run(model.source_run_id).outputs.model_outputs  # the run's page lists it
    assert [(o.model_id, o.step) for o in outputs] == [(record.id, 3)]
    assert [m.value for m in client.get_metric_history(model.source_run_id, "score")] == [0.91]
    assert [m.value for m in client.get_metric_history(model.source_run_id, "write_s")] == [0.25]


def test_an_experiment_found_once_gives_its_id_and_registry_id_without_another_call(
    reg: MLflowRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A saver's start looks the experiment up (its registry id, for the owner check); its first
    record then needs the experiment's id: neither is read from the server again in this process."""
    from tracker_saver.integrations.mlflow.transport import MLflowTransport

    calls: list[str] = []
    original = MLflowTransport.call

    def recording(self: MLflowTransport, fn, what: str, *args, **kwargs):
        calls.append(fn.__name__)
        return original(self, fn, what, *args, **kwargs)

    monkeypatch.setattr(MLflowTransport, "call", recording)
    registry_id = reg.claims.registry_id("p")
    assert calls == ["get_experiment_by_name", "create_experiment", "get_experiment"]
    calls.clear()
    pending(reg, "model_1.pt")
    assert reg.claims.registry_id("p") == registry_id
    assert "get_experiment_by_name" not in calls and "get_experiment" not in calls, calls


def test_two_filenames_never_share_a_name(reg: MLflowRegistry) -> None:
    a = live(reg, "best_model_3_acc=0.91.pt")
    b = live(reg, "best_model_3_acc=0_91.pt", slot=1)
    names = {_model(reg, a.id).name, _model(reg, b.id).name}
    assert len(names) == 2 and "best_model_3_acc=0_91" in names


def test_pending_failed_and_evicted_are_not_ready_in_mlflow_and_evicted_is_no_failure(reg: MLflowRegistry) -> None:
    record = pending(reg, "a_1.pt")
    assert str(_model(reg, record.id).status) == "PENDING"
    reg.records.fail(record.id, "disk full")
    assert str(_model(reg, record.id).status) == "FAILED"
    other = live(reg, "a_2.pt", slot=1)
    reg.records.evict(other.id)
    assert str(_model(reg, other.id).status) == "UNSPECIFIED"  # MLflow's UI shows no status: not a red Failed
    assert _model(reg, other.id).tags["tracker_saver.state"] == "evicted"  # plain text, as people read it
    reg.records.restore(other.id)
    assert str(_model(reg, other.id).status) == "READY"


def test_rename_keeps_the_mlflow_name_and_sets_the_display_name_tag(reg: MLflowRegistry) -> None:
    record = live(reg, "best_model_1_acc=0.5.pt")
    assert reg.labels.rename(record.id, "baseline").name == "baseline"
    model = _model(reg, record.id)
    assert model.name == "best_model_1_acc=0_5" and model.tags["tracker_saver.name"] == "baseline"


def test_a_model_deleted_in_the_ui_is_not_found(reg: MLflowRegistry) -> None:
    from mlflow import MlflowClient

    record = live(reg, "a_1.pt")
    MlflowClient(reg.tracking_uri).delete_logged_model(record.id)
    with pytest.raises(RecordNotFoundError, match=record.id):
        reg.records.get(record.id)


def test_a_deleted_experiment_names_the_restore_command(reg: MLflowRegistry) -> None:
    from mlflow import MlflowClient

    record = live(reg, "a_1.pt")
    MlflowClient(reg.tracking_uri).delete_experiment(_model(reg, record.id).experiment_id)
    with pytest.raises(RegistryError, match="is deleted: restore it"):
        pending(reg, "a_2.pt")


def test_an_unreachable_server_is_a_registry_error_ended_by_the_timeout() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    reg = MLflowRegistry(f"http://127.0.0.1:{port}", timeout=2)
    # Retried until the outage clock passed half the timeout, and that ended the wait (no clock read here).
    with pytest.raises(RegistryError, match=r"does not answer \(no answer for .* \(timeout 2 s\).*mlflow server"):
        pending(reg, "a_1.pt")
    assert reg._transport._outage.exhausted()


def test_a_tag_write_whose_pre_read_meets_an_outage_is_retried_not_a_parameter_error(mlflow_server: str) -> None:
    """MlflowClient.set_logged_model_tags reads the model first and turns a failed read into
    INVALID_PARAMETER_VALUE (CI: "Failed to get logged model" in the middle of a save). The server
    is cut off by a real TCP gate until the write's first attempt failed; the write must wait it out
    like any outage."""
    from tests.tcp_gate import Gate
    from tests.waiting import on_first_failure

    host, port = mlflow_server.removeprefix("http://").split(":")
    gate = Gate(host, int(port))
    reg = own_registry(gate.uri)
    record = live(reg, "a_1.pt")
    gate.close()
    failed = on_first_failure(reg._transport._outage, gate.open)
    reg._transport.call(
        reg._transport.client.set_logged_model_tags, "tagging", record.id, {"t": "1"}, record_id=record.id
    )
    assert failed and _model(reg, record.id).tags["t"] == "1"


def test_a_tag_write_on_a_deleted_model_is_record_not_found(reg: MLflowRegistry) -> None:
    from mlflow import MlflowClient

    record = live(reg, "a_1.pt")
    MlflowClient(reg.tracking_uri).delete_logged_model(record.id)
    with pytest.raises(RecordNotFoundError, match=record.id):
        reg._transport.call(
            reg._transport.client.set_logged_model_tags, "tagging", record.id, {"t": "1"}, record_id=record.id
        )


def test_the_mlflow_registry_is_a_run_context_that_offers_no_artifact_task(mlflow_uri: str) -> None:
    from tracker_saver.registry.context import RunContext

    reg = MLflowRegistry(mlflow_uri)
    assert isinstance(reg, RunContext) and reg.artifact_task() is None


def test_open_registry_names_the_mlflow_registry(mlflow_uri: str) -> None:
    assert open_registry(f"mlflow:{mlflow_uri}").uri == f"mlflow:{mlflow_uri}"
    assert open_registry("mlflow").uri == f"mlflow:{mlflow_uri}"


def test_no_tracking_uri_is_a_config_error_naming_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(ConfigError, match="MLFLOW_TRACKING_URI"):
        open_registry("mlflow")


def test_make_live_is_refused_twice(reg: MLflowRegistry) -> None:
    record = live(reg, "a_1.pt")
    with pytest.raises(RegistryError, match="not pending"):
        reg.records.make_live(record.id, sha256=SHA, size=1)


@pytest.mark.parametrize("refused", ["finalize_logged_model", "set_logged_model_tags"])
def test_an_eviction_cut_short_never_leaves_mlflow_offering_the_evicted_record(
    reg: MLflowRegistry, refused: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One of the eviction's two writes (status, state tag) is refused by the real server's client
    (the call raises, as when the process dies or the server fails between them)."""
    from mlflow.exceptions import MlflowException

    record = live(reg, "a_1.pt")

    def refuse(*args: object, **kwargs: object) -> None:
        raise MlflowException("refused by the test", error_code="INVALID_STATE")

    if refused == "set_logged_model_tags":  # the registry writes tags through the tracking client underneath
        monkeypatch.setattr(reg.records, "_write_tags", refuse)
    else:
        monkeypatch.setattr(reg._transport.client, refused, refuse)
    with pytest.raises(RegistryError):
        reg.records.evict(record.id)
    monkeypatch.undo()
    model = _model(reg, record.id)
    offered = str(model.status) == "READY"
    assert not offered or model.tags["tracker_saver.state"] == "live", (model.status, model.tags)
    assert reg.records.get(record.id).state in (RecordState.LIVE, RecordState.EVICTED)
