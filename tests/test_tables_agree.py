"""Tables that agree with the records: `runs list` counts live slot records and the newest save, never a pin."""

from __future__ import annotations

import contextlib
import io
import json

from tests.helpers import Target, attach, model, trainer_engine
from tracker_saver import find_models, pin_model
from tracker_saver.cli.main import main


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
