"""What each save cost: the clock a save carries to its record, and statistics over records; no I/O.

A save's clock starts when Ignite calls the saver (``TrackerSaver.__call__``). *Blocked* is the
time the training thread spent in that call: the whole save when synchronous; with
``async_upload`` the wait for a free ``max_pending`` slot plus the CPU snapshot. *Durable* runs
from the same start until the record is committed live (async: when the background save
committed). Both are measured with ``time.perf_counter()`` and end right before the registry
commit that makes the record live, so they are in that commit's metadata (:data:`TIMING_KEYS`):
every registry stores them without a schema change, and timing costs no extra I/O. *MB/s* is
the checkpoint's bytes over the time spent writing them (serialize, hash, stage, commit point).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tracker_saver.core.records import TIMING_KEYS, MetaValue, Record

__all__ = ["SaveClock", "SaveStats", "percentile", "save_stats"]


@dataclass
class SaveClock:
    """When one save started on the training thread, and how long it held that thread.

    Note:
        ``handed_over`` runs on the training thread before the save is queued, and
        ``metadata`` on the worker after it was taken from the queue: the queue orders them.

    Examples:
        >>> clock = SaveClock.start(background=True)
        >>> clock.handed_over()
        >>> meta = clock.metadata(size=2_000_000, write_s=0.5)
        >>> meta["save_mb_s"], meta["save_bytes"], meta["save_background"]
        (4.0, 2000000, True)
        >>> 0 <= meta["save_blocked_s"] <= meta["save_durable_s"]
        True
    """

    started: float
    background: bool = False
    blocked_s: float | None = None
    #: Seconds each step of the pipeline took, in order (:meth:`lap`): logged at DEBUG after each save.
    laps: dict[str, float] = field(default_factory=dict)
    _lap_from: float | None = None

    @classmethod
    def start(cls, *, background: bool = False) -> SaveClock:
        """A clock started now."""
        return cls(time.perf_counter(), background)

    def lap(self, step: str) -> None:
        """``step`` ends now: note how long it took since the previous lap (the first lap starts the count).

        Examples:
            >>> clock = SaveClock.start()
            >>> clock.lap("begin"); clock.lap("serialize"); list(clock.laps)
            ['serialize']
        """
        now = time.perf_counter()
        if self._lap_from is not None:
            self.laps[step] = round(now - self._lap_from, 6)
        self._lap_from = now

    def handed_over(self) -> None:
        """The training thread leaves the save (async: its snapshot is taken): blocked ends here."""
        self.blocked_s = time.perf_counter() - self.started

    def metadata(self, *, size: int, write_s: float) -> dict[str, MetaValue]:
        """The :data:`TIMING_KEYS` of a save about to be committed live, ``size`` bytes written in ``write_s`` s.

        A synchronous save never handed over: the training thread waited for all of it.
        """
        durable = time.perf_counter() - self.started
        blocked = durable if self.blocked_s is None else self.blocked_s
        values: tuple[MetaValue, ...] = (
            round(blocked, 6),
            round(durable, 6),
            int(size),
            round(size / max(write_s, 1e-9) / 1e6, 3),
            self.background,
        )
        return dict(zip(TIMING_KEYS, values, strict=True))


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values``, interpolated between ranks; ``None`` for no values.

    Examples:
        >>> percentile([1.0, 2.0, 3.0, 4.0], 0.5), percentile([5.0], 0.95), percentile([], 0.5)
        (2.5, 5.0, None)
    """
    if not values:
        return None
    ordered = sorted(values)
    at = (len(ordered) - 1) * q
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


@dataclass(frozen=True)
class SaveStats:
    """What the timed saves of one stream (or, with ``stream=None``, of a whole run) cost.

    Attributes:
        project: the run's project.
        run: the run.
        stream: the stream, or ``None`` for every stream of the run together.
        count: saves with timings (records saved before timings were recorded are not counted).
        background: how many of them ran in the background (``async_upload``).
        blocked_p50_s: median seconds the training thread was blocked.
        blocked_p95_s: 95th percentile of the same.
        durable_p50_s: median seconds from the call until the record was live.
        durable_p95_s: 95th percentile of the same.
        mb_s_p50: median write throughput, MB/s (10**6 bytes per second).
        bytes_total: bytes written by those saves.
        slots: objects in the stream's slots now (its live and revived records; ``n_saved`` once full).
        archive: archive entries (``keep_every``'s pinned copies), outside the slots.
        pinned: other pinned copies (a person's pin, the copy an alias made).
    """

    project: str
    run: str
    stream: str | None
    count: int
    background: int
    blocked_p50_s: float | None
    blocked_p95_s: float | None
    durable_p50_s: float | None
    durable_p95_s: float | None
    mb_s_p50: float | None
    bytes_total: int
    slots: int = 0
    archive: int = 0
    pinned: int = 0

    @property
    def objects(self) -> int:
        """The stream's footprint at its output_uri: slots, plus archive, plus other pins."""
        return self.slots + self.archive + self.pinned

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``--json``), ``objects`` included."""
        return {**self.__dict__, "objects": self.objects}


def _number(record: Record, key: str) -> float | None:
    value = record.metadata.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def save_stats(records: Iterable[Record], *, project: str, run: str, stream: str | None = None) -> SaveStats:
    """The :class:`SaveStats` of ``records`` that carry timings (the others are skipped).

    Examples:
        >>> save_stats([], project="p", run="r").count
        0
    """
    timed = [r for r in records if _number(r, "save_durable_s") is not None]

    def column(key: str) -> list[float]:
        return [v for r in timed if (v := _number(r, key)) is not None]

    blocked, durable, rate = column("save_blocked_s"), column("save_durable_s"), column("save_mb_s")
    return SaveStats(
        project=project,
        run=run,
        stream=stream,
        count=len(timed),
        background=sum(r.metadata.get("save_background") is True for r in timed),
        blocked_p50_s=percentile(blocked, 0.5),
        blocked_p95_s=percentile(blocked, 0.95),
        durable_p50_s=percentile(durable, 0.5),
        durable_p95_s=percentile(durable, 0.95),
        mb_s_p50=percentile(rate, 0.5),
        bytes_total=int(sum(column("save_bytes"))),
    )
