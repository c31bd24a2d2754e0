"""Archival keeps: a save that ``keep_every`` makes due is also kept outside its stream's slots.

The entry is a pinned copy of the save's object (:func:`~tracker_saver.lifecycle.pins.keep_copy`:
server-side on S3, read back from the slot just written locally), recorded with ``kept_by``
(``"every 10 epochs"``) and ``kept_at`` (the epoch, iteration or wall time it was kept at). The
schedule of each stream continues from its newest entry in the registry, so a restarted
training keeps at 20, 30… rather than starting over. ``keep_every_max`` deletes a stream's
oldest entries past the limit: never a pin a person made, nor an entry that holds an alias.

Examples:
    >>> from tracker_saver.lifecycle.schedule import KeepEvery
    >>> Archive(KeepEvery(epochs=10), None, owner=lambda storage, registry, stream: None).needs_engine
    True
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tracker_saver.core.errors import ConfigError, RecordNotFoundError
from tracker_saver.core.query import Order
from tracker_saver.core.records import Record, RecordState, StreamId
from tracker_saver.lifecycle.pins import KEPT_BY, OwnerCheck, drop_pin, is_archived, keep_copy
from tracker_saver.lifecycle.schedule import KeepEvery, check_keep_every
from tracker_saver.registry.base import Registry, stream_query
from tracker_saver.storage import Storage

if TYPE_CHECKING:
    from ignite.engine import Engine

__all__ = ["KEPT_AT", "Archive", "archive_entries"]

log = logging.getLogger(__name__)

#: The metadata key of an archive entry that says when it was kept (epoch, iteration, or seconds since the epoch).
KEPT_AT = "kept_at"


def archive_entries(registry: Registry, stream: StreamId) -> list[Record]:
    """The stream's archive entries (``keep_every``'s pinned copies), oldest first."""
    pinned = registry.records.query(stream_query(stream, states=(RecordState.PINNED,)))
    return sorted((r for r in pinned if is_archived(r)), key=lambda r: (r.created_at, r.id))


class Archive:
    """The ``keep_every`` schedule of one saver: when a save is due, and keeping it.

    Args:
        every: when a keep is due.
        limit: how many archive entries a stream keeps at most (``None``: all).
        owner: checks the stream's owner before a copy is written (the saver's ``ensure_owner``).
    """

    def __init__(self, every: KeepEvery, limit: int | None, *, owner: OwnerCheck) -> None:
        self.every = every
        self.limit = limit
        self.owner = owner
        self.engine: Engine | None = None  # the trainer, for epochs and iterations (TrackerSaver.attach)
        self._last: dict[StreamId, float] = {}  # stream -> when its newest entry was kept

    @classmethod
    def of(cls, keep_every: KeepEvery | str | None, keep_every_max: int | None, *, owner: OwnerCheck) -> Archive | None:
        """The archive that ``TrackerSaver(keep_every=..., keep_every_max=...)`` asks for; ``None`` for none.

        Raises:
            ConfigError: see :func:`~tracker_saver.lifecycle.schedule.check_keep_every`.
        """
        every = check_keep_every(keep_every, keep_every_max)
        return cls(every, keep_every_max, owner=owner) if every is not None else None

    @property
    def needs_engine(self) -> bool:
        """Whether the schedule counts the trainer's epochs or iterations (so the saver must be attached)."""
        return self.every.unit != "minutes"

    def now(self) -> float:
        """Where training is now, in the schedule's unit: read on the training thread, at the save's call.

        Raises:
            ConfigError: epochs or iterations, and no trainer attached.
        """
        if not self.needs_engine:
            return self.every.clock()
        if self.engine is None:
            raise ConfigError(
                f"keep_every={self.every.label.removeprefix('every ')!r} counts the trainer's {self.every.unit}: call "
                "saver.attach(trainer) before trainer.run(), or pass keep_every='30 min' (wall time)"
            )
        return float(self.engine.state.epoch if self.every.unit == "epochs" else self.engine.state.iteration)

    def keep(self, storage: Storage, registry: Registry, live: Record, at: float) -> Record | None:
        """Keep ``live`` (just saved, at ``at``) in its stream's archive if it is due; the new entry, or ``None``.

        The caller holds the stream's claim, so no one writes the slot meanwhile: the copy's size
        is checked, not its sha256 read back.

        Raises:
            StorageError: the copy could not be made; the save stays live, and the next save is due again.
            IntegrityError: the copy's size is not the record's; it is deleted, and the next save is due again.
        """
        stream = live.stream_id
        last = self._last[stream] if stream in self._last else self._resume(registry, stream, live)
        self._last[stream] = min(last, at)  # a counter or clock behind the last keep counts from here
        if not self.every.due(last=self._last[stream], now=at):
            return None
        kept_at = at if self.every.unit == "minutes" else int(at)
        extra = {KEPT_BY: self.every.label, KEPT_AT: kept_at}
        entry = keep_copy(storage, registry, live, owner=self.owner, extra=extra, reuse=False, verify=False)
        self._last[stream] = at
        if self.limit is not None:
            self._trim(storage, registry, stream)
        return entry

    def _resume(self, registry: Registry, stream: StreamId, live: Record) -> float:
        """When the stream's newest entry of this schedule was kept; with none, its first save (minutes) or 0."""
        for entry in reversed(archive_entries(registry, stream)):
            kept_at = entry.metadata.get(KEPT_AT)
            if entry.metadata.get(KEPT_BY) == self.every.label and isinstance(kept_at, (int, float)):
                return float(kept_at)
        if not self.needs_engine:
            first = registry.records.query(stream_query(stream, order_by=(Order("created_at"),), limit=1))
            return first[0].created_at if first else live.created_at
        return 0.0

    def _trim(self, storage: Storage, registry: Registry, stream: StreamId) -> None:
        """Delete the stream's oldest archive entries past the limit; one that holds an alias stays, uncounted."""
        entries = [r for r in archive_entries(registry, stream) if not r.aliases]
        assert self.limit is not None
        for old in entries[: max(0, len(entries) - self.limit)]:
            try:  # a person may alias or unpin the entry meanwhile: an aliased one stays, an unpinned one is gone
                if not drop_pin(storage, registry, old, unless_aliased=True):
                    continue
            except RecordNotFoundError:
                continue
            log.debug(
                "%s: archive entry %s (%s) deleted by keep_every_max=%d", stream.label, old.id, old.name, self.limit
            )
