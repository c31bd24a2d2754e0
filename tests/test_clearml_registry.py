"""The ClearML registry, and the ClearML API stand-in it is tested against, with the real SDK.

Most assertions read back through the clearml SDK (``Model``, ``Task``), so they hold on a
live server too (set CLEARML_API_HOST/ACCESS_KEY/SECRET_KEY). Tests that count requests,
inject faults or read the stand-in's entities skip there.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("clearml", reason="ClearML tests need clearml: pip install 'clearml>=1.16,<3' (the clearml extra)")

from tests.conftest_clearml import ClearMLServer, init_task, live_server_configured  # noqa: E402
from tests.contracts.claims import StreamClaimsContract  # noqa: E402
from tests.contracts.labels import LabelsContract  # noqa: E402
from tests.contracts.records import SHA, RecordStoreContract, live  # noqa: E402
from tracker_saver.core.claims import Holder, new_holder  # noqa: E402
from tracker_saver.core.errors import ConfigError, RecordNotFoundError, RegistryError, StreamBusyError  # noqa: E402
from tracker_saver.core.query import parse_order, parse_where  # noqa: E402
from tracker_saver.core.records import RecordState, StreamId, UploadInfo  # noqa: E402
from tracker_saver.integrations.clearml.registry import CLAIM_TAG_PREFIX, ClearMLRegistry, task_run  # noqa: E402
from tracker_saver.registry import Query  # noqa: E402

pytestmark = pytest.mark.clearml


def _root() -> str:
    return f"tracker_saver-tests/{uuid.uuid4().hex[:12]}"


class TestClearMLRegistryContract(RecordStoreContract, LabelsContract, StreamClaimsContract):
    @pytest.fixture
    def registry(self, clearml_server: ClearMLServer):
        # ClearML refuses project names under 3 characters, so project "p" lives under a root.
        reg = ClearMLRegistry(project_root=_root())
        yield reg
        reg.close()


def _info(
    run: str, filename: str, *, project: str = "ckpts", stream: str = "best_model", slot: int = 0, **meta: Any
) -> UploadInfo:
    return UploadInfo(
        project, run, stream, filename, metadata=dict(meta), slot=slot, key=f"{project}/{run}/{stream}.slot{slot}.pt"
    )


@pytest.fixture
def run_task(clearml_server: ClearMLServer, tmp_path: Path):
    """A task named ``train-run`` in project ``<root>/ckpts``, and a registry bound to it."""
    root = _root()
    task = init_task(f"{root}/ckpts", "train-run", output_uri=str(tmp_path))
    try:
        yield task, ClearMLRegistry(task, project_root=root)
    finally:
        task.close()


def _run(registry: ClearMLRegistry) -> str:
    """The run of the registry's task (``<task name>.<task id>``), else ``train-run``."""
    return task_run(registry.tasks.task) if registry.tasks.task is not None else "train-run"


def _listed(task: Any) -> list[str]:
    """The task's output-model list (what the web UI shows). ``task.get_models()`` would also
    add every model whose ``task`` field names the task, archived ones included."""
    task.reload()
    return [item.model for item in task.data.models.output or []]


def _commit(registry: ClearMLRegistry, filename: str, **kwargs: Any):
    record = registry.records.create_pending(
        _info(_run(registry), filename, **kwargs),
        uri=f"file:///out/ckpts/train-run/best_model.slot{kwargs.get('slot', 0)}.pt",
    )
    return registry.records.make_live(record.id, sha256=SHA, size=10)


# -- ClearML-specific behaviour of the registry ------------------------------------------------------


def test_a_record_is_a_model_attached_to_its_task(run_task) -> None:
    from clearml import Model

    task, registry = run_task
    record = _commit(registry, "best_model_1_val_acc=0.5000.pt", global_step=1)
    model = Model(record.id)
    assert model.name == "best_model_1_val_acc=0.5000.pt"
    assert model.task == task.id
    assert model.url == "file:///out/ckpts/train-run/best_model.slot0.pt"
    assert "stream:best_model" in model.tags and "archived" not in (model.system_tags or [])
    assert _listed(task) == [record.id]
    assert registry.task_project_run == ("ckpts", f"train-run.{task.id}")


def test_a_rename_made_by_another_client_is_kept_by_later_saves(run_task) -> None:
    from clearml import Model

    _, registry = run_task
    first = _commit(registry, "best_model_1_val_acc=0.5000.pt")
    Model(first.id).name = "renamed in the web UI"  # another client, straight through the SDK
    assert registry.records.get(first.id).name == "renamed in the web UI"
    second = _commit(registry, "best_model_2_val_acc=0.6000.pt", slot=1)
    registry.records.evict(first.id)
    registry.labels.add_tags(first.id, ["kept"])
    got = registry.records.get(first.id)
    assert (got.name, got.filename) == ("renamed in the web UI", "best_model_1_val_acc=0.5000.pt")
    assert Model(first.id).name == "renamed in the web UI"
    assert registry.records.get(second.id).name == "best_model_2_val_acc=0.6000.pt"


