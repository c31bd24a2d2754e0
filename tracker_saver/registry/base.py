"""The ``Registry`` seam: where records live; it never touches bytes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tracker_saver.claims import Holder
from tracker_saver.errors import StreamBusyError
from tracker_saver.query import Condition, Order, matches, sort_key
from tracker_saver.records import MetaValue, Record, RecordState, StreamId, UploadInfo

__all__ = ["Query", "Registry", "busy", "record_field", "select", "stream_query"]

#: Keys that sort/filter on a record's own fields rather than its metadata.
RECORD_FIELDS = ("id", "name", "filename", "state", "stream", "run", "project", "created_at", "output_uri")


@dataclass(frozen=True)
class Query:
    """What to find: every field narrows the result; ``None`` means any."""

    project: str | None = None
    run: str | None = None
    stream: str | None = None
    filename: str | None = None
    output_uri: str | None = None
    slot: int | None = None
    states: tuple[RecordState, ...] | None = None
    where: tuple[Condition, ...] = ()
    order_by: tuple[Order, ...] = ()
    limit: int | None = None


def record_field(record: Record, key: str) -> MetaValue:
    """The value ``key`` names on a record: one of its own fields, else a metadata key."""
    if key in RECORD_FIELDS:
        value = getattr(record, key)
        return value.value if isinstance(value, RecordState) else value
    return record.metadata.get(key)


def select(records: Iterable[Record], query: Query) -> list[Record]:
    """Filter and sort records on the client: the reference semantics every backend matches.

    Ties keep creation order; absent values sort last in both directions.
    """
    out = [
        r
        for r in records
        if (query.project is None or r.project == query.project)
        and (query.run is None or r.run == query.run)
        and (query.stream is None or r.stream == query.stream)
        and (query.filename is None or r.filename == query.filename)
        and (query.output_uri is None or r.output_uri == query.output_uri)
        and (query.slot is None or r.slot == query.slot)
        and (query.states is None or r.state in query.states)
        and matches({k: record_field(r, k) for k in {c.key for c in query.where}}, query.where)
    ]
    out.sort(key=lambda r: (r.created_at, _id_key(r.id)))
    for order in reversed(query.order_by):
        present = [r for r in out if record_field(r, order.key) is not None]
        absent = [r for r in out if record_field(r, order.key) is None]
        present.sort(key=lambda r: sort_key(record_field(r, order.key)), reverse=order.desc)
        out = present + absent
    return out[: query.limit] if query.limit is not None else out


def stream_query(stream: StreamId, **kwargs: Any) -> Query:
    """A query for one stream's records (``kwargs``: ``states``, ``filename``…)."""
    return Query(output_uri=stream.output_uri, project=stream.project, run=stream.run, stream=stream.stream, **kwargs)


def busy(stream: StreamId, holder: Holder) -> StreamBusyError:
    """The error for a save into a stream that ``holder`` writes."""
    return StreamBusyError(
        f"stream {stream.label} is being written by another saver, {holder.describe()}: a stream has one "
        "writer at a time; give this one another run or filename_prefix, or close() the other saver "
        "(a killed process holds nothing)",
        holder=holder.describe(),
    )


def _id_key(record_id: str) -> tuple[int, Any]:
    return (0, int(record_id)) if record_id.isdigit() else (1, record_id)


class Registry(ABC):
    """Records of checkpoints: create pending, commit live, change state, rename, tag, query.

    State changes are checked: ``set_state`` only moves a record out of the states it expects,
    so an evicted record can never become live by accident (invariant 2). Each stream has one
    writer at a time: ``claim`` records it and refuses a second live one.

    Examples:
        >>> from tracker_saver.registry import open_registry
        >>> reg = open_registry(":memory:")
        >>> rec = reg.create_pending(UploadInfo("p", "r", "checkpoint", "checkpoint_1.pt", slot=0,
        ...                          key="p/r/checkpoint.slot0.pt"), uri="file:///tmp/p/r/checkpoint.slot0.pt")
        >>> reg.commit(rec.id, sha256="0" * 64, size=1).state.value
        'live'
    """

    #: A URI-like description for messages (never contains credentials).
    uri: str

    @abstractmethod
    def create_pending(self, info: UploadInfo, *, uri: str) -> Record:
        """Create a ``pending`` record for a checkpoint about to be written to ``info.key``."""

    @abstractmethod
    def commit(self, record_id: str, *, sha256: str, size: int, metadata: dict[str, MetaValue] | None = None) -> Record:
        """Move ``pending`` → ``live`` with its sha256, size and extra metadata."""

    @abstractmethod
    def stage(self, record_id: str, *, sha256: str, size: int, replaces: str | None) -> None:
        """At the storage commit point: note a pending record's staged digest and take its slot's
        previous record (``replaces``) out of live, in one transaction.

        Raises ``RegistryError`` (and changes nothing) when the record is not pending or the
        replaced record is no longer live: someone else changed the slot.
        """

    @abstractmethod
    def set_state(
        self, record_id: str, state: RecordState, *, expected: Sequence[RecordState], error: str | None = None
    ) -> Record:
        """Move a record to ``state`` if it is in one of ``expected``; raise ``RegistryError`` if not."""

    @abstractmethod
    def rename(self, record_id: str, name: str) -> Record:
        """Give a record a new display name; later saves never change it."""

    @abstractmethod
    def add_tags(self, record_id: str, tags: Iterable[str]) -> Record:
        """Add tags to a record."""

    @abstractmethod
    def get(self, record_id: str) -> Record:
        """The record with ``record_id``; raise ``RecordNotFoundError`` if there is none."""

    @abstractmethod
    def query(self, query: Query) -> list[Record]:
        """Records matching ``query``, sorted as :func:`select` sorts them."""

    @abstractmethod
    def claim(self, stream: StreamId, holder: Holder) -> None:
        """Make ``holder`` the writer of ``stream`` (renewing its heartbeat if it already is).

        Raises:
            StreamBusyError: another holder is alive (see :func:`tracker_saver.claims.is_alive`).
        """

    @abstractmethod
    def holder(self, stream: StreamId) -> Holder | None:
        """The live holder of ``stream``'s claim, or ``None``; changes nothing (for ``fsck``)."""

    @abstractmethod
    def release(self, stream: StreamId, holder: Holder) -> None:
        """Give up ``holder``'s claim on ``stream`` (nothing if it holds none)."""

    def evict(self, record_id: str) -> Record:
        """``live``/``revived`` → ``evicted``: its slot is being reused."""
        return self.set_state(record_id, RecordState.EVICTED, expected=(RecordState.LIVE, RecordState.REVIVED))

    def restore(self, record_id: str, state: RecordState = RecordState.LIVE) -> Record:
        """``evicted`` → ``live`` (a replacing save failed) or ``revived`` (found at start-up)."""
        return self.set_state(record_id, state, expected=(RecordState.EVICTED,))

    def fail(self, record_id: str, error: str) -> Record:
        """``pending`` → ``failed``, keeping why."""
        return self.set_state(record_id, RecordState.FAILED, expected=(RecordState.PENDING,), error=error)

    def close(self) -> None:  # noqa: B027 (an optional hook: nothing to release by default)
        """Release connections."""

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"
