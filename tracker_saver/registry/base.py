"""The ``Registry`` seam: where records live; it never touches bytes."""

from __future__ import annotations

import logging
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tracker_saver.core.claims import Holder
from tracker_saver.core.errors import ConfigError, RegistryError, StreamBusyError
from tracker_saver.core.query import RECORD_FIELDS, Condition, Order, is_number, matches, sort_key
from tracker_saver.core.records import (
    DERIVED_ALIASES,
    MetaValue,
    Record,
    RecordState,
    StreamId,
    UploadInfo,
    check_alias,
)

__all__ = [
    "Candidate",
    "Labels",
    "MOVED",
    "Query",
    "RECORD_FIELDS",
    "RecordStore",
    "Registry",
    "StreamClaims",
    "busy",
    "check_transition",
    "derived_aliases",
    "record_field",
    "select",
    "stream_query",
    "with_aliases",
]

log = logging.getLogger(__name__)

#: What deriving ``latest`` and ``best`` needs of a loadable record: (id, stream, created_at, score).
Candidate = tuple[str, StreamId, float, float | None]


@dataclass(frozen=True)
class Query:
    """What to find: every field narrows the result; ``None`` means any.

    ``details=False`` lets a backend leave out each record's metadata, tags and aliases: fsck
    reads none of them, and SQLite then reads each record's one row, not its ~25 metadata rows
    too. Other backends may fill them anyway.
    """

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
    offset: int = 0
    name: str | None = None
    tag: str | None = None
    alias: str | None = None
    details: bool = True

    def __post_init__(self) -> None:
        for what, value, least in (("limit", self.limit, 0), ("offset", self.offset, 0)):
            if value is None and what == "limit":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ConfigError(f"{what} must be a non-negative integer, got {value!r}: e.g. {what}=50")
        if self.alias is not None and self.alias not in DERIVED_ALIASES:
            check_alias(self.alias)


def record_field(record: Record, key: str) -> MetaValue:
    """The value ``key`` names on a record: one of its own fields, else a metadata key.

    A SQLite id compares as an int (``id=12`` matches record ``"12"``, ``id>9`` is numeric), though
    ``Record.to_dict`` and the UI's API give every id as a string.
    """
    if key in RECORD_FIELDS:
        value = getattr(record, key)
        if key == "id" and isinstance(value, str) and value.isdigit():
            return int(value)
        return value.value if isinstance(value, RecordState) else value
    return record.metadata.get(key)


def check_transition(record: Record, state: RecordState, expected: Sequence[RecordState]) -> None:
    """Raise ``RegistryError`` unless ``record`` is in one of the ``expected`` states, so it may become ``state``.

    For a backend without transactions that reads a record before it changes its state.

    Examples:
        >>> from tracker_saver.core.records import Record
        >>> r = Record("7", "p", "r", "s", "s_1.pt", "s_1.pt", RecordState.LIVE, slot=0, key=None, uri=None)
        >>> check_transition(r, RecordState.EVICTED, [RecordState.LIVE])  # allowed: nothing happens
        >>> check_transition(r, RecordState.LIVE, [RecordState.PENDING])
        Traceback (most recent call last):
        tracker_saver.core.errors.RegistryError: record 7 is live: it can become live only from pending
    """
    if record.state not in expected:
        raise RegistryError(
            f"record {record.id} is {record.state.value}: it can become {state.value} only from "
            f"{', '.join(RecordState(s).value for s in expected)}",
            record_id=record.id,
        )


def derived_aliases(candidates: Iterable[Candidate]) -> dict[str, tuple[str, ...]]:
    """``latest`` and ``best`` of each stream, from every loadable (live/revived) record of it.

    ``latest`` is the record created last; ``best`` the one with the highest score (ties: the
    later one), absent when none has a score. Every registry derives aliases with this one
    function, from its records' states at read time: an alias can never name a record that
    is not loadable.

    Examples:
        >>> s = StreamId("file:///c", "p", "r", "best_model")
        >>> derived_aliases([("1", s, 1.0, 0.9), ("2", s, 2.0, 0.5)])
        {'1': ('best',), '2': ('latest',)}
    """
    latest: dict[StreamId, tuple[tuple[float, tuple[int, Any]], str]] = {}
    best: dict[StreamId, tuple[tuple[float, float, tuple[int, Any]], str]] = {}
    for record_id, stream, created_at, score in candidates:
        order = (created_at, _id_key(record_id))
        if stream not in latest or order > latest[stream][0]:
            latest[stream] = (order, record_id)
        if score is not None and is_number(score):
            rank = (float(score), *order)
            if stream not in best or rank > best[stream][0]:
                best[stream] = (rank, record_id)
    out: dict[str, list[str]] = {}
    for name, found in (("best", best), ("latest", latest)):
        for _, record_id in found.values():
            out.setdefault(record_id, []).append(name)
    return {k: tuple(v) for k, v in out.items()}


