"""Aliases: ``latest``/``best`` follow record states through real training, failures included;
user aliases are unique per project and resolve to their record."""

from __future__ import annotations

import errno
import itertools
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from ignite.handlers import Checkpoint

from tests.helpers import SCORES, Target, attach, model, trainer_engine
from tracker_saver import (
    ConfigError,
    Record,
    RecordNotFoundError,
    RecordState,
    TrackerSaverError,
    find_models,
    get_model,
    pin_model,
    resolve_model,
    set_alias,
    unpin_model,
)
from tracker_saver.core.records import LOADABLE
from tracker_saver.registry.base import derived_aliases

#: Epochs whose best_model save fails (Ignite still counts them: it updates its list first).
FAILING = {3, 4}
#: (global_step of ``best``, of ``latest``) in stream best_model after each epoch, n_saved=2,
#: scores 0.5 0.7 0.6 0.9 0.4 0.95, epochs 3 and 4 failing: a failed save never becomes an alias,
#: and a replaced slot's record comes back, so the last good checkpoint keeps its aliases.
EXPECTED = [(1, 1), (2, 2), (2, 2), (2, 2), (2, 2), (6, 6)]


def check_aliases(target: Target) -> dict[str, dict[str, Record]]:
    """Every stream's ``latest``/``best``: loadable, unique, and what the states say; by stream."""
    records = find_models(project="p", registry=target.registry)
    by_stream: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        by_stream[r.stream].append(r)
    out: dict[str, dict[str, Record]] = {}
    for stream, recs in by_stream.items():
        loadable = [r for r in recs if r.state in LOADABLE]
        named = {a: [r for r in recs if a in r.aliases] for a in ("latest", "best")}
        assert all(r.state in LOADABLE for rs in named.values() for r in rs), stream
        assert named["latest"] == ([max(loadable, key=lambda r: (r.created_at, int(r.id)))] if loadable else [])
        scored = [r for r in loadable if r.score is not None]
        best = [max(scored, key=lambda r: (r.score, r.created_at, int(r.id)))] if scored else []
        assert named["best"] == best, stream
        out[stream] = {a: rs[0] for a, rs in named.items() if rs}
    return out


class Flaky:
    """A to_save object whose state cannot be serialized in the epochs of ``failing``."""

    def __init__(self, failing: set[int]) -> None:
        self.failing = failing
        self.epoch = 0

    def state_dict(self) -> dict[str, Any]:
        return {
            "w": torch.full((10,), float(self.epoch)),
            "lock": threading.Lock() if self.epoch in self.failing else 0,
        }