def test_a_pending_model_does_not_look_usable(run_task) -> None:
    from clearml import Model

    task, registry = run_task
    record = registry.records.create_pending(
        _info(_run(registry), "checkpoint_7.pt", stream="checkpoint"),
        uri="file:///out/ckpts/train-run/checkpoint.slot0.pt",
    )
    model = Model(record.id)
    assert not model.url and "pending" in model.tags and "archived" in model.system_tags
    assert record.uri == "file:///out/ckpts/train-run/checkpoint.slot0.pt"
    assert Model.query_models(project_name=task.get_project_name()) == []
    assert _listed(task) == []


def test_an_evicted_model_is_archived_tagged_and_taken_off_the_task(run_task) -> None:
    from clearml import Model

    task, registry = run_task
    old = _commit(registry, "best_model_1_val_acc=0.5000.pt")
    new = _commit(registry, "best_model_2_val_acc=0.6000.pt", slot=1)
    registry.records.evict(old.id)
    model = Model(old.id)
    assert "evicted" in model.tags and "archived" in model.system_tags
    project = task.get_project_name()
    assert [m.id for m in Model.query_models(project_name=project, tags=["-evicted"])] == [new.id]
    assert {m.id for m in Model.query_models(project_name=project, include_archived=True)} == {old.id, new.id}
    assert _listed(task) == [new.id]
    revived = registry.records.set_state(old.id, RecordState.REVIVED, expected=(RecordState.EVICTED,))
    assert revived.state is RecordState.REVIVED
    assert "archived" not in (Model(old.id).system_tags or []) and "revived" in Model(old.id).tags


def test_repair_can_make_a_pending_record_live_and_list_it(run_task) -> None:
    from clearml import Model

    task, registry = run_task
    record = registry.records.create_pending(
        _info(_run(registry), "checkpoint_7.pt", stream="checkpoint"),
        uri="file:///out/ckpts/train-run/checkpoint.slot0.pt",
    )
    done = registry.records.set_state(record.id, RecordState.LIVE, expected=(RecordState.PENDING,))
    assert done.state is RecordState.LIVE
    assert Model(record.id).url == "file:///out/ckpts/train-run/checkpoint.slot0.pt"
    assert "archived" not in (Model(record.id).system_tags or []) and _listed(task) == [record.id]


def test_a_failed_model_is_archived_with_its_error(run_task) -> None:
    from clearml import Model

    _, registry = run_task
    record = registry.records.create_pending(
        _info(_run(registry), "checkpoint_7.pt", stream="checkpoint"), uri="file:///x.pt"
    )
    failed = registry.records.fail(record.id, "OSError: disk full")
    model = Model(record.id)
    assert "failed" in model.tags and "archived" in model.system_tags
    assert model.get_metadata("error") == "OSError: disk full" and failed.error == "OSError: disk full"


def test_metadata_is_typed_as_the_server_stores_it(run_task) -> None:
    from clearml import Model

    _, registry = run_task
    record = _commit(
        registry,
        "best_model_3_val_acc=0.9312.pt",
        global_step=3,
        score=0.93121,
        score_name="val_acc",
        nan_score=None,
        flag=True,
    )
    stored = Model(record.id).get_all_metadata()
    assert {k: stored[k]["type"] for k in ("global_step", "slot", "size", "score", "score_name", "flag")} == {
        "global_step": "int",
        "slot": "int",
        "size": "int",
        "score": "float",
        "score_name": "str",
        "flag": "bool",
    }
    assert stored["score"]["value"] == "0.93121" and stored["state"]["value"] == "live"
    # Absent is type None (an empty type blocks the web app's metadata editor): the SDK casts it to its empty text.
    assert stored["nan_score"] == {"key": "nan_score", "type": "None", "value": ""}
    assert Model(record.id).get_all_metadata_casted()["nan_score"] == ""
    got = registry.records.get(record.id).metadata
    assert (got["global_step"], got["score"], got["flag"], got["nan_score"]) == (3, 0.93121, True, None)
    assert "state" not in got and "stream" not in got  # record fields are not user metadata


def test_users_find_live_checkpoints_with_model_query_models(run_task) -> None:
    from clearml import Model

    task, registry = run_task
    a = _commit(registry, "best_model_1_val_acc=0.5000.pt", prefix="best")
    _commit(registry, "checkpoint_1.pt", stream="checkpoint", slot=0)
    project = task.get_project_name()
    found = Model.query_models(project_name=project, tags=["stream:best_model"], metadata={"prefix": "best"})
    assert [m.id for m in found] == [a.id]


def test_models_not_made_by_tracker_saver_are_not_records(run_task) -> None:
    from clearml import OutputModel

    task, registry = run_task
    other = OutputModel(task=task, name="someone else's model", framework="PyTorch")
    other.update_weights(register_uri="file:///elsewhere/model.pt")
    mine = _commit(registry, "best_model_1_val_acc=0.5000.pt")
    assert [r.id for r in registry.records.query(Query(project="ckpts"))] == [mine.id]
    with pytest.raises(RecordNotFoundError, match="not a tracker_saver checkpoint record"):
        registry.records.get(other.id)


