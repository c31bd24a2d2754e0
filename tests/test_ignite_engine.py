"""The Ignite shim (tracker_saver/save/ignite_engine.py) against the installed Ignite: what it reads of
``Engine``'s internals must agree with what the Engine really runs, so an upgrade that changes
them fails here."""

from __future__ import annotations

from pathlib import Path

import pytest
from ignite.engine import Engine, Events

from tracker_saver import TrackerSaver
from tracker_saver.save.ignite_engine import handler_count, run_last_added_before_save_handlers


def _failing_engine() -> Engine:
    def step(engine: Engine, batch: object) -> None:
        raise ValueError("boom")

    return Engine(step)


def test_the_count_follows_the_engines_public_add_and_remove() -> None:
    engine = _failing_engine()
    assert handler_count(engine, Events.EXCEPTION_RAISED) == 0
    handle = engine.add_event_handler(Events.EXCEPTION_RAISED, lambda e, err: None)
    engine.add_event_handler(Events.EXCEPTION_RAISED, lambda e, err: None)
    assert handler_count(engine, Events.EXCEPTION_RAISED) == 2
    handle.remove()
    assert handler_count(engine, Events.EXCEPTION_RAISED) == 1


@pytest.mark.parametrize("moved", [True, False])
def test_a_moved_handler_runs_before_the_save_handler_that_raises_again(tmp_path: Path, moved: bool) -> None:
    """Ignite runs an event's handlers in list order and none after one that raises: only a handler
    moved before the saver's (``TrackerSaver.attach`` raises the error again) sees the error."""
    seen: list[str] = []
    engine = _failing_engine()
    saver = TrackerSaver(tmp_path / "out", registry=str(tmp_path / "registry.db"))
    saver.attach(engine)
    engine.add_event_handler(Events.EXCEPTION_RAISED, lambda e, err: seen.append(type(err).__name__))
    if moved:
        run_last_added_before_save_handlers(engine, Events.EXCEPTION_RAISED)
    with pytest.raises(ValueError, match="boom"):
        engine.run([0], max_epochs=1)
    saver.close()
    # (Ignite fires the event again at the end of run() for an error a handler raised again.)
    assert bool(seen) is moved and set(seen) <= {"ValueError"}, seen