@pytest.mark.parametrize("async_upload", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("failure", ["callback", "serialization", "storage"])
def test_latest_and_best_name_only_loadable_records_through_failed_saves(
    local_target: Target, async_upload: bool, failure: str
) -> None:
    flaky = Flaky(FAILING if failure == "serialization" else set())

    def refuse(info: Any) -> Any:
        if info.stream == "best_model" and info.metadata.get("global_step") in FAILING and failure == "callback":
            raise RuntimeError(f"no upload for epoch {info.metadata['global_step']}")
        return info

    saver = local_target.saver(pre_upload=[refuse], async_upload=async_upload)
    if failure == "storage":  # the disk fills up once every byte is written, before the commit point
        stage = saver.storage.stage

        def full_disk(key: str, **kwargs: Any) -> Any:
            staged = stage(key, **kwargs)
            finish = staged.finish

            def finish_then_fail() -> None:
                finish()
                if "best_model" in key and flaky.epoch in FAILING:
                    raise OSError(errno.ENOSPC, "No space left on device")

            staged.finish = finish_then_fail  # type: ignore[method-assign]
            return staged

        saver.storage.stage = full_disk  # type: ignore[method-assign]
    engine = trainer_engine(model())
    engine.state.max_epochs = len(EXPECTED)
    # A real Checkpoint per stream, called as EPOCH_COMPLETED would call it: an engine stops at
    # its first exception, and this test goes on training after each failed save.
    handlers = [
        Checkpoint({"net": model()}, saver, n_saved=1, global_step_transform=lambda e, _: e.state.epoch),
        Checkpoint({"model": flaky}, saver, n_saved=2, filename_prefix="best", score_name="val_acc",
                   score_function=lambda e: SCORES[e.state.epoch - 1], global_step_transform=lambda e, _: e.state.epoch),
    ]  # fmt: skip
    seen = []
    for epoch, (best_step, latest_step) in enumerate(EXPECTED, start=1):
        engine.state.epoch = flaky.epoch = epoch
        try:
            for handler in handlers:
                handler(engine)
            saver.flush()
        except TrackerSaverError as exc:
            assert epoch in FAILING, (epoch, exc)
            assert exc.__cause__ is not None
            seen.append(epoch)
        aliases = check_aliases(local_target)
        best = aliases["best_model"]
        assert (best["best"].global_step, best["latest"].global_step) == (best_step, latest_step), epoch
        assert "best" not in aliases["net"] and aliases["net"]["latest"].global_step == epoch
        assert resolve_model("p/r/best_model@best", registry=local_target.registry).id == best["best"].id
        assert resolve_model("p/r/best_model", registry=local_target.registry).id == best["latest"].id
    saver.close()
    assert seen == sorted(FAILING)
    failed = find_models(project="p", stream="best_model", states=["failed"], registry=local_target.registry)
    # A callback refuses, and an async snapshot fails, before any record exists; a failed
    # serialization on the save path leaves a failed record.
    leaves_record = failure == "storage" or (failure == "serialization" and not async_upload)
    assert [r.global_step for r in failed] == (sorted(FAILING) if leaves_record else [])
    assert all(r.aliases == () for r in failed)


def test_aliases_change_with_eviction_in_real_training(local_target: Target) -> None:
    saver = local_target.saver()
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=2, prefix="best", scores=SCORES)
    trainer.run([0], max_epochs=len(SCORES))
    saver.close()
    aliases = check_aliases(local_target)["best_model"]
    # Ignite keeps the two highest: 0.97 (epoch 9) and 0.95 (epoch 6).
    assert (aliases["best"].global_step, aliases["latest"].global_step) == (9, 9)
    best = find_models(project="p", alias="best", registry=local_target.registry)
    assert [r.global_step for r in best] == [9]
    assert [r.global_step for r in find_models(alias="latest", registry=local_target.registry)] == [9]


def test_a_user_alias_is_set_moved_and_resolved_in_its_project(local_target: Target) -> None:
    saver = local_target.saver()
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=3, prefix="best", scores=SCORES)
    trainer.run([0], max_epochs=3)
    saver.close()
    reg = local_target.registry
    first, second, third = find_models(project="p", order_by="created_at", registry=reg)
    # A slot record's alias goes on a pinned copy of it (tests/test_alias_keeps.py): it never dangles.
    pin_of_first = set_alias(first.id, "production", registry=reg)
    assert pin_of_first.aliases == ("production",) and pin_of_first.metadata["pinned_from"] == first.id
    assert resolve_model("p@production", registry=reg).id == pin_of_first.id
    assert resolve_model("p/r/best_model@production", registry=reg).id == pin_of_first.id
    pin_of_third = set_alias(third.id, "production", registry=reg)
    assert resolve_model("p@production", registry=reg).id == pin_of_third.id
    assert find_models(alias="production", registry=reg)[0].sha256 == third.sha256
    assert get_model(pin_of_first.id, registry=reg).aliases == () and get_model(third.id, registry=reg).aliases == (
        "latest",
    )
    with pytest.raises(ConfigError, match="'latest' is derived"):
        set_alias(second.id, "latest", registry=reg)
    with pytest.raises(RecordNotFoundError, match="no record is p@staging"):
        resolve_model("p@staging", registry=reg)


def test_derived_aliases_are_computed_per_stream_and_output_uri() -> None:
    from tracker_saver.core.records import StreamId

    a, b = StreamId("file:///a", "p", "r", "s"), StreamId("file:///b", "p", "r", "s")
    got = derived_aliases([("1", a, 1.0, None), ("2", b, 0.5, 0.1), ("3", a, 2.0, float("-inf"))])
    assert got == {"2": ("best", "latest"), "3": ("best", "latest")}
    assert derived_aliases([("9", a, 1.0, float("inf")), ("10", a, 1.0, 5.0)]) == {"9": ("best",), "10": ("latest",)}