def test_records_of_a_run_without_a_task_are_models_without_a_task(clearml_server: ClearMLServer) -> None:
    from clearml import Model

    registry = ClearMLRegistry(project_root=_root())
    record = live(registry, "a_1.pt", run="r")
    assert not Model(record.id).task and record.run == "r"


def test_reserved_metadata_keys_tags_and_short_names_are_refused_with_the_fix(run_task) -> None:
    _, registry = run_task
    with pytest.raises(ConfigError, match=r"'state'.*record fields.*rename them"):
        registry.records.create_pending(_info(_run(registry), "checkpoint_1.pt", state="mine"), uri="file:///x.pt")
    with pytest.raises(ConfigError, match="at least 3 characters"):
        registry.records.create_pending(UploadInfo("ckpts", "train-run", "a", "a", slot=0, key="k"), uri="file:///x.pt")
    record = _commit(registry, "checkpoint_1.pt", stream="checkpoint")
    with pytest.raises(ConfigError, match="reserved"):
        registry.labels.add_tags(record.id, ["evicted"])
    with pytest.raises(ConfigError, match="at least 3 characters"):
        registry.labels.rename(record.id, "ab")


def test_bad_constructor_arguments_are_config_errors_with_the_fix(clearml_server: ClearMLServer) -> None:
    with pytest.raises(ConfigError, match="is not a clearml.Task: pass the result of Task.init"):
        ClearMLRegistry(task="train-run")
    with pytest.raises(ConfigError, match="project_root '/' is empty"):
        ClearMLRegistry(project_root="/")


def test_a_bad_metadata_value_is_a_config_error_not_a_type_error(run_task) -> None:
    _, registry = run_task
    with pytest.raises(ConfigError, match="use an int, float, str or bool"):
        registry.records.create_pending(_info(_run(registry), "checkpoint_1.pt", shape=[1, 2]), uri="file:///x.pt")


def test_a_live_server_is_used_only_when_host_and_both_keys_are_set() -> None:
    full = {"CLEARML_API_HOST": "https://api.example", "CLEARML_API_ACCESS_KEY": "a", "CLEARML_API_SECRET_KEY": "s"}
    assert live_server_configured(full)
    assert not live_server_configured({**full, "CLEARML_API_SECRET_KEY": ""})
    assert not live_server_configured({"CLEARML_API_HOST": "https://api.example"})


# -- stand-in only: requests, push-down, faults -----------------------------------------------------


def test_requests_per_operation_are_few(clearml_standin, run_task) -> None:
    _, registry = run_task
    registry.records.create_pending(_info(_run(registry), "warm_up.pt"), uri="file:///x.pt")  # project looked up once
    with clearml_standin.count() as create:
        record = registry.records.create_pending(_info(_run(registry), "best_model_1.pt"), uri="file:///x.pt")
    with clearml_standin.count() as commit:
        registry.records.make_live(record.id, sha256=SHA, size=10)
    with clearml_standin.count() as evict:
        registry.records.evict(record.id)
    with clearml_standin.count() as get:
        registry.records.get(record.id)
    old = _commit(registry, "best_model_2.pt")
    new = registry.records.create_pending(_info(_run(registry), "best_model_3.pt"), uri="file:///x.pt")
    with clearml_standin.count() as stage:
        registry.records.supersede(new.id, sha256=SHA, size=10, replaces=old.id)
    assert [c.endpoint for c in create] == ["models.create", "models.add_or_update_metadata"]
    assert [c.endpoint for c in commit] == [
        "models.get_by_id",
        "models.add_or_update_metadata",
        "models.edit",
        "tasks.add_or_update_model",
    ]
    # leaving live: what ClearML shows first, the state last
    assert [c.endpoint for c in evict] == [
        "models.get_by_id",
        "models.edit",
        "tasks.delete_models",
        "models.add_or_update_metadata",
    ]
    assert len(get) == 1
    assert [c.endpoint for c in stage] == [
        "models.get_all",
        "models.add_or_update_metadata",
        "models.edit",
        "tasks.delete_models",
        "models.add_or_update_metadata",
    ]


def test_another_process_evicting_reads_the_task_before_taking_a_model_off(clearml_standin, run_task) -> None:
    task, first = run_task
    old = _commit(first, "checkpoint_5.pt", stream="checkpoint")
    second = ClearMLRegistry(task, project_root=first.transport.root)  # e.g. the run resumed in a new process
    newer = _commit(second, "checkpoint_5.pt", stream="checkpoint", slot=1)  # same filename saved again
    third = ClearMLRegistry(task, project_root=first.transport.root)  # knows nothing of either listing
    with clearml_standin.count("tasks\\.") as calls:
        third.records.evict(old.id)
    assert [c.endpoint for c in calls] == ["tasks.get_all"]  # the entry names the newer model: keep it
    assert _listed(task) == [newer.id]
    with clearml_standin.count("tasks\\.") as calls:
        third.records.evict(newer.id)
    assert [c.endpoint for c in calls] == ["tasks.get_all", "tasks.delete_models"]
    assert _listed(task) == []


