"""MLflow's UI is a second writer: what a person edits there is read back, or skipped and reported, never fatal.

In MLflow's UI a person edits a LoggedModel's tags as plain text (issue 41, case 3). These tests
make each edit as the UI does, through ``MlflowClient.set_logged_model_tags`` against a real
``mlflow server``, then read the records back through ``find_models``, the registry, fsck and
a saver's start-up.

What a person can change on a LoggedModel in MLflow's UI, and what tracker_saver does:

* ``tracker_saver.name`` (any text): read back as the record's new name, as a rename;
* another ``tracker_saver.*`` tag into something we cannot read: the record is skipped by
  queries with one warning naming it, ``get`` refuses it with the fix, ``fsck`` reports it;
* a tag of their own (not ``tracker_saver.*``): not ours, ignored;
* delete the model: the record is gone (``get`` says so; its slot object is an orphan to fsck).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

pytest.importorskip("mlflow", reason="MLflow tests need mlflow: pip install 'mlflow>=3.9,<4' (the mlflow extra)")

from tests.conftest_mlflow import own_registry  # noqa: E402
from tests.contracts.records import live  # noqa: E402
from tests.helpers import attach, model, train, trainer_engine  # noqa: E402
from tracker_saver import StreamOwnedError, TrackerSaver, UnreadableRecordError, find_models  # noqa: E402
from tracker_saver.fsck import check  # noqa: E402
from tracker_saver.integrations.mlflow.registry import MLflowRegistry  # noqa: E402

pytestmark = pytest.mark.mlflow


@pytest.fixture
def reg(mlflow_server: str) -> MLflowRegistry:
    return own_registry(mlflow_server, timeout=20)


def _client(reg: MLflowRegistry):  # noqa: ANN202 (mlflow's type)
    from mlflow import MlflowClient

    return MlflowClient(reg.tracking_uri)


def _as_schema_1(reg: MLflowRegistry, record_id: str) -> None:
    """Rewrite a record's tags as tracker_saver 0.1 wrote them: every value JSON, no schema tag."""
    client = _client(reg)
    tags = client.get_logged_model(record_id).tags
    old = {k: json.dumps(_plain(k, v), sort_keys=True, separators=(",", ":")) for k, v in tags.items()
           if k.startswith("tracker_saver.") and k != "tracker_saver.schema"}  # fmt: skip
    client.delete_logged_model_tag(record_id, "tracker_saver.schema")
    client.set_logged_model_tags(record_id, old)


def _plain(key: str, text: str) -> object:
    if key.endswith((".metadata", ".tags")):
        return json.loads(text)
    if key.endswith((".slot", ".size")):
        return int(text)
    return float(text) if key.endswith(".created_at") else text


def test_the_tags_people_read_are_plain_text(reg: MLflowRegistry) -> None:
    record = live(reg, "best_model_3_acc=0.91.pt")
    tags = _client(reg).get_logged_model(record.id).tags
    assert tags["tracker_saver.name"] == "best_model_3_acc=0.91.pt"
    assert (tags["tracker_saver.state"], tags["tracker_saver.slot"], tags["tracker_saver.schema"]) == ("live", "0", "2")


def test_a_name_typed_in_mlflows_ui_is_the_records_new_name(reg: MLflowRegistry) -> None:
    record = live(reg, "best_model_3_acc=0.91.pt")
    _client(reg).set_logged_model_tags(record.id, {"tracker_saver.name": "the one we ship"})
    assert reg.records.get(record.id).name == "the one we ship"
    assert [r.name for r in find_models(registry=reg)] == ["the one we ship"]


def test_a_record_written_by_0_1_is_read_and_its_hand_typed_name_too(reg: MLflowRegistry) -> None:
    record = reg.records.get(live(reg, "best_model_1_acc=0.5.pt").id)
    _as_schema_1(reg, record.id)
    assert _client(reg).get_logged_model(record.id).tags["tracker_saver.name"] == '"best_model_1_acc=0.5.pt"'
    assert reg.records.get(record.id) == record
    _client(reg).set_logged_model_tags(record.id, {"tracker_saver.name": "hand typed, no quotes"})
    assert reg.records.get(record.id).name == "hand typed, no quotes"
    evicted = reg.records.evict(record.id)  # a later change is written in the record's own schema
    assert (
        evicted.state.value == "evicted"
        and _client(reg).get_logged_model(record.id).tags["tracker_saver.state"] == '"evicted"'
    )
    assert find_models(states=["evicted"], registry=reg)[0].name == "hand typed, no quotes"


