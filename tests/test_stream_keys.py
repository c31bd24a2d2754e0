"""A stream owns its own slot keys only, even beside a stream named ``"<its name>.slot<k><ext>…"``.

Ignite's basename is ``{filename_prefix}_{name}``, so ``filename_prefix="model.slot0.pt"`` makes
a stream ``model.slot0.pt_model`` whose keys start as stream ``model``'s do. The pipeline (a
stream's first save), recovery and fsck read a key with ``naming.parse_slot_key`` alone.
"""

from __future__ import annotations

from pathlib import Path

from ignite.engine import Engine
from ignite.handlers import Checkpoint

from tests.helpers import model
from tracker_saver import TrackerSaver
from tracker_saver.core.naming import parse_slot_key, slot_key
from tracker_saver.core.records import StreamId
from tracker_saver.fsck import check
from tracker_saver.registry import open_registry
from tracker_saver.save.recovery import leftovers, owner_of
from tracker_saver.storage import open_storage

TWIN = "model.slot0.pt_model"  # the basename of Checkpoint(..., filename_prefix="model.slot0.pt")


def _save_both(out: Path, registry: Path, epochs: int = 2) -> None:
    saver = TrackerSaver(out, project="p", run="r", registry=registry)
    net, engine = model(), Engine(lambda e, b: None)
    plain = Checkpoint({"model": net}, saver, n_saved=1)
    twin = Checkpoint({"model": net}, saver, n_saved=1, filename_prefix="model.slot0.pt")
    for epoch in range(1, epochs + 1):
        engine.state.epoch = engine.state.iteration = epoch
        plain(engine)
        twin(engine)
    saver.close()


def test_a_key_belongs_to_the_stream_whose_path_it_spells() -> None:
    plain, twin = StreamId("file:///o", "p", "r", "model"), StreamId("file:///o", "p", "r", TWIN)
    key = slot_key("p", "r", TWIN, 0, ".pt")
    assert key == "p/r/model.slot0.pt_model.slot0.pt"
    assert parse_slot_key(key) is not None and owner_of(key, [plain]) is None and owner_of(key, [plain, twin]) == twin


def test_fsck_counts_each_streams_objects_apart(tmp_path: Path) -> None:
    _save_both(tmp_path / "out", tmp_path / "registry.db")
    assert sorted(p.name for p in (tmp_path / "out" / "p" / "r").iterdir()) == [
        "model.slot0.pt",
        "model.slot0.pt_model.slot0.pt",
    ]
    report = check(open_registry(tmp_path / "registry.db"))
    assert len(report.streams) == 2 and report.problems == [], report


def test_a_streams_first_save_removes_its_own_leftovers_and_not_its_twins(tmp_path: Path) -> None:
    def save() -> None:
        saver = TrackerSaver(tmp_path / "out", project="p", run="r", registry=tmp_path / "registry.db")
        Checkpoint({"model": model()}, saver, n_saved=1)(Engine(lambda e, b: None))
        saver.close()

    save()  # the stream exists and is this registry's
    storage = open_storage(tmp_path / "out")
    mine, twins = (
        storage.stage(slot_key("p", "r", "model", 0, ".pt")),
        storage.stage(slot_key("p", "r", TWIN, 0, ".pt")),
    )
    plain = StreamId(storage.uri, "p", "r", "model")
    assert [item.key for item in leftovers(storage, plain)] == [mine.key]  # a kill left them, say
    save()  # a new process: its stream's first save settles what the stream left
    assert [item.key for item in storage.staged("p/r/")] == [twins.key]  # the twin's write is not ours to end
    twins.abort()