def test_query_pushes_project_run_stream_state_and_string_equality_to_the_server(clearml_standin) -> None:
    registry = ClearMLRegistry(project_root=_root())
    for step in range(3):
        live(registry, f"best_model_{step}.pt", slot=step, global_step=step, score=0.1 * step, prefix="best")
    live(registry, "checkpoint_1.pt", stream="checkpoint", prefix="")
    query = Query(
        project="p",
        run="r",
        stream="best_model",
        states=(RecordState.LIVE,),
        where=parse_where({"prefix": "best", "score": (">", 0.05), "note": "-1"}),
        order_by=parse_order("-score"),
    )
    with clearml_standin.count("models\\.get_all") as calls:
        got = registry.records.query(dataclasses.replace(query, where=query.where[:2]))
    assert [r.global_step for r in got] == [2, 1]
    call, aliases = calls  # the query, then one for the aliases of its streams (a where narrows it)
    assert aliases.data["metadata.state.value"] == ["live", "revived"]
    assert call.data["metadata.run.value"] == ["r"] and call.data["metadata.stream.value"] == ["best_model"]
    assert call.data["metadata.state.value"] == ["live"] and call.data["metadata.prefix.value"] == ["best"]
    assert "metadata.score.value" not in call.data  # ranges and numbers are filtered client-side
    with clearml_standin.count("models\\.get_all") as calls:
        assert registry.records.query(query) == []
    assert "metadata.note.value" not in calls[0].data  # "-1" would be an exclusion to the server


def test_leaving_live_hides_the_model_from_clearml_before_the_state_changes(clearml_standin, run_task) -> None:
    """Away from loadable, a failed last step (the state) leaves a model that only looks less loadable."""
    from clearml import Model

    task, registry = run_task
    record = _commit(registry, "checkpoint_1.pt", stream="checkpoint")
    clearml_standin.fail(r"models\.add_or_update_metadata", msg="mongo is down")
    with pytest.raises(RegistryError, match=rf"marking model {record.id} .*evicted failed with 500/0 \(mongo is down"):
        registry.records.evict(record.id)
    model = Model(record.id)
    assert "archived" in model.system_tags and "evicted" in model.tags and not model.url
    assert _listed(task) == [] and Model.query_models(project_name=task.get_project_name()) == []
    assert registry.records.get(record.id).state is RecordState.LIVE  # the truth did not change
    assert registry.records.evict(record.id).state is RecordState.EVICTED  # and the eviction can be retried

    pending = registry.records.create_pending(
        _info(_run(registry), "checkpoint_2.pt", stream="checkpoint"), uri="file:///x.pt"
    )
    clearml_standin.fail(r"models\.add_or_update_metadata")
    with pytest.raises(RegistryError, match="injected fault"):
        registry.records.fail(pending.id, "OSError: disk full")
    assert "failed" in Model(pending.id).tags and "archived" in Model(pending.id).system_tags
    assert registry.records.get(pending.id).state is RecordState.PENDING


def test_becoming_live_writes_the_state_before_clearml_shows_it(clearml_standin, run_task) -> None:
    """Toward loadable, the state is the commit point: a failed follow-up leaves the model looking less loadable."""
    from clearml import Model

    task, registry = run_task
    record = registry.records.create_pending(
        _info(_run(registry), "checkpoint_1.pt", stream="checkpoint"), uri="file:///x.pt"
    )
    clearml_standin.fail(r"models\.edit")
    with pytest.raises(RegistryError, match=f"updating model {record.id} failed"):
        registry.records.make_live(record.id, sha256=SHA, size=10)
    assert registry.records.get(record.id).state is RecordState.LIVE
    assert "archived" in Model(record.id).system_tags and not Model(record.id).url and _listed(task) == []


def test_an_evicted_model_cannot_be_downloaded_through_clearml(run_task, tmp_path) -> None:
    """ClearML's own get_weights() would fetch whatever the slot holds now: an evicted model has no uri."""
    from clearml import InputModel, Model

    task, registry = run_task
    slot = tmp_path / "best_model.slot0.pt"
    slot.write_bytes(b"checkpoint bytes")
    record = registry.records.create_pending(_info(_run(registry), "best_model_1.pt"), uri=slot.as_uri())
    registry.records.make_live(record.id, sha256=SHA, size=16)
    assert Model(record.id).url == slot.as_uri() and InputModel(record.id).get_weights()
    evicted = registry.records.evict(record.id)
    assert not Model(record.id).url and not InputModel(record.id).get_weights()
    assert evicted.uri == registry.records.get(record.id).uri == slot.as_uri()  # the record keeps it, for history
    assert Model(record.id).get_metadata("uri") == slot.as_uri()
    registry.records.restore(record.id, RecordState.REVIVED)
    assert Model(record.id).url == slot.as_uri() and _listed(task) == [record.id]


