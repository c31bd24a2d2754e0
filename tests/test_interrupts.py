"""An interrupt is an interrupt: Ctrl-C at any step of a save reaches the training loop as KeyboardInterrupt.

Each test sends this process a real SIGINT (``signal.raise_signal``) from inside one step of a
real save: Python's own handler raises ``KeyboardInterrupt`` at the next bytecode, exactly as a
Ctrl-C in a terminal does. The steps are reached through the seams the soak taps (a pre- or
post-upload callback, the registry's and the storage's methods on the instances the saver holds,
an object ``torch.save`` pickles), in one process: a signal, not a second process, is the point.
"""

from __future__ import annotations

import collections
import hashlib
import signal
from typing import Any

import pytest

from tests.helpers import attach, model, trainer_engine
from tracker_saver import RecordState, find_models
from tracker_saver.fsck import check
from tracker_saver.registry.shared import shared_registry


def ctrl_c() -> None:
    signal.raise_signal(signal.SIGINT)


@pytest.fixture(autouse=True)
def _pythons_own_handler(pythons_sigint_handler: None) -> None:
    """Every test here sends a SIGINT to Python's own handler (tests/conftest.py says why it is set)."""


class CtrlCWhilePickled:
    """Put into a checkpoint: torch.save pickles it, and Ctrl-C comes while it does."""

    def __init__(self) -> None:
        self.armed = False

    def state_dict(self) -> dict[str, Any]:
        return {"tripwire": self}

    def __reduce__(self) -> tuple[type, tuple[()]]:
        if self.armed:
            ctrl_c()
        return (collections.OrderedDict, ())


class CtrlCWhileWritten:
    """The staged write's file, with Ctrl-C during the second write torch's C++ writer asks for."""

    def __init__(self, target: Any) -> None:
        self.target, self.writes = target, 0

    def write(self, data: Any) -> int:
        self.writes += 1
        if self.writes == 2:
            ctrl_c()
        return int(self.target.write(data))

    def flush(self) -> None:
        self.target.flush()


def interrupt_second_save(local_target: Any, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """Save once, then Ctrl-C at ``step`` of the second save; the KeyboardInterrupt must come out as itself."""
    pickled = CtrlCWhilePickled()
    armed = {"on": False}

    def when(name: str) -> None:
        if armed["on"] and step == name:
            armed["on"] = False
            ctrl_c()

    saver = local_target.saver(
        pre_upload=[lambda info: (when("pre-upload"), info)[1]],
        post_upload=[lambda info: when("post-upload")],
    )
    records, storage = saver.registry.records, saver.storage
    for method in ("create_pending", "supersede"):
        inner = getattr(records, method)

        def tapped(*args: Any, _inner: Any = inner, _name: str = method, **kwargs: Any) -> Any:
            when(f"{_name}:before")
            result = _inner(*args, **kwargs)
            when(f"{_name}:after")
            return result

        monkeypatch.setattr(records, method, tapped)
    stage = storage.stage

    def tapped_stage(key: str, **kwargs: Any) -> Any:
        staged = stage(key, **kwargs)
        if armed["on"] and step == "write":
            staged.file = CtrlCWhileWritten(staged.file)
        commit = staged.commit

        def commit_then(*a: Any, **k: Any) -> Any:
            result = commit(*a, **k)
            when("commit")
            return result

        staged.commit = commit_then
        return staged

    monkeypatch.setattr(storage, "stage", tapped_stage)
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model(), "tripwire": pickled}, n_saved=1)
    trainer.run([0], max_epochs=1)
    armed["on"] = True
    pickled.armed = step == "pickle"
    with pytest.raises(KeyboardInterrupt) as caught:
        trainer.run([0], max_epochs=2)
    assert type(caught.value) is KeyboardInterrupt
    saver.close()


@pytest.mark.parametrize("step", ["pre-upload", "create_pending:before", "pickle", "write", "supersede:before"])
def test_ctrl_c_before_the_commit_point_is_a_keyboard_interrupt_and_the_last_checkpoint_stays_live(
    local_target, monkeypatch, step
) -> None:
    interrupt_second_save(local_target, monkeypatch, step)
    records = find_models(project="p", registry=local_target.registry)
    first = records[0]
    assert first.state is RecordState.LIVE
    assert [r.state for r in records[1:]] in ([], [RecordState.FAILED])  # no record before create_pending
    with local_target.storage().get(first.key) as f:
        assert hashlib.sha256(f.read()).hexdigest() == first.sha256
    assert check(shared_registry(local_target.registry)).problems == []


@pytest.mark.parametrize("step", ["commit", "post-upload"])
def test_ctrl_c_after_the_commit_point_is_a_keyboard_interrupt_and_start_up_promotes_the_new_checkpoint(
    local_target, monkeypatch, step
) -> None:
    interrupt_second_save(local_target, monkeypatch, step)
    local_target.saver().close()  # a new process's start-up: the pending record's bytes are complete
    states = [r.state for r in find_models(project="p", registry=local_target.registry)]
    assert states == [RecordState.EVICTED, RecordState.LIVE]
