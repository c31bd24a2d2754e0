"""What a person sees and changes in ClearML's own web app (issue 54), checked through the requests it sends.

1. Every metadata entry tracker_saver writes has a type the web app's metadata editor accepts.
   The editor (clearml-web, src/app/webapp-common/models/containers/model-info-metadata/
   model-info-metadata.component.html) puts Angular's ``required`` on each row's type input, so
   one empty type keeps SAVE disabled for the whole dict; the type is free text otherwise.
2. Each edit the web app offers is read back or refused, never lost: the exact request it sends
   (clearml-web v2.0, src/app/webapp-common/models/effects/models-info.effects.ts and
   models-menu.effects.ts; entity-delete/base-delete-dialog.effects.ts) is sent here over the
   SDK's session, and ``find_models``, the CLI, fsck and the saver's next save read it back.

They run on the stand-in (which refuses what the real server refuses: tests/clearml_standin/rules.py)
and, with CLEARML_API_HOST and both keys set, on a real server.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("clearml", reason="ClearML tests need clearml: pip install 'clearml>=1.16,<3' (the clearml extra)")

from tests.conftest_clearml import ClearMLApi, ClearMLServer  # noqa: E402
from tests.helpers import attach, model, trainer_engine  # noqa: E402
from tracker_saver import TrackerSaver, find_models, pin_model, set_alias  # noqa: E402
from tracker_saver.core.records import Record, RecordState  # noqa: E402

pytestmark = pytest.mark.clearml


@pytest.fixture
def api(clearml_api: ClearMLApi) -> ClearMLApi:
    return clearml_api


@pytest.fixture
def root(clearml_server: ClearMLServer) -> str:
    return f"tracker_saver-tests/{uuid.uuid4().hex[:12]}"


def _registry(root: str) -> str:
    return f"clearml:{root}"


def _all(root: str) -> list[Record]:
    return find_models(project="ckpts", states=list(RecordState), registry=_registry(root))


def _raw(api: ClearMLApi, record_id: str) -> dict[str, Any]:
    return dict(api.ok("models.get_by_id", model=record_id)["model"])


@pytest.fixture
def trained(root: str, tmp_path: Path) -> tuple[Any, list[Record]]:
    """Four epochs: a ``best`` stream with a score (n_saved=2) and a step stream without one (n_saved=1),
    so there are live and evicted records of both; ``more(epochs)`` trains on and closes."""
    saver = TrackerSaver(str(tmp_path / "out"), project="ckpts", run="run-1", registry=_registry(root))
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=2, prefix="best", scores=[0.5, 0.7, 0.6, 0.8, 0.9, 0.3])
    attach(trainer, saver, {"model": net}, n_saved=1)
    trainer.run([0], max_epochs=4)
    saver.flush()

    def more(epochs: int) -> None:
        trainer.run([0], max_epochs=epochs)
        saver.close()

    return more, sorted(_all(root), key=lambda r: r.created_at)


def _live(records: list[Record], stream: str) -> list[Record]:
    return [r for r in records if r.stream == stream and r.state is RecordState.LIVE]


# -- 1. types the metadata editor accepts ----------------------------------------------------------


def test_every_metadata_entry_of_every_kind_of_record_has_a_type_the_web_app_editor_accepts(
    api: ClearMLApi, root: str, trained: tuple[Any, list[Record]]
) -> None:
    _, records = trained
    best = _live(records, "best_model")[-1]
    pinned = pin_model(best.id, registry=_registry(root))
    aliased = set_alias(_live(records, "model")[0].id, "production", registry=_registry(root))
    everyone = _all(root)
    states = {r.state for r in everyone}
    assert {RecordState.LIVE, RecordState.EVICTED, RecordState.PINNED} <= states
    assert any(r.score is None for r in everyone) and any(r.score is not None for r in everyone)
    assert "production" in aliased.aliases and pinned.state is RecordState.PINNED
    for record in everyone:
        metadata = _raw(api, record.id)["metadata"]
        untyped = sorted(k for k, item in metadata.items() if not str(item.get("type") or "").strip())
        assert untyped == [], f"{record.state.value} record {record.name}: the editor cannot save {untyped}"


def test_an_absent_value_reads_back_as_absent_and_entries_written_with_an_empty_type_still_read(
    api: ClearMLApi, root: str, trained: tuple[Any, list[Record]]
) -> None:
    _, records = trained
    step = _live(records, "model")[0]
    stored = _raw(api, step.id)["metadata"]
    assert stored["score_name"] == {"key": "score_name", "type": "None", "value": ""}
    assert step.metadata["score_name"] is None and step.score is None
    # what an earlier release wrote: an empty type and value
    api.ok("models.add_or_update_metadata", model=step.id, metadata=[{"key": "score_name", "type": "", "value": ""}])
    assert next(r for r in _all(root) if r.id == step.id).metadata["score_name"] is None


# -- 2. each edit, as the web app sends it ---------------------------------------------------------


def test_the_metadata_editor_saving_the_whole_dict_with_models_edit_is_read_back_and_kept(
    api: ClearMLApi, root: str, trained: tuple[Any, list[Record]]
) -> None:
    more, records = trained
    first = _live(records, "best_model")[-1]
    # The editor sends every row back as it was, plus the rows a person added or changed, keyed by key.
    rows = dict(_raw(api, first.id)["metadata"])
    rows["reviewer"] = {"key": "reviewer", "type": "str", "value": "ana"}
    rows["score_name"] = {"key": "score_name", "type": "None", "value": "val acc"}
    api.ok("models.edit", model=first.id, metadata=rows)
    got = next(r for r in _all(root) if r.id == first.id)
    assert (got.metadata["reviewer"], got.metadata["score_name"], got.state) == ("ana", "val acc", RecordState.LIVE)
    assert got.metadata["global_step"] == first.metadata["global_step"] and got.score == first.score
    more(5)  # later saves evict other records and leave this edit alone
    got = next(r for r in _all(root) if r.id == first.id)
    assert got.metadata["reviewer"] == "ana" and got.score == first.score


def test_tags_added_and_removed_in_the_table_with_models_update_tags_are_read_back(
    api: ClearMLApi, root: str, trained: tuple[Any, list[Record]], capsys: pytest.CaptureFixture[str]
) -> None:
    from tracker_saver.cli import main

    more, records = trained
    first = _live(records, "best_model")[-1]
    api.ok("models.update_tags", ids=[first.id], add_tags=["reviewed", "alias:production"])
    got = next(r for r in _all(root) if r.id == first.id)
    assert got.tags == ("reviewed",) and "production" in got.aliases  # an alias: tag set there is an alias
    assert main(["models", "list", "--project", "ckpts", "--registry", _registry(root), "--json"]) == 0
    listed = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed[first.id]["tags"] == ["reviewed"] and "production" in listed[first.id]["aliases"]
    api.ok("models.update_tags", ids=[first.id], remove_tags=["reviewed"])
    more(5)
    got = next(r for r in _all(root) if r.id == first.id)
    assert got.tags == () and "production" in got.aliases


def test_a_checkpoint_published_in_the_web_app_stays_live_and_is_a_draft_again_once_evicted(
    api: ClearMLApi, root: str, trained: tuple[Any, list[Record]]
) -> None:
    more, records = trained
    first = _live(records, "best_model")[0]
    # The web app's Publish sends models.publish_many {ids} (the server's publish_task defaults to true;
    # this run has no task to publish).
    api.ok("models.publish_many", ids=[first.id])
    assert _raw(api, first.id)["ready"] is True
    assert next(r for r in _all(root) if r.id == first.id).state is RecordState.LIVE
    more(6)  # Ignite evicts it at epoch 5: the server still takes edits of a published model
    got = next(r for r in _all(root) if r.id == first.id)
    raw = _raw(api, first.id)
    assert got.state is RecordState.EVICTED and "evicted" in raw["tags"] and "archived" in raw["system_tags"]
    assert raw["uri"] in ("", None) and raw["ready"] is False  # its bytes are gone: a Draft, not Published


def test_a_pinned_record_shows_as_published_and_a_slot_record_as_draft(
    api: ClearMLApi, root: str, trained: tuple[Any, list[Record]]
) -> None:
    _, records = trained
    live = _live(records, "best_model")[-1]
    pinned = pin_model(live.id, registry=_registry(root))
    aliased = set_alias(_live(records, "model")[0].id, "production", registry=_registry(root))
    assert aliased.state is RecordState.PINNED  # an alias lives on a pin
    assert (_raw(api, pinned.id)["ready"], _raw(api, aliased.id)["ready"]) == (True, True)
    assert _raw(api, live.id)["ready"] is False