def test_stage_notes_the_digest_then_evicts_the_replaced_record(run_task) -> None:
    task, registry = run_task
    old = _commit(registry, "best_model_1.pt")
    new = registry.records.create_pending(_info(_run(registry), "best_model_2.pt"), uri="file:///x.pt")
    registry.records.supersede(new.id, sha256="cd" * 32, size=42, replaces=old.id)
    staged = registry.records.get(new.id)
    assert (staged.state, staged.sha256, staged.size) == (RecordState.PENDING, "cd" * 32, 42)
    assert "sha256" not in staged.metadata  # shown in metadata once committed, as in SQLite
    assert registry.records.get(old.id).state is RecordState.EVICTED and _listed(task) == []
    done = registry.records.make_live(new.id, sha256="cd" * 32, size=42)
    assert done.metadata["sha256"] == "cd" * 32 and _listed(task) == [new.id]


def test_stage_changes_nothing_when_the_slot_changed_under_it(run_task) -> None:
    from clearml import Model

    _, registry = run_task
    old = _commit(registry, "best_model_1.pt")
    gone = _commit(registry, "best_model_2.pt", slot=1)
    registry.records.evict(gone.id)
    new = registry.records.create_pending(_info(_run(registry), "best_model_3.pt"), uri="file:///x.pt")
    with pytest.raises(RegistryError, match=rf"record {gone.id}, which record {new.id} replaces .* is evicted"):
        registry.records.supersede(new.id, sha256=SHA, size=10, replaces=gone.id)
    assert registry.records.get(new.id).sha256 is None
    registry.records.fail(new.id, "OSError: disk full")
    with pytest.raises(RegistryError, match=rf"record {new.id} is failed, no longer pending"):
        registry.records.supersede(new.id, sha256=SHA, size=10, replaces=old.id)
    assert registry.records.get(old.id).state is RecordState.LIVE and Model(old.id).url
    with pytest.raises(RecordNotFoundError, match="0123abcd"):
        registry.records.supersede("0123abcd", sha256=SHA, size=10, replaces=old.id)


def test_a_replaced_record_deleted_by_another_client_is_logged_and_its_slot_reused(run_task, caplog) -> None:
    _, registry = run_task
    new = registry.records.create_pending(_info(_run(registry), "best_model_3.pt"), uri="file:///x.pt")
    with caplog.at_level("WARNING"):
        registry.records.supersede(new.id, sha256=SHA, size=10, replaces="0123abcd")  # deleted in the web UI, say
    assert "record 0123abcd, which record" in caplog.text and "no longer exists" in caplog.text
    assert registry.records.make_live(new.id, sha256=SHA, size=10).state is RecordState.LIVE


def test_infinite_scores_are_kept_exactly_and_nan_is_absent(run_task) -> None:
    _, registry = run_task
    record = _commit(registry, "best_model_1_acc=inf.pt", score=float("inf"), priority=float("-inf"),
                     other=float("nan"))  # fmt: skip
    got = registry.records.get(record.id)
    assert got.metadata["score"] == float("inf") and got.metadata["priority"] == float("-inf")
    assert got.metadata["other"] is None and got.score == float("inf")


def test_records_at_another_output_uri_are_another_stream(clearml_standin, run_task) -> None:
    _, registry = run_task
    run = _run(registry)
    for output_uri in ("file:///a", "s3://bucket/b"):
        for slot in (0, 1):
            info = dataclasses.replace(_info(run, f"best_model_{slot}.pt", slot=slot), output_uri=output_uri)
            registry.records.make_live(
                registry.records.create_pending(info, uri=f"{output_uri}/{info.key}").id, sha256=SHA, size=1
            )
    with clearml_standin.count("models\\.get_all") as calls:
        found = registry.records.query(
            Query(project="ckpts", run=run, stream="best_model", output_uri="s3://bucket/b", slot=1)
        )
    assert [(r.output_uri, r.slot, r.filename) for r in found] == [("s3://bucket/b", 1, "best_model_1.pt")]
    pushed = calls[0].data
    assert pushed["metadata.output_uri.value"] == ["s3://bucket/b"] and pushed["metadata.slot.value"] == ["1"]
    assert {r.output_uri for r in registry.records.query(Query(project="ckpts", run=run))} == {
        "file:///a",
        "s3://bucket/b",
    }


# -- stream claims -----------------------------------------------------------------------------------


class _Saver:
    """Stands for the saver that owns a holder (a holder lives as long as its owner)."""


def _stream(output_uri: str = "file:///out") -> StreamId:
    return StreamId(output_uri, "ckpts", "train-run", "best_model")


#: The project root of the claim tests' registry: the session shares the stand-in, and other tests'
#: savers leave claims of their own in it.
CLAIM_ROOT = _root()


def _claim_models(standin: Any) -> list[dict[str, Any]]:
    """The claims under :data:`CLAIM_ROOT`, whatever other tests left in the shared stand-in."""
    ours = {pid for pid, p in standin.projects.items() if p["name"].startswith(CLAIM_ROOT + "/")}
    return [
        m for m in standin.models.values()
        if m.get("project") in ours and any(t.startswith(CLAIM_TAG_PREFIX) for t in m.get("tags") or [])
    ]  # fmt: skip


