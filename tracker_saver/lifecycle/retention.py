"""Retention: which old evicted and failed records a prune deletes, and ages as people write them.

A :class:`Retention` is the rule; the registry applies it in its own transactions
(:meth:`~tracker_saver.registry.events.HistoryLog.prune`), from ``tracker-saver prune`` or a
saver's close (``TrackerSaver(history=Retention(...))``, :mod:`tracker_saver.lifecycle.after_save`).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field

from tracker_saver.core.errors import ConfigError

__all__ = ["Retention", "parse_age"]

#: Seconds in each unit an age may be written in (``parse_age``).
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class Retention:
    """Which history records a prune deletes: beyond the newest ``keep_last`` of their stream, and
    created more than ``older_than`` seconds before ``now``; both when both are given.

    Only evicted and failed records go, never one that was renamed or is named by an alias, and
    never the newest evicted record of a slot (recovery revives it when the save that evicted it
    died). ``keep_last`` counts every evicted and failed record of the stream, newest first.

    Examples:
        >>> Retention(keep_last=1000).keep_last
        1000
        >>> Retention()
        Traceback (most recent call last):
        tracker_saver.core.errors.ConfigError: a prune needs keep_last or older_than (or both), e.g. keep_last=1000 or older_than=30 * 86400
    """

    keep_last: int | None = None
    older_than: float | None = None
    now: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if self.keep_last is None and self.older_than is None:
            raise ConfigError(
                "a prune needs keep_last or older_than (or both), e.g. keep_last=1000 or older_than=30 * 86400"
            )
        keep = self.keep_last
        if keep is not None and (not isinstance(keep, int) or isinstance(keep, bool) or keep < 0):
            raise ConfigError(f"keep_last must be a whole number, 0 or more, got {keep!r}: e.g. keep_last=1000")
        age = self.older_than
        if age is not None and (isinstance(age, bool) or not isinstance(age, (int, float)) or not age >= 0):
            raise ConfigError(f"older_than must be seconds, 0 or more, got {age!r}: e.g. older_than=30 * 86400")

    @property
    def cutoff(self) -> float:
        """Records created before this time may go (``inf`` without ``older_than``)."""
        return math.inf if self.older_than is None else self.now - self.older_than


def parse_age(text: str) -> float:
    """An age as seconds: a number and a unit, ``s``, ``m``, ``h``, ``d`` or ``w`` (``30d``, ``12h``).

    Examples:
        >>> parse_age("30d"), parse_age("90m")
        (2592000.0, 5400.0)
        >>> parse_age("30 days")
        Traceback (most recent call last):
        tracker_saver.core.errors.ConfigError: age '30 days' is not understood: write a number and a unit (s, m, h, d or w), e.g. 30d or 12h
    """
    found = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([smhdw])\s*", text)
    if found is None:
        raise ConfigError(
            f"age {text!r} is not understood: write a number and a unit (s, m, h, d or w), e.g. 30d or 12h"
        )
    return float(found[1]) * _UNITS[found[2]]