def with_aliases(
    records: Iterable[Record], derived: Mapping[str, Sequence[str]], user: Mapping[str, Sequence[str]]
) -> list[Record]:
    """``records`` with their sorted ``aliases``: the derived ones and the user's."""
    return [replace(r, aliases=tuple(sorted({*derived.get(r.id, ()), *user.get(r.id, ())}))) for r in records]


def select(records: Iterable[Record], query: Query) -> list[Record]:
    """Filter and sort records on the client: the reference semantics every backend matches.

    Ties keep creation order; absent values sort last in both directions. ``query.alias`` is
    matched against ``Record.aliases``, so pass records with their aliases filled.
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
        and (query.name is None or r.name == query.name)
        and (query.tag is None or query.tag in r.tags)
        and (query.alias is None or query.alias in r.aliases)
        and matches({k: record_field(r, k) for k in {c.key for c in query.where}}, query.where)
    ]
    out.sort(key=lambda r: (r.created_at, _id_key(r.id)))
    for order in reversed(query.order_by):
        present = [r for r in out if record_field(r, order.key) is not None]
        absent = [r for r in out if record_field(r, order.key) is None]
        present.sort(key=lambda r: sort_key(record_field(r, order.key)), reverse=order.desc)
        out = present + absent
    end = query.offset + query.limit if query.limit is not None else None
    return out[query.offset : end]


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


class RecordStore(ABC):
    """Records and their states: a registry's ``records``, the part that every save goes through.

    A backend writes six methods: ``create_pending`` (step 4), ``supersede`` (step 6),
    ``make_live`` (step 9), ``set_state`` (every other move, a compare-and-set on the state it
    leaves), ``get`` and ``query``. ``evict``, ``restore``, ``fail``, ``count`` and
    ``metadata_keys`` are built on them. ``tests/contracts/records.py`` proves a backend's.

    Examples:
        >>> from tracker_saver.registry import open_registry
        >>> records = open_registry(":memory:").records
        >>> isinstance(records, RecordStore)
        True
        >>> rec = records.create_pending(UploadInfo("p", "r", "checkpoint", "checkpoint_1.pt", slot=0,
        ...                              key="p/r/checkpoint.slot0.pt"), uri="file:///tmp/p/r/checkpoint.slot0.pt")
        >>> records.evict(records.make_live(rec.id, sha256="0" * 64, size=1).id).state.value
        'evicted'
    """

    @abstractmethod
    def create_pending(self, info: UploadInfo, *, uri: str) -> Record:
        """Create a ``pending`` record for a checkpoint about to be written to ``info.key``."""

    @abstractmethod
    def make_live(
        self,
        record_id: str,
        *,
        sha256: str,
        size: int,
        metadata: dict[str, MetaValue] | None = None,
        fingerprint: str | None = None,
    ) -> Record:
        """Move ``pending`` → ``live`` with its sha256, size, extra metadata and the object's fingerprint.

        Returns the record as committed. Its derived aliases (``latest``, ``best``) are computed
        when records are read (:meth:`get`, :meth:`query`): a backend may return it without them.
        """

    @abstractmethod
    def supersede(self, record_id: str, *, sha256: str, size: int, replaces: str | None) -> None:
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
    def get(self, record_id: str) -> Record:
        """The record with ``record_id``, with its aliases; ``RecordNotFoundError`` if there is none."""

    @abstractmethod
    def query(self, query: Query) -> list[Record]:
        """Records matching ``query`` with their aliases, sorted as :func:`select` sorts them."""

    def pages(self, query: Query) -> Iterator[list[Record]]:
        """:meth:`query`'s records a page at a time, so a caller can show the first before the last is read.

        This default gives one page, :meth:`query`'s list; a backend that reads records in pages
        (MLflow) yields each as it comes.
        """
        yield self.query(query)

    def count(self, query: Query) -> int:
        """How many records match ``query`` without its ``limit`` and ``offset`` (for pagination)."""
        return len(self.query(replace(query, limit=None, offset=0, order_by=())))

    def metadata_keys(self) -> set[str]:
        """Every key that some record's ``metadata`` holds: what a where or sort key may name
        besides the record fields (``find_models`` refuses any other key).

        This default reads every record; a backend that can ask for the keys alone overrides it.
        """
        return {key for record in self.query(Query()) for key in record.metadata}

    def evict(self, record_id: str) -> Record:
        """``live``/``revived`` → ``evicted``: its slot is being reused (never a pinned record)."""
        return self.set_state(record_id, RecordState.EVICTED, expected=(RecordState.LIVE, RecordState.REVIVED))

    def restore(self, record_id: str, state: RecordState = RecordState.LIVE) -> Record:
        """``evicted`` → ``live`` (a replacing save failed) or ``revived`` (found at start-up)."""
        return self.set_state(record_id, state, expected=(RecordState.EVICTED,))

    def fail(self, record_id: str, error: str) -> Record:
        """``pending`` → ``failed``, keeping why."""
        return self.set_state(record_id, RecordState.FAILED, expected=(RecordState.PENDING,), error=error)


class Labels(ABC):
    """What users put on records after training: a registry's ``labels`` (names, tags, user aliases and pins).

    None of it moves a slot's record through its states; derived aliases (``latest``,
    ``best``) are not stored here but computed by :func:`derived_aliases` when records are
    read. A backend writes eight methods; ``tests/contracts/labels.py`` proves them.

    Examples:
        >>> from tracker_saver.registry import open_registry
        >>> reg = open_registry(":memory:")
        >>> rec = reg.records.create_pending(UploadInfo("p", "r", "checkpoint", "checkpoint_1.pt", slot=0,
        ...                                  key="p/r/checkpoint.slot0.pt"), uri="file:///tmp/p/r/checkpoint.slot0.pt")
        >>> reg.labels.add_tags(reg.labels.rename(rec.id, "first").id, ["baseline"]).tags
        ('baseline',)
    """

    @abstractmethod
    def rename(self, record_id: str, name: str) -> Record:
        """Give a record a new display name; later saves never change it."""

    @abstractmethod
    def add_tags(self, record_id: str, tags: Iterable[str]) -> Record:
        """Add tags to a record."""

    @abstractmethod
    def remove_tags(self, record_id: str, tags: Iterable[str]) -> Record:
        """Remove tags from a record (a tag it does not have is not an error)."""

    @abstractmethod
    def set_alias(self, record_id: str, alias: str) -> Record:
        """Point the user alias ``alias`` of the record's project at the record (moving it if it
        named another record); ``ConfigError`` for ``latest``/``best`` or a bad name."""

    @abstractmethod
    def remove_alias(self, project: str, alias: str) -> None:
        """Delete a user alias; ``RecordNotFoundError`` when the project has no such alias."""

    @abstractmethod
    def create_pinned(
        self, info: UploadInfo, *, uri: str, sha256: str, size: int, fingerprint: str | None = None, once: bool = False
    ) -> Record:
        """Create a ``pinned`` record, in one step, for bytes already copied to ``info.key``.

        ``info.slot`` is ``None``: a pinned record holds no slot. With ``once``, a pinned record
        with the same ``pinned_from`` and ``kept_by`` metadata at the same output_uri that exists
        already is returned instead, and nothing is created (its key is not ``info.key``: the
        caller deletes its copy). A backend with transactions (SQLite) checks in the insert's
        transaction, so two processes that pin one record at once get one pin; one without
        (MLflow, ClearML) may create both, each naming its own bytes.
        """

    @abstractmethod
    def delete_pinned(self, record_id: str, *, unless_aliased: bool = False) -> bool:
        """Delete a ``pinned`` record (and its aliases); ``RegistryError`` for any other state.

        With ``unless_aliased``, a record that holds a user alias is left as it is and ``False``
        returned (``keep_every_max``, a refused gated move: someone may have aliased it meanwhile);
        SQLite checks in the delete's transaction, MLflow and ClearML just before it.
        """

    @abstractmethod
    def user_aliases(self, record: Record) -> tuple[str, ...]:
        """The aliases people set on ``record`` (never ``best`` or ``latest``), as the registry holds them now.

        A save asks it of each record it evicts (:mod:`tracker_saver.lifecycle.aliases`), so each
        backend answers it with as few requests as it can (one).
        """


class StreamClaims(ABC):
    """One writer per stream: a registry's ``claims``, who holds a stream's claim and whether that holder is alive.

    A backend writes four methods; ``tests/contracts/claims.py`` proves them. A holder that
    died (see :func:`tracker_saver.core.claims.is_alive`) holds nothing. The claim is the
    writer's lease; who owns a stream's objects is recorded at output_uri, by
    :meth:`registry_id` (:mod:`tracker_saver.save.ownership`).

    Examples:
        >>> from tracker_saver.core.claims import new_holder
        >>> from tracker_saver.registry import open_registry
        >>> class Saver: ...
        >>> reg, saver = open_registry(":memory:"), Saver()
        >>> stream = StreamId("file:///c", "p", "r", "best_model")
        >>> reg.claims.claim(stream, new_holder(saver))
        >>> reg.claims.holder(stream) is not None
        True
    """

    @abstractmethod
    def claim(self, stream: StreamId, holder: Holder) -> None:
        """Make ``holder`` the writer of ``stream`` (renewing its heartbeat if it already is).

        Raises:
            StreamBusyError: another holder is alive (see :func:`tracker_saver.core.claims.is_alive`).
        """

    @abstractmethod
    def holder(self, stream: StreamId) -> Holder | None:
        """The live holder of ``stream``'s claim, or ``None``; changes nothing (for ``fsck``)."""

    @abstractmethod
    def release(self, stream: StreamId, holder: Holder) -> None:
        """Give up ``holder``'s claim on ``stream`` (nothing if it holds none)."""

    @abstractmethod
    def registry_id(self, project: str) -> str:
        """Who this registry is, for ``project``'s streams: what an owner object at output_uri names.

        A random id created and stored inside the registry, never derived from its path or URI
        (two machines' default registries share one path). A tracker may keep one per project.
        """


