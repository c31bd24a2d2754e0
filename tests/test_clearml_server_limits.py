"""What the real clearml-server refuses, and how the ClearML registry lives with it (issue 40).

1. Metadata keys: the server refuses ``key``, ``type``, ``value`` (and ``S``, empty ones) in
   ``models.add_or_update_metadata``. Records keep the slot key under ``slot_key`` (old records'
   ``key`` is still read), and a user's own refused key is stored escaped (``~type``) and read back
   as the user wrote it.
2. Finished tasks: the server changes a task's model list only while it is ``created`` or
   ``in_progress``. A model saved, evicted or pinned under a finished task is linked by its
   ``task`` field only, and the task is left alone.
3. The web UI is a writer: a model renamed, re-tagged, given metadata, archived or deleted through
   the calls ClearML's web UI makes is read back by ``find_models`` and kept by later saves.

They run on the stand-in (which refuses what the real server refuses: tests/clearml_standin/rules.py)
and, with CLEARML_API_HOST and both keys set, on a real server.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("clearml", reason="ClearML tests need clearml: pip install 'clearml>=1.16,<3' (the clearml extra)")

from tests.conftest_clearml import ClearMLApi, ClearMLServer, init_task  # noqa: E402
from tests.contracts.records import SHA  # noqa: E402
from tests.helpers import attach, model, trainer_engine  # noqa: E402
from tracker_saver import TrackerSaver, find_models, get_model  # noqa: E402
from tracker_saver.core.records import RecordState, UploadInfo  # noqa: E402
from tracker_saver.integrations.clearml.registry import ClearMLRegistry, task_run  # noqa: E402

pytestmark = pytest.mark.clearml


@pytest.fixture
def api(clearml_api: ClearMLApi) -> ClearMLApi:
    return clearml_api


@pytest.fixture
def root(clearml_server: ClearMLServer) -> str:
    return f"tracker_saver-tests/{uuid.uuid4().hex[:12]}"


def _saver(root: str, tmp_path: Path, **kwargs: Any) -> TrackerSaver:
    return TrackerSaver(str(tmp_path / "out"), project="ckpts", run="run-1", registry=f"clearml:{root}", **kwargs)


def _train(saver: TrackerSaver, epochs: int, n_saved: int = 2) -> None:
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=n_saved, prefix="best")
    trainer.run([0], max_epochs=epochs)


def _raw(api: ClearMLApi, record_id: str) -> dict[str, Any]:
    return dict(api.ok("models.get_by_id", model=record_id)["model"])


# -- 1. metadata keys -----------------------------------------------------------------------------


def test_a_first_save_keeps_the_slot_key_under_a_metadata_key_the_server_takes(api, root, tmp_path) -> None:
    saver = _saver(root, tmp_path)
    _train(saver, epochs=1)
    saver.close()
    (record,) = find_models(project="ckpts", registry=f"clearml:{root}")
    stored = _raw(api, record.id)["metadata"]
    assert "key" not in stored and stored["slot_key"]["value"] == record.key == "ckpts/run-1/best_model.slot0.pt"


def test_user_metadata_the_server_refuses_as_a_key_keeps_its_name(api, root, tmp_path) -> None:
    def label(info: UploadInfo) -> UploadInfo:
        info.metadata.update({"type": "resnet", "value": 0.5, "S": 2, " padded ": True, "~tilde": "t"})
        return info

    saver = _saver(root, tmp_path, pre_upload=[label])
    _train(saver, epochs=1)
    saver.close()
    (record,) = find_models(project="ckpts", where={"type": "resnet"}, registry=f"clearml:{root}")
    assert {k: record.metadata[k] for k in ("type", "value", "S", " padded ", "~tilde")} == {
        "type": "resnet", "value": 0.5, "S": 2, " padded ": True, "~tilde": "t"
    }  # fmt: skip
    stored = _raw(api, record.id)["metadata"]
    assert {"~type", "~value", "~S", "~%20padded%20", "~~tilde"} <= set(stored)
    assert not {"type", "value", "S"} & set(stored)


def test_records_written_with_the_old_key_spelling_stay_readable(api, root, tmp_path) -> None:
    saver = _saver(root, tmp_path)
    _train(saver, epochs=1)
    saver.close()
    (record,) = find_models(project="ckpts", registry=f"clearml:{root}")
    items = list(_raw(api, record.id)["metadata"].values())
    old = [{**i, "key": "key"} if i["key"] == "slot_key" else i for i in items]
    old.append({"key": "slot_key", "type": "str", "value": "a user's own"})  # then a user's key like any other
    api.ok("models.add_or_update_metadata", model=record.id, metadata=old, replace_metadata=True)  # how it was
    again = get_model(record.id, registry=f"clearml:{root}")
    assert again.key == record.key and again.metadata["slot_key"] == "a user's own"
    assert (again.state, again.slot, again.filename) == (record.state, record.slot, record.filename)


# -- 2. finished tasks ----------------------------------------------------------------------------


@pytest.fixture
def finished_task(clearml_server: ClearMLServer, root: str, tmp_path: Path):
    """A task that saved one live checkpoint (listed on it), then finished; its registry; the record."""
    task = init_task(f"{root}/ckpts", "train-run", output_uri=str(tmp_path))
    registry = ClearMLRegistry(task, project_root=root)
    first = _commit(registry, task, "best_model_1.pt", slot=0)
    task.close()
    task.reload()
    assert task.data.status not in ("created", "in_progress")
    return task, registry, first


def _info(task: Any, filename: str, slot: int) -> UploadInfo:
    run = task_run(task)
    return UploadInfo("ckpts", run, "best_model", filename, metadata={}, slot=slot,
                      key=f"ckpts/{run}/best_model.slot{slot}.pt")  # fmt: skip


def _commit(registry: ClearMLRegistry, task: Any, filename: str, slot: int) -> Any:
    record = registry.records.create_pending(_info(task, filename, slot), uri=f"file:///out/best_model.slot{slot}.pt")
    return registry.records.make_live(record.id, sha256=SHA, size=10)


def _listed(api: ClearMLApi, task: Any) -> list[str]:
    return [e["model"] for e in api.ok("tasks.get_by_id", task=task.id)["task"]["models"]["output"]]


def test_a_save_after_the_task_finished_is_linked_by_its_task_field_only(api, finished_task) -> None:
    task, registry, first = finished_task
    status = api.ok("tasks.get_by_id", task=task.id)["task"]["status"]
    late = _commit(registry, task, "best_model_2.pt", slot=1)
    assert late.state is RecordState.LIVE and _raw(api, late.id)["task"] == task.id
    assert _listed(api, task) == [first.id]  # the finished task's list is left as it was
    assert api.ok("tasks.get_by_id", task=task.id)["task"]["status"] == status


def test_evicting_under_a_finished_task_leaves_the_task_alone(api, finished_task) -> None:
    task, registry, first = finished_task
    evicted = registry.records.evict(first.id)
    assert evicted.state is RecordState.EVICTED
    assert "archived" in _raw(api, first.id)["system_tags"] and not _raw(api, first.id)["uri"]
    assert _listed(api, task) == [first.id]  # listed while it ran; the server changes no finished task


def test_a_pin_under_a_finished_task_does_not_fail(api, finished_task) -> None:
    task, registry, _ = finished_task
    pinned = registry.labels.create_pinned(_info(task, "best_model_1.pt", 0), uri="file:///out/pinned/best_model_1.pt",
                                    sha256=SHA, size=10)  # fmt: skip
    assert pinned.state is RecordState.PINNED and _raw(api, pinned.id)["task"] == task.id


# -- 3. the web UI's edits -------------------------------------------------------------------------


@pytest.fixture
def trained(root: str, tmp_path: Path) -> tuple[Any, list[Any]]:
    """Two epochs of ``best`` checkpoints (n_saved=3, both records live), and ``more(epochs)``: train on, close."""
    saver = _saver(root, tmp_path)
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=3, prefix="best")
    trainer.run([0], max_epochs=2)
    saver.flush()
    records = sorted(find_models(project="ckpts", registry=f"clearml:{root}"), key=lambda r: r.created_at)

    def more(epochs: int) -> None:
        trainer.run([0], max_epochs=epochs)
        saver.close()

    return more, records


def _found(root: str, record_id: str) -> Any:
    return next(r for r in find_models(project="ckpts", states=list(RecordState), registry=f"clearml:{root}")
                if r.id == record_id)  # fmt: skip


def test_a_model_renamed_and_retagged_in_the_web_ui_is_read_back_and_kept(api, root, trained) -> None:
    more, (first, _) = trained
    tags = _raw(api, first.id)["tags"]
    api.ok("models.update", model=first.id, name="the one we ship")
    api.ok("models.update", model=first.id, tags=[*tags, "reviewed"])
    assert _raw(api, first.id)["name"] == "the one we ship" and "reviewed" in _raw(api, first.id)["tags"]
    assert (_found(root, first.id).name, _found(root, first.id).tags) == ("the one we ship", ("reviewed",))
    more(3)  # a later save in the same stream
    got = _found(root, first.id)
    assert (got.name, got.tags, got.state) == ("the one we ship", ("reviewed",), RecordState.LIVE)


def test_metadata_edited_in_the_web_ui_is_read_back_and_kept(api, root, trained) -> None:
    more, (first, _) = trained
    items = [i for k, i in _raw(api, first.id)["metadata"].items() if k != "prefix"]
    items.append({"key": "reviewer", "type": "str", "value": "ana"})
    # The UI's metadata editor sends the whole list; its delete button sends the keys.
    api.ok("models.add_or_update_metadata", model=first.id, metadata=items, replace_metadata=True)
    api.ok("models.add_or_update_metadata", model=first.id, metadata=[{"key": "stage", "type": "str", "value": "qa"}])
    api.ok("models.delete_metadata", model=first.id, keys=["stage"])
    stored = _raw(api, first.id)["metadata"]
    assert stored["reviewer"]["value"] == "ana" and "prefix" not in stored and "stage" not in stored
    assert _found(root, first.id).metadata["reviewer"] == "ana"
    more(3)
    got = _found(root, first.id)
    assert got.metadata["reviewer"] == "ana" and "prefix" not in got.metadata and got.state is RecordState.LIVE


def test_a_model_archived_in_the_web_ui_is_read_back_and_later_saves_go_on(api, root, trained) -> None:
    more, (first, second) = trained
    api.ok("models.archive_many", ids=[first.id])
    assert "archived" in _raw(api, first.id)["system_tags"]
    assert _found(root, first.id).state is RecordState.LIVE  # metadata state is the truth; archive is the UI's
    more(3)
    assert "archived" in _raw(api, first.id)["system_tags"]  # kept by the later save
    assert {r.id for r in find_models(project="ckpts", live=True, registry=f"clearml:{root}")} >= {first.id, second.id}


def test_a_model_deleted_in_the_web_ui_is_gone_and_later_saves_go_on(api, root, trained) -> None:
    more, (first, second) = trained
    answer = api.ok("models.delete_many", ids=[first.id])
    assert answer["succeeded"][0]["id"] == first.id and answer["failed"] == []
    assert first.id not in {r.id for r in find_models(project="ckpts", states=list(RecordState),
                                                      registry=f"clearml:{root}")}  # fmt: skip
    more(5)  # Ignite removes the deleted one at epoch 4: its slot is reused
    live = find_models(project="ckpts", live=True, registry=f"clearml:{root}")
    assert sorted(r.global_step for r in live) == [3, 4, 5]


def test_a_state_edited_into_nonsense_in_the_web_ui_hides_the_model_and_fsck_names_its_object(
    api, root, trained
) -> None:
    from tracker_saver import UnreadableRecordError, get_model
    from tracker_saver.fsck import check
    from tracker_saver.registry import open_registry

    more, (first, second) = trained
    api.ok("models.add_or_update_metadata", model=first.id, metadata=[{"key": "state", "type": "str", "value": "meh"}])
    assert _raw(api, first.id)["metadata"]["state"]["value"] == "meh"
    # Queries select tracker_saver's models by their metadata state: this one is no longer among them.
    assert [r.id for r in find_models(project="ckpts", registry=f"clearml:{root}")] == [second.id]
    with pytest.raises(UnreadableRecordError, match=f"record {first.id} cannot be read: its metadata 'state' is 'meh'"):
        get_model(first.id, registry=f"clearml:{root}")
    more(3)  # the saver goes on beside it, then closes
    assert len(find_models(project="ckpts", live=True, registry=f"clearml:{root}")) == 2
    report = check(open_registry(f"clearml:{root}"), project="ckpts")
    assert [(f.kind, f.key) for f in report.problems] == [("orphan", first.key), ("over-slots", None)]  # named by fsck