def test_record_states_never_loadable_never_hold_aliases(local_target: Target) -> None:
    saver = local_target.saver()
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=1)
    trainer.run([0], max_epochs=4)
    saver.close()
    records = find_models(project="p", registry=local_target.registry)
    assert [r.state for r in records] == [RecordState.EVICTED] * 3 + [RecordState.LIVE]
    assert [r.aliases for r in records] == [(), (), (), ("latest",)]


_MACHINES = itertools.count()


class AliasMachine(RuleBasedStateMachine):
    """Saves (some failing), pins, unpins and user aliases in random order through a real
    Checkpoint (n_saved=2, scores); after every step the aliases agree with the record states,
    pinned copies are intact and the slots hold at most n_saved objects."""

    folder: Path

    def __init__(self) -> None:
        super().__init__()
        n = next(_MACHINES)  # not id(self): CPython gives a new machine a freed one's address, and its files
        self.target = Target(output_uri=str(self.folder / f"o{n}"), registry=str(self.folder / f"{n}.db"))
        self.fail_next = False
        self.saver = self.target.saver(pre_upload=[self._refuse])
        self.engine = trainer_engine(model())
        self.scores: list[float] = []
        self.handler = Checkpoint({"model": model()}, self.saver, n_saved=2, filename_prefix="best",
                                  score_name="val_acc", score_function=lambda e: self.scores[e.state.epoch - 1],
                                  global_step_transform=lambda e, _: e.state.epoch)  # fmt: skip
        self.pins: list[str] = []

    def _refuse(self, info: Any) -> Any:
        if self.fail_next:
            raise RuntimeError("the upload was refused")
        return info

    def teardown(self) -> None:
        self.saver.close()

    @rule(score=st.floats(0, 1, allow_nan=False), fail=st.booleans())
    def save(self, score: float, fail: bool) -> None:
        self.scores.append(score)
        self.engine.state.epoch = len(self.scores)
        self.fail_next = fail
        try:
            self.handler(self.engine)
        except TrackerSaverError:
            assert fail
        finally:
            self.fail_next = False

    @rule(alias=st.sampled_from(["best", "latest"]))
    def pin(self, alias: str) -> None:
        found = find_models(project="p", alias=alias, registry=self.target.registry)
        if found:
            pinned = pin_model(found[0].id, registry=self.target.registry)
            if pinned.id not in self.pins:
                self.pins.append(pinned.id)

    @precondition(lambda self: self.pins)
    @rule()
    def unpin(self) -> None:
        unpin_model(self.pins.pop(0), registry=self.target.registry)

    @rule(alias=st.sampled_from(["best", "latest"]))
    def name_production(self, alias: str) -> None:
        found = find_models(project="p", alias=alias, registry=self.target.registry)
        if found:
            set_alias(found[0].id, "production", registry=self.target.registry)

    @invariant()
    def aliases_follow_states_and_pins_stay(self) -> None:
        check_aliases(self.target)
        assert self.target.counts().get("best_model", 0) <= 2
        for record_id in self.pins:
            pinned = find_models(project="p", states=["pinned"], registry=self.target.registry)
            assert record_id in {r.id for r in pinned}
            (record,) = [r for r in pinned if r.id == record_id]
            assert self.target.storage().digest(record.key) == (record.size, record.sha256)
        production = find_models(project="p", alias="production", registry=self.target.registry)
        assert len(production) <= 1 and all(r.state is RecordState.PINNED for r in production)  # never dangles


def test_random_saves_failures_pins_and_aliases_keep_aliases_true(tmp_path: Path) -> None:
    AliasMachine.folder = tmp_path
    AliasMachine.TestCase.settings = settings(
        max_examples=8, stateful_step_count=12, deadline=None, suppress_health_check=list(HealthCheck)
    )
    AliasMachine.TestCase().runTest()
