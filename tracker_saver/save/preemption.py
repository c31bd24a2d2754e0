"""Preemption: a SIGTERM ends the run at the next iteration with one last checkpoint made durable.

Spot instances, Slurm and Kubernetes send SIGTERM, then SIGKILL a grace period later (30 s by
default on Kubernetes and Slurm). :func:`save_on_sigterm` makes the first SIGTERM:

1. let the current iteration finish; at its ``ITERATION_COMPLETED``, stop the engine
   (``engine.terminate()``) and run the given ``Checkpoint`` handler once, named as at any
   iteration (Ignite skips nothing and saves again if that iteration was just saved);
2. flush the saver for what is left of ``grace`` seconds after the signal;
3. on ``TERMINATE`` (or ``COMPLETED``, if the signal came in the last iteration), print to
   stderr what is durable and what is not, and exit with status 143 (128 + SIGTERM).

A second SIGTERM gets the handler that was there before (by default: die at once). If the
signal comes while a save is blocked on an outage, that save raises within the saver's
``timeout``; the report then names it, and the training error is raised as usual.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ignite.engine import Engine, Events

from tracker_saver.core.errors import ConfigError
from tracker_saver.core.records import Record

__all__ = ["DEFAULT_GRACE_S", "EXIT_STATUS", "save_on_sigterm"]

#: Seconds from SIGTERM to exit by default: under the usual 30 s grace of Kubernetes and Slurm.
DEFAULT_GRACE_S = 25.0
#: The exit status after a handled SIGTERM, as if the signal had ended the process.
EXIT_STATUS = 128 + signal.SIGTERM


def save_on_sigterm(
    engine: Engine,
    handler: Callable[[Engine], Any],
    *,
    flush: Callable[[float], None],
    durable: Callable[[], Sequence[Record]],
    grace: float,
) -> None:
    """Give ``engine``'s runs the SIGTERM behaviour of the module docstring.

    The signal handler is installed when a run starts and the previous one put back when it
    completes or raises.

    Args:
        engine: the trainer.
        handler: the ``Checkpoint`` (or any ``handler(engine)``) to run once after SIGTERM.
        flush: waits, at most the given seconds, until the saves are durable (or raises).
        durable: the live records now, whose names the report gives.
        grace: seconds from the signal to exit, for the final flush.

    Raises:
        ConfigError: not called from the main thread (Python delivers signals there only), or
            ``handler`` is not callable, or ``grace`` is not a positive number.

    Examples:
        Usually through :meth:`TrackerSaver.attach`::

            checkpoint = Checkpoint(to_save, saver, n_saved=2)
            trainer.add_event_handler(Events.EPOCH_COMPLETED, checkpoint)
            saver.attach(trainer, save_on_sigterm=checkpoint)
    """
    if not callable(handler):
        raise ConfigError(f"save_on_sigterm={handler!r} is not callable: pass the Checkpoint handler to run once")
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not grace > 0:
        raise ConfigError(f"sigterm_grace={grace!r}: pass the seconds from SIGTERM to exit, a number > 0")
    if threading.current_thread() is not threading.main_thread():
        raise ConfigError("save_on_sigterm needs attach() to be called from the main thread (signals arrive there)")
    received: list[float] = []
    previous: list[Any] = []
    outcome: list[BaseException | None] = []  # the final save's error, once it ran

    def on_signal(signum: int, frame: Any) -> None:
        received.append(time.monotonic())  # only this here: printing could re-enter a write in progress
        restore()  # a second SIGTERM gets what was there before

    def install(_: Engine) -> None:
        if not previous:
            previous.append(signal.signal(signal.SIGTERM, on_signal))

    def restore(*_: Any) -> None:
        if previous:
            handler_before = previous.pop()
            signal.signal(signal.SIGTERM, handler_before if handler_before is not None else signal.SIG_DFL)

    def final_save(engine: Engine) -> None:
        # At ITERATION_COMPLETED, so the handler names the checkpoint as at any iteration.
        if not received or outcome:
            return
        _say(f"SIGTERM: stopping after iteration {engine.state.iteration}, saving once (exit within {grace:g} s)")
        engine.terminate()
        try:
            handler(engine)
            flush(max(0.0, grace - (time.monotonic() - received[0])))
        except Exception as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    def leave(engine: Engine) -> None:
        if not received:
            restore()
            return
        final_save(engine)  # the signal came during the last iteration's handlers
        error = outcome[0]
        if error is not None:
            _say(f"SIGTERM: the final checkpoint is NOT durable: {_describe(error)}")
            _say(f"SIGTERM: durable: {_names(durable)}")
            raise SystemExit(EXIT_STATUS) from error
        _say(f"SIGTERM: saved; durable: {_names(durable)}")
        raise SystemExit(EXIT_STATUS)

    def on_error(engine: Engine, error: BaseException) -> None:
        restore()
        if received and not isinstance(error, SystemExit):
            _say(f"SIGTERM: training stopped on an error, NOT durable: {_describe(error)}")
            _say(f"SIGTERM: durable: {_names(durable)}")

    engine.add_event_handler(Events.STARTED, install)
    engine.add_event_handler(Events.ITERATION_COMPLETED, final_save)
    engine.add_event_handler(Events.TERMINATE, leave)
    engine.add_event_handler(Events.COMPLETED, leave)
    engine.add_event_handler(Events.EXCEPTION_RAISED, on_error)


def _names(live: Callable[[], Sequence[Record]]) -> str:
    """The live records' names, for the report: ``"a.pt, b.pt"``."""
    try:
        return ", ".join(r.name for r in live()) or "nothing"
    except Exception as exc:
        return f"unknown (the registry could not be read: {type(exc).__name__}: {exc})"


def _describe(exc: BaseException) -> str:
    return " ".join([f"{type(exc).__name__}: {exc}", *getattr(exc, "__notes__", ())])


def _say(text: str) -> None:
    print(f"tracker_saver: {text}", file=sys.stderr, flush=True)
