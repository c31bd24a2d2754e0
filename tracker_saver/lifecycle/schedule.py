"""When an archival keep is due: ``keep_every`` as a typed spec (epochs, iterations or minutes); no I/O.

``TrackerSaver(keep_every=...)`` takes a :class:`KeepEvery` or its text (``"10 epochs"``,
``"5000 iterations"``, ``"30 min"``). Epochs and iterations are the trainer's own counters
(``engine.state``); minutes are wall time. A keep is due at the first save in each new block of
``every`` units after the last keep: with ``"10 epochs"``, at epochs 10, 20, 30 (or 12, 21, 30
for saves every third epoch); with ``"30 min"``, 30 minutes after the last keep, or after the
stream's first save when nothing was kept yet.

Examples:
    >>> every = KeepEvery.parse("10 epochs")
    >>> every, every.label
    (KeepEvery(epochs=10), 'every 10 epochs')
    >>> [e for e in range(1, 31) if every.due(last=0, now=e)][:1], every.due(last=10, now=19)
    ([10], False)
    >>> KeepEvery.parse("30 min").due(last=0.0, now=1800.0)
    True
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tracker_saver.core.errors import ConfigError
from tracker_saver.core.wording import plural

__all__ = ["KeepEvery", "check_keep_every"]

#: The text form: a number and a unit.
_TEXT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*")
_UNITS = {
    "epoch": "epochs",
    "epochs": "epochs",
    "iteration": "iterations",
    "iterations": "iterations",
    "iter": "iterations",
    "iters": "iterations",
    "min": "minutes",
    "mins": "minutes",
    "minute": "minutes",
    "minutes": "minutes",
}
_FIX = "pass e.g. keep_every='10 epochs', '5000 iterations' or '30 min' (or KeepEvery(epochs=10))"


@dataclass(frozen=True, repr=False)
class KeepEvery:
    """Keep a checkpoint outside the slot cycle every ``epochs``, ``iterations`` or ``minutes``: exactly one.

    Args:
        epochs: every N of the trainer's epochs (``engine.state.epoch``; attach the saver to the trainer).
        iterations: every N of the trainer's iterations (``engine.state.iteration``).
        minutes: every N minutes of wall time (a float: ``0.5`` is 30 seconds).
        clock: the wall clock in seconds since the epoch, for ``minutes`` (tests pass their own).

    Raises:
        ConfigError: none or more than one unit, or a count that is not positive.

    Examples:
        >>> KeepEvery(minutes=30).label
        'every 30 min'
        >>> KeepEvery(epochs=0)
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.ConfigError: KeepEvery(epochs=0): epochs must be an int >= 1; pass e.g. keep_every='10 epochs', '5000 iterations' or '30 min' (or KeepEvery(epochs=10))
    """

    epochs: int | None = None
    iterations: int | None = None
    minutes: float | None = None
    clock: Callable[[], float] = field(default=time.time, compare=False, repr=False)

    def __post_init__(self) -> None:
        given = {
            k: v
            for k, v in (("epochs", self.epochs), ("iterations", self.iterations), ("minutes", self.minutes))
            if v is not None
        }
        shown = ", ".join(f"{k}={v!r}" for k, v in given.items())
        if len(given) != 1:
            raise ConfigError(f"KeepEvery({shown}) needs exactly one of epochs, iterations or minutes; {_FIX}")
        ((unit, value),) = given.items()
        if unit == "minutes":
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"KeepEvery({shown}): minutes must be a number > 0; {_FIX}")
        elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"KeepEvery({shown}): {unit} must be an int >= 1; {_FIX}")
        if not callable(self.clock):
            raise ConfigError(f"KeepEvery clock={self.clock!r} is not callable: pass a function returning seconds")

    @classmethod
    def parse(cls, spec: KeepEvery | str) -> KeepEvery:
        """A :class:`KeepEvery` from itself or its text: ``"10 epochs"``, ``"5000 iterations"``, ``"30 min"``.

        Raises:
            ConfigError: text that is not a number and one of those units.
        """
        if isinstance(spec, KeepEvery):
            return spec
        match = _TEXT.fullmatch(spec.lower()) if isinstance(spec, str) else None
        if match is None or match[2] not in _UNITS:
            raise ConfigError(f"keep_every={spec!r} is not a number of epochs, iterations or minutes; {_FIX}")
        unit = _UNITS[match[2]]
        if unit != "minutes" and "." in match[1]:
            raise ConfigError(f"keep_every={spec!r}: {unit} are counted in whole numbers; {_FIX}")
        count: Any = float(match[1]) if unit == "minutes" else int(match[1])
        return cls(**{unit: count})

    def __repr__(self) -> str:
        return f"KeepEvery({self.unit}={self.epochs or self.iterations or self.minutes!r})"

    @property
    def unit(self) -> str:
        """``"epochs"``, ``"iterations"`` or ``"minutes"``."""
        return "epochs" if self.epochs is not None else "iterations" if self.iterations is not None else "minutes"

    @property
    def every(self) -> float:
        """How many units apart keeps are."""
        return float(self.epochs or self.iterations or self.minutes or 0)

    @property
    def label(self) -> str:
        """What an archive entry's ``kept_by`` says: ``"every 10 epochs"``, ``"every 30 min"``."""
        if self.minutes is not None:
            return f"every {self.minutes:g} min"
        return f"every {plural(int(self.every), self.unit[:-1])}"

    def due(self, *, last: float, now: float) -> bool:
        """Whether a save at ``now`` (an epoch, an iteration, or seconds) is kept, the last keep being at ``last``.

        A counter or clock behind ``last`` (a trainer that started over without its state) counts from ``now``.
        """
        last = min(last, now)
        if self.minutes is not None:
            return now - last >= self.minutes * 60
        return now // self.every > last // self.every


def check_keep_every(keep_every: KeepEvery | str | None, keep_every_max: int | None) -> KeepEvery | None:
    """``keep_every`` as a :class:`KeepEvery` (``None``: no archive), with ``keep_every_max`` checked against it.

    Raises:
        ConfigError: a spec that does not parse, a limit that is not an int >= 1, or a limit without a spec.

    Examples:
        >>> check_keep_every("5000 iterations", 3)
        KeepEvery(iterations=5000)
        >>> check_keep_every(None, 3)
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.ConfigError: keep_every_max=3 limits the archive that keep_every makes, and keep_every is not set: pass keep_every='10 epochs' (say), or drop keep_every_max
    """
    if keep_every_max is not None and (
        not isinstance(keep_every_max, int) or isinstance(keep_every_max, bool) or keep_every_max < 1
    ):
        raise ConfigError(
            f"keep_every_max={keep_every_max!r}: pass how many archive entries a stream keeps at most, an int >= 1 "
            "(None: no limit)"
        )
    if keep_every is None:
        if keep_every_max is not None:
            raise ConfigError(
                f"keep_every_max={keep_every_max} limits the archive that keep_every makes, and keep_every is not "
                "set: pass keep_every='10 epochs' (say), or drop keep_every_max"
            )
        return None
    return KeepEvery.parse(keep_every)
