"""Tables that agree with the records: `runs list` counts live slot records and the newest save, never a pin."""

from __future__ import annotations

import contextlib
import io
import json

from tests.helpers import Target, attach, model, trainer_engine
from tracker_saver import find_models, pin_model
from tracker_saver.cli.main import main
from tracker_saver.core.records import Record, UploadInfo
from tracker_saver.registry import open_registry


def test_runs_list_counts_a_pinned_copy_neither_as_live_nor_as_the_last_save(local_target: Target) -> None:
    saver = local_target.saver()
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=3)
    trainer.run([0], max_epochs=4)
    saver.close()
    slot_records = find_models(project="p", registry=local_target.registry)
    live = next(r for r in slot_records if r.state.loadable)
    pin_model(live.id, registry=local_target.registry)  # after the last save: the newest record
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["runs", "list", "--json", "--registry", local_target.registry]) == 0
    (row,) = json.loads(out.getvalue())
    assert (row["records"], row["live"]) == (5, 3)  # 4 saves (one evicted) and the pin; 3 slots
    assert row["last_save"] == max(r.created_at for r in slot_records)


def test_a_pins_pinned_from_is_the_source_record_id_as_a_string_and_an_older_int_pin_is_still_reused(
    local_target: Target,
) -> None:
    saver = local_target.saver()
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=2)
    trainer.run([0], max_epochs=2)
    saver.close()
    first, second = find_models(project="p", live=True, registry=local_target.registry)
    pinned = pin_model(first.id, registry=local_target.registry)
    assert pinned.metadata["pinned_from"] == first.id  # a string, as every record id
    registry = open_registry(local_target.registry)
    old_pin = _pin_info(second, int(second.id), "0123456789abcdef-old.pt")
    older = registry.labels.create_pinned(old_pin, uri="file:///x", sha256=second.sha256 or "", size=second.size or 0)
    again = _pin_info(second, second.id, "fedcba9876543210-new.pt")
    reused = registry.labels.create_pinned(
        again, uri="file:///y", sha256=second.sha256 or "", size=second.size or 0, once=True
    )
    assert reused.id == older.id  # a pin an earlier release made (an int pinned_from) is the same record's pin


def _pin_info(source: Record, pinned_from: str | int, name: str) -> UploadInfo:
    """A pin's info for ``source`` with ``pinned_from`` as given (an int: as a pin of an earlier build)."""
    return UploadInfo(
        "p",
        "r",
        source.stream,
        source.filename,
        metadata={"pinned_from": pinned_from},
        slot=None,
        key=f"p/r/+pinned/{name}",
        output_uri=source.output_uri,
    )