def _dead_holder() -> Holder:
    """A holder on this host whose process has exited."""
    import subprocess
    import sys

    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return dataclasses.replace(new_holder(_Saver()), pid=done.pid, started=1)


@pytest.fixture
def claim_registry(clearml_standin):
    registry = ClearMLRegistry(project_root=CLAIM_ROOT)
    yield registry
    for model in _claim_models(clearml_standin):
        clearml_standin.models.pop(model["id"], None)


def test_a_stream_claimed_by_a_live_saver_is_busy_for_another(clearml_standin, claim_registry) -> None:
    first_owner, second_owner = _Saver(), _Saver()
    first, second = new_holder(first_owner), new_holder(second_owner)
    with clearml_standin.count() as calls:
        claim_registry.claims.claim(_stream(), first)
    assert [c.endpoint for c in calls if c.endpoint.startswith("models.")] == [
        "models.get_all",
        "models.create",
        "models.get_all",
    ]
    with pytest.raises(
        StreamBusyError,
        match=rf"ckpts/train-run/best_model at file:///out is being written by .*"
        rf"pid {os.getpid()} on .*close\(\) the other saver",
    ) as err:
        claim_registry.claims.claim(_stream(), second)
    assert err.value.holder == first.describe()
    (claim,) = _claim_models(clearml_standin)
    assert "archived" in claim["system_tags"] and "state" not in (claim.get("metadata") or {})
    assert claim_registry.records.query(Query()) == []  # a claim is never a record
    with pytest.raises(RecordNotFoundError, match="not a tracker_saver checkpoint record"):
        claim_registry.records.get(claim["id"])
    claim_registry.claims.claim(_stream("s3://bucket/other"), second)  # another output_uri is another stream
    assert len(_claim_models(clearml_standin)) == 2


def test_a_dead_savers_claim_is_taken_over(clearml_standin, claim_registry) -> None:
    owner = _Saver()
    dead, alive = _dead_holder(), new_holder(owner)
    claim_registry.claims.claim(_stream(), dead)
    (stale,) = _claim_models(clearml_standin)
    claim_registry.claims.claim(_stream(), alive)  # a restart right after a kill just works
    (claim,) = _claim_models(clearml_standin)
    assert claim["id"] != stale["id"] and f'"token": "{alive.token}"' in claim["comment"]


def test_a_claim_is_renewed_not_duplicated(clearml_standin, claim_registry) -> None:
    owner = _Saver()
    holder = new_holder(owner)
    claim_registry.claims.claim(_stream(), holder)
    before = json.loads(_claim_models(clearml_standin)[0]["comment"])["heartbeat"]
    with clearml_standin.count() as calls:
        claim_registry.claims.claim(_stream(), holder)
    assert [c.endpoint for c in calls if c.endpoint.startswith("models.")] == ["models.get_all", "models.edit"]
    (claim,) = _claim_models(clearml_standin)
    assert json.loads(claim["comment"])["heartbeat"] >= before


def test_a_released_stream_can_be_claimed_by_another_saver(clearml_standin, claim_registry) -> None:
    first_owner, second_owner = _Saver(), _Saver()
    first, second = new_holder(first_owner), new_holder(second_owner)
    claim_registry.claims.claim(_stream(), first)
    claim_registry.claims.release(_stream(), second)  # holds nothing: changes nothing
    assert len(_claim_models(clearml_standin)) == 1
    with clearml_standin.count() as calls:
        claim_registry.claims.release(_stream(), first)
    assert [c.endpoint for c in calls if c.endpoint.startswith("models.")] == ["models.get_all", "models.delete"]
    assert _claim_models(clearml_standin) == []
    claim_registry.claims.claim(_stream(), second)
    claim_registry.claims.release(StreamId("file:///out", "never-used", "r", "s"), second)  # no such project: nothing


def test_two_savers_claiming_at_once_leave_one_claim_the_oldest(clearml_standin, claim_registry, monkeypatch) -> None:
    """Both found the stream free; the later claim loses, deletes its model and says who won."""
    first_owner, second_owner = _Saver(), _Saver()
    first, second = new_holder(first_owner), new_holder(second_owner)
    claim_registry.claims.claim(_stream(), first)
    real, looks = claim_registry.claims._stream_claims, []

    def claims(*args: Any) -> Any:  # the second saver's first look came before the first saver's claim
        looks.append(args)
        return [] if len(looks) == 1 else real(*args)

    monkeypatch.setattr(claim_registry.claims, "_stream_claims", claims)
    with clearml_standin.count() as calls, pytest.raises(StreamBusyError) as err:
        claim_registry.claims.claim(_stream(), second)
    assert [c.endpoint for c in calls if c.endpoint.startswith("models.")] == [
        "models.create",
        "models.get_all",
        "models.delete",
    ]
    assert err.value.holder == first.describe()
    (claim,) = _claim_models(clearml_standin)
    assert f'"token": "{first.token}"' in claim["comment"]


