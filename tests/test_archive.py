"""Archival keeps (``keep_every``): pinned copies outside the slots, on schedule, limited, across restarts."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from ignite.engine import Engine
from ignite.handlers import Checkpoint

from tests.contracts.lifecycle import archived, entries_intact, untokened
from tests.helpers import SCORES, Target, attach, model, trainer_engine
from tracker_saver import (
    ConfigError,
    RecordState,
    TrackerSaver,
    find_models,
    get_model,
    pin_model,
    remove_alias,
    set_alias,
)
from tracker_saver.find import run_stats
from tracker_saver.fsck import check
from tracker_saver.lifecycle.aliases import unalias_note
from tracker_saver.lifecycle.schedule import KeepEvery
from tracker_saver.registry.shared import shared_registry


@pytest.mark.parametrize("async_upload", [False, True], ids=["sync", "async"])
def test_every_two_epochs_a_save_is_also_kept_outside_the_slots(local_target: Target, async_upload: bool) -> None:
    saver = local_target.saver(keep_every="2 epochs", async_upload=async_upload)
    copied_on: list[bool] = []  # whether each archive copy ran on the training thread
    copy = saver.storage.copy

    def spied(src: str, dst: str) -> None:  # the real copy, noting its thread
        copied_on.append(threading.current_thread() is threading.main_thread())
        copy(src, dst)

    saver.storage.copy = spied  # type: ignore[method-assign]
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=1)
    trainer.run([0], max_epochs=5)
    saver.close()
    assert archived(local_target) == [(2, "every 2 epochs"), (4, "every 2 epochs")]
    assert copied_on == [not async_upload] * 2  # with async_upload, the worker copies: the training thread never
    keys = sorted(untokened(o.key) for o in local_target.storage().list("p/r/"))
    assert keys == ["p/r/+pinned/model_2.pt", "p/r/+pinned/model_4.pt", "p/r/model.slot0.pt"]
    entries_intact(local_target)
    assert check(shared_registry(local_target.registry), project="p", deep=True).problems == []
    (row, _) = run_stats("p", "r", registry=local_target.registry)
    assert (row.count, row.slots, row.archive, row.pinned, row.objects) == (5, 1, 2, 0, 3)


def test_keep_every_max_deletes_the_oldest_entry_never_a_persons_pin_or_an_aliased_entry(
    local_target: Target,
) -> None:
    saver = local_target.saver(keep_every="1 epoch", keep_every_max=2)
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=1)
    trainer.run([0], max_epochs=2)
    first_entry = find_models(project="p", states=["pinned"], order_by="created_at", registry=local_target.registry)[0]
    persons = pin_model(first_entry.id, registry=local_target.registry)  # a copy of its own, which no limit touches
    aliased = set_alias(first_entry.id, "production", registry=local_target.registry)
    assert aliased.id == first_entry.id  # an archive entry is pinned: the alias goes on it as it is
    trainer.run([0], max_epochs=6)
    saver.close()
    kept = [at for at, _ in archived(local_target)]
    assert kept == [1, 5, 6]  # 1 holds an alias, so it stays and is not counted; 2, 3 and 4 went oldest first
    assert get_model(persons.id, registry=local_target.registry).state is RecordState.PINNED
    assert len(local_target.storage().list("p/r/+pinned/")) == 4  # 3 entries + the person's pin, nothing left over
    entries_intact(local_target)
    unaliased = remove_alias("p", "production", registry=local_target.registry)
    assert unalias_note("p", "production", unaliased) == (
        f"alias p@production removed; record {first_entry.id} ('model_1.pt') is an archive entry with no alias "
        f"again: keep_every_max may delete it (`tracker-saver models pin {first_entry.id}` keeps a copy of your own)"
    )


def test_a_restarted_saver_continues_the_schedule_from_the_registry(local_target: Target) -> None:
    saver = local_target.saver(keep_every="3 epochs")
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=1)
    trainer.run([0], max_epochs=4)
    saver.close()
    assert archived(local_target) == [(3, "every 3 epochs")]
    # A new process resumes the trainer at epoch 4: the next keep is at 6, not at 5 (as from zero).
    again = local_target.saver(keep_every="3 epochs")
    trainer2 = trainer_engine(model())
    attach(trainer2, again, {"model": model()}, n_saved=1)
    trainer2.load_state_dict({"epoch": 4, "epoch_length": 1, "max_epochs": 4})
    trainer2.run([0], max_epochs=8)
    again.close()
    assert archived(local_target) == [(3, "every 3 epochs"), (6, "every 3 epochs")]


def test_every_30_minutes_of_an_injected_clock_across_a_restart(local_target: Target) -> None:
    now = [0.0]
    every = KeepEvery(minutes=30, clock=lambda: now[0])
    saver = local_target.saver(keep_every=every)
    handler = Checkpoint({"model": model()}, saver, n_saved=1, global_step_transform=lambda e, _: e.state.iteration)
    engine = Engine(lambda e, b: None)
    for minute in (0, 10, 31, 40):
        now[0] = minute * 60.0
        engine.state.iteration = minute
        handler(engine)
    saver.close()
    assert archived(local_target) == [(31 * 60.0, "every 30 min")]
    again = local_target.saver(keep_every=every)
    handler = Checkpoint({"model": model()}, again, n_saved=1, global_step_transform=lambda e, _: e.state.iteration)
    for minute in (50, 62):  # the schedule goes on from the entry at minute 31
        now[0] = minute * 60.0
        engine.state.iteration = minute
        handler(engine)
    again.close()
    assert [at for at, _ in archived(local_target)] == [31 * 60.0, 62 * 60.0]


def test_keep_every_in_epochs_without_an_attached_trainer_names_the_fix_before_saving(local_target: Target) -> None:
    saver = local_target.saver(keep_every="10 epochs")
    handler = Checkpoint({"model": model()}, saver, n_saved=1)
    with pytest.raises(ConfigError, match=r"keep_every='10 epochs' counts the trainer's epochs: call saver.attach"):
        handler(Engine(lambda e, b: None))
    saver.close()
    assert find_models(project="p", registry=local_target.registry) == []


def test_a_bad_keep_every_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"keep_every='every week' is not a number of epochs, iterations or min"):
        TrackerSaver(tmp_path / "out", registry=tmp_path / "r.db", keep_every="every week")
    with pytest.raises(ConfigError, match=r"keep_every_max=3 limits the archive that keep_every makes"):
        TrackerSaver(tmp_path / "out", registry=tmp_path / "r.db", keep_every_max=3)
    with pytest.raises(ConfigError, match=r"keep_every_max=0: pass how many archive entries"):
        TrackerSaver(tmp_path / "out", registry=tmp_path / "r.db", keep_every="2 epochs", keep_every_max=0)
    assert list(tmp_path.iterdir()) == []


def test_a_score_stream_keeps_the_first_save_in_each_block(local_target: Target) -> None:
    saver = local_target.saver(keep_every="4 epochs")
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=2, prefix="best", scores=SCORES)
    trainer.run([0], max_epochs=10)  # scores 0.5 0.7 0.6 0.9 0.4 0.95 0.8 0.8 0.97 0.3: saves at 1 2 4 6 7 9
    saver.close()
    assert [at for at, _ in archived(local_target)] == [4, 9]


@pytest.mark.ceph
def test_on_s3_the_archive_is_a_server_side_copy_of_the_slot(s3_output_uri: str, tmp_path: Path) -> None:
    target = Target(output_uri=s3_output_uri, registry=str(tmp_path / "registry.db"))
    saver = target.saver(keep_every="2 epochs", keep_every_max=1)
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=1)
    trainer.run([0], max_epochs=4)
    saver.close()
    assert archived(target) == [(4, "every 2 epochs")]
    assert sorted(untokened(o.key) for o in target.storage().list("p/r/")) == [
        "p/r/+pinned/model_4.pt",
        "p/r/model.slot0.pt",
    ]
    entries_intact(target)