def test_a_tag_edited_into_nonsense_skips_the_record_with_one_warning(
    reg: MLflowRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    broken, kept = live(reg, "a_1.pt"), live(reg, "a_2.pt", slot=1)
    _client(reg).set_logged_model_tags(broken.id, {"tracker_saver.slot": "first"})
    with caplog.at_level(logging.WARNING):
        assert [r.id for r in find_models(registry=reg)] == [kept.id]
        assert [r.id for r in find_models(registry=reg)] == [kept.id]
    assert [r.getMessage() for r in caplog.records if broken.id in r.getMessage()] == [
        f"{reg.uri}: skipped record {broken.id}, which cannot be read: its tag tracker_saver.slot is 'first', "
        "not what tracker_saver writes"
    ]
    with pytest.raises(UnreadableRecordError, match=f"record {broken.id} cannot be read: .*put the tag back"):
        reg.records.get(broken.id)
    report = check(reg)
    assert [(f.kind, f.record_id) for f in report.problems if f.kind == "unreadable"] == [("unreadable", broken.id)]


def test_a_saver_starts_and_saves_beside_a_record_edited_by_hand(reg: MLflowRegistry, tmp_path: Path) -> None:
    saver = TrackerSaver(tmp_path / "out", project="p", run="r", registry=reg)
    train(saver, {"model": model()}, n_saved=2, epochs=2)
    saver.close()
    first = find_models(project="p", registry=reg)[0]
    _client(reg).set_logged_model_tags(first.id, {"tracker_saver.state": "whatever"})
    again = TrackerSaver(tmp_path / "out", project="p", run="r", registry=reg)  # start-up recovery reads the run
    train(again, {"model": model()}, n_saved=2, epochs=1)
    again.close()
    # The edited record is skipped; its slot is left alone (its state unknown), the other is reused: no third object.
    assert [r.filename for r in find_models(project="p", live=True, registry=reg)] == ["model_1.pt"]
    assert len(list((tmp_path / "out" / "p" / "r").iterdir())) == 2


def test_an_mlflow_stream_refuses_a_saver_with_another_registry(reg: MLflowRegistry, tmp_path: Path) -> None:
    out = tmp_path / "shared"
    train(TrackerSaver(out, project="p", run="r", registry=reg), {"model": model()}, n_saved=1).save_handler.close()
    with pytest.raises(StreamOwnedError, match=rf"belongs to another registry: {reg.uri} \(registry id [0-9a-f]{{32}}"):
        train(TrackerSaver(out, project="p", run="r", registry=tmp_path / "mine.db"), {"model": model()}, n_saved=1)


def test_an_evicted_record_written_before_descriptions_is_read_and_described_at_its_next_change(
    reg: MLflowRegistry,
) -> None:
    record = live(reg, "best_model_3_acc=0.91.pt")
    evicted = reg.records.evict(record.id)
    client = _client(reg)
    client.finalize_logged_model(record.id, "FAILED")  # as 0.2 wrote an evicted record: Failed, no description
    client.delete_logged_model_tag(record.id, "mlflow.note.content")
    assert reg.records.get(record.id) == evicted
    assert [r.id for r in find_models(states=["evicted"], registry=reg)] == [record.id]
    reg.records.restore(record.id)
    model = client.get_logged_model(record.id)
    assert str(model.status) == "READY"
    assert model.tags["mlflow.note.content"].startswith("**best_model_3_acc=0.91.pt** · live")


def test_a_live_checkpoint_deleted_in_mlflow_during_a_run_is_named_by_the_next_save_which_goes_on(
    reg: MLflowRegistry, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The page's Delete (``DELETE .../logged-models/{id}``, as tests/test_mlflow_webapp.py clicks it) while a run trains."""
    saver, net = TrackerSaver(tmp_path / "out", project="p", run="r", registry=reg), model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=1)
    trainer.run([0], max_epochs=1)
    (gone,) = find_models(project="p", live=True, registry=reg)
    _client(reg).delete_logged_model(gone.id)
    with caplog.at_level(logging.WARNING, logger="tracker_saver"):
        trainer.run([0], max_epochs=2)  # the same Checkpoint: Ignite removes model_1.pt, then saves model_2.pt
    saver.close()
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"record {gone.id}" in line and "no longer exists" in line for line in said), said
    assert [r.filename for r in find_models(project="p", live=True, registry=reg)] == ["model_2.pt"]
    assert [p.name for p in (tmp_path / "out" / "p" / "r").iterdir()] == ["model.slot0.pt"]
    assert check(reg, project="p").problems == []