def test_a_server_error_is_a_registry_error_naming_the_model(clearml_standin, run_task) -> None:
    _, registry = run_task
    record = _commit(registry, "checkpoint_1.pt", stream="checkpoint")
    clearml_standin.fail(r"models\.edit", code=500, msg="mongo is down")
    with pytest.raises(RegistryError, match=rf"updating model {record.id} failed with 500/0 \(mongo is down\)"):
        registry.records.evict(record.id)


class _RefusingSession:
    """A session whose every request fails the way requests does when the server is gone.

    (Patching the SDK's shared session instead would also break the SDK's own reporter, whose
    error log lines it then tries to send, and so on, without end.)
    """

    access_key = "STANDIN_ACCESS_KEY"
    secret_key = "s3cr3t-value"
    host = "http://127.0.0.1:1"
    _offline_mode = False

    def __init__(self) -> None:
        self.sent = 0

    def send(self, request: Any) -> Any:
        import requests

        self.sent += 1
        raise requests.ConnectionError(f"cannot reach http://{self.access_key}:{self.secret_key}@127.0.0.1:1/")


def test_a_connection_error_is_chained_and_never_shows_credentials(clearml_server: ClearMLServer) -> None:
    import requests

    registry = ClearMLRegistry(project_root=_root(), timeout=0.5)
    registry.transport._session = _RefusingSession()  # the server went away after the registry connected
    # A read is retried until the timeout; the last network error is chained under the outage.
    with pytest.raises(RegistryError, match="reading model 0123abcd failed: the server stopped answering") as err:
        registry.records.get("0123abcd")
    assert isinstance(err.value.__cause__.__cause__, requests.ConnectionError)
    assert "s3cr3t-value" not in str(err.value) and "STANDIN_ACCESS_KEY" not in str(err.value)
    # A create is never repeated after an unclear failure (it could make the model twice): it
    # fails at once, even with a long timeout.
    registry = ClearMLRegistry(project_root=_root(), timeout=60)
    info = _info(_run(registry), "checkpoint_1.pt")
    registry.records.fail(registry.records.create_pending(info, uri="file:///x.pt").id, "only to look the project up")
    registry.transport._session = refusing = _RefusingSession()
    with pytest.raises(RegistryError, match="creating .* failed .*cannot reach") as err:
        registry.records.create_pending(info, uri="file:///x.pt")
    assert refusing.sent == 1  # not retried: no wait for the timeout
    assert isinstance(err.value.__cause__, requests.ConnectionError)
    assert "s3cr3t-value" not in str(err.value) and "STANDIN_ACCESS_KEY" not in str(err.value)