#: 0.1.0's flat ``Registry`` methods and the part each is now on: ``registry.query(q)`` is
#: ``registry.records.query(q)``. The flat names work, with a ``DeprecationWarning``, until 0.3.0.
MOVED: dict[str, str] = {
    **dict.fromkeys(
        ("create_pending", "make_live", "supersede", "set_state", "get", "query", "pages", "count")
        + ("metadata_keys", "evict", "restore", "fail"),
        "records",
    ),
    **dict.fromkeys(
        ("rename", "add_tags", "remove_tags", "set_alias", "remove_alias", "create_pinned", "delete_pinned")
        + ("user_aliases",),
        "labels",
    ),
    **dict.fromkeys(("claim", "holder", "release", "registry_id"), "claims"),
}


class Registry(ABC):
    """Records of checkpoints, made of its parts: ``records`` (:class:`RecordStore`), ``labels``
    (:class:`Labels`) and ``claims`` (:class:`StreamClaims`).

    A backend builds one object per part (one object may be two parts) and sets the three
    attributes; callers name the part they use (``registry.records.get(id)``). The registry
    itself keeps only what is the whole's: its ``uri``, the records it could not read
    (:meth:`skipped`), and ``close``. State changes are checked: ``set_state`` only moves a
    record out of the states it expects, so an evicted record can never become live by accident
    (invariant 2). Each stream has one writer at a time: ``claims.claim`` records it and refuses
    a second live one. Each part is proven by its own contract suite in ``tests/contracts/``.

    Examples:
        >>> from tracker_saver.registry import open_registry
        >>> reg = open_registry(":memory:")
        >>> rec = reg.records.create_pending(UploadInfo("p", "r", "checkpoint", "checkpoint_1.pt", slot=0,
        ...                                  key="p/r/checkpoint.slot0.pt"), uri="file:///tmp/p/r/checkpoint.slot0.pt")
        >>> reg.records.make_live(rec.id, sha256="0" * 64, size=1).state.value
        'live'
    """

    #: A URI-like description for messages (never contains credentials).
    uri: str
    #: Records and their states.
    records: RecordStore
    #: Names, tags, user aliases and pins.
    labels: Labels
    #: One writer per stream.
    claims: StreamClaims

    def skipped(self) -> dict[str, str]:
        """Records this registry found but could not read back, id → why: queries skip them (a warning
        names each, once), ``get`` refuses them, ``fsck`` reports them. Someone else wrote them: a
        tracker's UI, a script."""
        return dict(self.__dict__.get("_skipped", {}))

    def _skip(self, record_id: str, why: str) -> None:
        """Note an unreadable record (warned about the first time only); a backend's ``records`` calls it."""
        found: dict[str, str] = self.__dict__.setdefault("_skipped", {})
        if record_id not in found:
            log.warning("%s: skipped record %s, which cannot be read: %s", self.uri, record_id, why)
        found[record_id] = why

    def close(self) -> None:  # noqa: B027 (an optional hook: nothing to release by default)
        """Release connections."""

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"

    if not TYPE_CHECKING:  # mypy sees no flat method, so the package always names the part it uses

        def __getattr__(self, name: str) -> Any:
            """0.1.0's flat methods (:data:`MOVED`), deprecated: each warns and answers from its part."""
            part = MOVED.get(name)
            if part is None:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            warnings.warn(
                f"Registry.{name}() is deprecated: use registry.{part}.{name}(); it goes in 0.3.0",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(getattr(self, part), name)