def test_an_unreachable_server_fails_at_construction_with_the_fix(clearml_server: ClearMLServer, monkeypatch) -> None:
    from clearml.backend_interface.base import InterfaceBase

    monkeypatch.setattr(InterfaceBase, "_default_session", None)
    monkeypatch.setenv("CLEARML_API_HOST", "http://127.0.0.1:9")  # discard port: nothing listens
    monkeypatch.delenv("CLEARML_AUTH_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="cannot connect .*server is up.*CLEARML_API_HOST") as err:
        ClearMLRegistry(project_root=_root())  # fails at construction, before any training
    assert err.value.__cause__ is not None
    assert os.environ["CLEARML_API_SECRET_KEY"] not in str(err.value)


def test_the_registry_has_its_own_bounded_session_and_leaves_the_sdks_alone(clearml_server: ClearMLServer) -> None:
    """Our calls wait at most ``timeout``; the SDK's own session and configuration keep theirs."""
    from clearml.backend_api import Session
    from clearml.backend_interface.base import InterfaceBase
    from clearml.config import ConfigWrapper

    registry = ClearMLRegistry(project_root=_root(), timeout=12)
    session = registry.transport.session()
    sdk = InterfaceBase._get_default_session()
    assert isinstance(session, Session) and session is not sdk
    assert session._session_timeout == session._write_session_timeout == (2.0, 4.0)  # timeout/6, timeout/3
    assert session.config.get("api.http.wait_on_maintenance_forever", True) is False
    assert sdk._session_timeout == (10.0, 300.0)  # clearml's defaults, untouched
    user_config = ConfigWrapper._init()  # still clearml's own object, with the test config's retries
    assert type(user_config).__name__ == "Config" and user_config.get("api.http.retries.total", None) == 2
    assert registry.records.query(Query(project="nothing-here")) == []  # and it works


def test_opening_the_registrys_session_never_walks_the_stack(
    clearml_server: ClearMLServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK names a session's logger after its caller's file, found by ``inspect.stack()``, which
    reads the source of every frame (about a tenth of the ClearML tests' CPU): the registry names it."""
    import inspect

    walks = []
    real = inspect.stack
    monkeypatch.setattr(inspect, "stack", lambda *a, **k: walks.append(1) or real(*a, **k))
    session = ClearMLRegistry(project_root=_root()).transport.session()
    assert walks == [] and session._logger.name.endswith(".session"), session._logger.name


# -- the stand-in runs the real SDK ------------------------------------------------------------------


def test_the_stand_in_joins_tag_filters_like_clearml_server(clearml_project) -> None:
    """The registry pushes no tag filters because of this: on a live server it checks the server."""
    from clearml import Model

    task = init_task(clearml_project, "tag-filters")
    try:
        ids = {}
        for name, tags in (("has-a", ["a"]), ("has-b", ["b"]), ("has-a-b", ["a", "b"]), ("none-of", [])):
            model = Model(_output_model(task, name))
            model.tags = tags
            ids[name] = model.id

        def names(tags: list[str]) -> set[str]:
            found = {m.id for m in Model.query_models(project_name=clearml_project, tags=tags)}
            return {n for n, i in ids.items() if i in found}

        assert names(["a"]) == {"has-a", "has-a-b"}
        assert names(["-b"]) == {"has-a", "none-of"}
        assert names(["a", "-b"]) == {"has-a"}  # clearml-server 2.0: AND, "has a" and "lacks b"
        assert names(["__$any", "a", "-b"]) == {"has-a", "has-a-b"}  # '-b' is a tag after an operator
        assert names(["__$any", "a", "__$not", "b"]) == {"has-a", "has-a-b", "none-of"}  # OR: "has a" or "lacks b"
        assert names(["__$all", "a", "__$not", "b"]) == {"has-a"}
    finally:
        task.close()


def _output_model(task: Any, name: str) -> str:
    from clearml import OutputModel

    model = OutputModel(task=task, name=name, framework="PyTorch")
    model.update_weights(register_uri=f"file:///models/{name}.pt")
    return str(model.id)


def test_the_sdk_creates_tasks_models_and_queries_them(clearml_standin, clearml_project, tmp_path) -> None:
    from clearml import Model, OutputModel

    task = init_task(clearml_project, "sdk-task", output_uri=str(tmp_path))
    try:
        model = OutputModel(task=task, name="sdk model", framework="PyTorch")
        model.update_weights(register_uri="file:///models/sdk.pt")
        model.set_all_metadata({"global_step": {"value": 3, "type": "int"}, "score": {"value": 0.5, "type": "float"}})
        model.tags = ["stream:best", "sdk"]
        stored = clearml_standin.models[model.id]
        assert (stored["uri"], stored["task"], stored["tags"]) == (
            "file:///models/sdk.pt",
            task.id,
            ["sdk", "stream:best"],
        )
        assert stored["metadata"]["global_step"] == {"key": "global_step", "type": "int", "value": "3"}
        assert [e["model"] for e in clearml_standin.tasks[task.id]["models"]["output"]] == [model.id]
        found = Model.query_models(project_name=clearml_project, tags=["stream:best"], metadata={"global_step": "3"})
        assert [m.id for m in found] == [model.id]
        assert Model.query_models(project_name=clearml_project, metadata={"global_step": "4"}) == []
        Model(model.id).archive()
        assert Model.query_models(project_name=clearml_project) == []
        assert clearml_standin.models[model.id]["system_tags"] == ["archived"]
    finally:
        task.close()
    again = init_task(
        clearml_project, "sdk-task", continue_last_task=True, reuse_last_task_id=True, output_uri=str(tmp_path)
    )
    try:
        assert again.id == task.id and clearml_standin.tasks[task.id]["status"] == "in_progress"
    finally:
        again.close()
    assert clearml_standin.unknown_calls == []


def test_ignite_clearml_saver_runs_against_the_stand_in(clearml_standin, clearml_project, tmp_path) -> None:
    import torch
    from ignite.engine import Engine, Events
    from ignite.handlers import Checkpoint
    from ignite.handlers.clearml_logger import ClearMLLogger, ClearMLSaver

    out = tmp_path / "output"
    out.mkdir()
    logger = ClearMLLogger(
        project_name=clearml_project,
        task_name="ignite-run",
        output_uri=str(out),
        auto_connect_streams=False,
        auto_resource_monitoring=False,
        auto_connect_arg_parser=False,
    )
    try:
        engine = Engine(lambda engine, batch: None)
        saver = ClearMLSaver(logger, output_uri=str(out), dirname=str(tmp_path / "ckpt"))
        engine.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": torch.nn.Linear(2, 1)}, saver, n_saved=2))
        with clearml_standin.count() as calls:
            engine.run([0, 1], max_epochs=4)
        objects = sorted(p.name for p in out.rglob("*.pt"))
        assert objects == ["model_0.pt", "model_1.pt"]  # ClearMLSaver cycles 2 slots in one process
        task_id = logger._task.id
        models = [m for m in clearml_standin.models.values() if m["task"] == task_id]
        assert len(models) == 2 and all(m["uri"].endswith(("model_0.pt", "model_1.pt")) for m in models)
        assert 10 <= len(calls) / 4 <= 40  # the notes measured ~20 requests per save
    finally:
        logger.close()
        # ClearMLLogger.close() leaves its task the process's current one: clearml 1.16 then refuses
        # the next Task.init of another project ("Current task already created ...").
        logger._task.close()
    assert clearml_standin.unknown_calls == []
