"""Find records: filters, where and sort keys checked against the registry, references, runs summed up.

A where or sort key must be *known* (see :mod:`tracker_saver.core.query`): a record field, a key
every saved record carries, or a metadata key some record in the registry holds. Checking
costs a look at the registry's keys only when a key might be unknown: a condition on a key
that no record has never matches, so a where-key is known as soon as something matched, and a
sort key as soon as a record of the page has it.

Like :mod:`tracker_saver.models`, importing this module imports neither torch nor ignite.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from tracker_saver.core.errors import ConfigError, RecordNotFoundError
from tracker_saver.core.query import RECORD_FIELDS, SAVED_KEYS, check_key, parse_order, parse_where
from tracker_saver.core.records import DERIVED_ALIASES, LOADABLE, LOADABLE_OR_PINNED, Record, RecordState
from tracker_saver.core.text import check_filters, check_text
from tracker_saver.core.timings import SaveStats, save_stats
from tracker_saver.lifecycle.pins import is_archived
from tracker_saver.registry import Query, Registry
from tracker_saver.registry.shared import shared_registry
from tracker_saver.storage import canonical_uri

__all__ = [
    "SAVED_STATES",
    "RegistryArg",
    "count_models",
    "find_model_pages",
    "find_models",
    "get_model",
    "resolve_model",
    "run_stats",
    "run_summaries",
]

RegistryArg = str | os.PathLike[str] | Registry | None
#: The states of records whose save completed: what :func:`run_stats` counts (a pinned record is a
#: copy, which would count its save twice).
SAVED_STATES = (RecordState.LIVE, RecordState.REVIVED, RecordState.EVICTED)


def _query(
    *,
    output_uri: str | os.PathLike[str] | None = None,
    project: str | None = None,
    run: str | None = None,
    stream: str | None = None,
    filename: str | None = None,
    name: str | None = None,
    tag: str | None = None,
    alias: str | None = None,
    where: Mapping[str, Any] | Sequence[str] | str | None = None,
    live: bool | None = None,
    states: Sequence[RecordState | str] | None = None,
    order_by: str | Sequence[str] | None = None,
    offset: int = 0,
    limit: int | None = None,
) -> Query:
    check_filters(project=project, run=run, stream=stream, filename=filename, name=name, tag=tag, alias=alias)
    wanted: tuple[RecordState, ...] | None = None
    if states is not None:
        try:
            wanted = tuple(RecordState(s) for s in states)
        except ValueError as exc:
            raise ConfigError(f"{exc}: use one of {', '.join(s.value for s in RecordState)}") from None
    elif live is not None:
        wanted = LOADABLE_OR_PINNED if live else tuple(s for s in RecordState if not s.loadable)
    return Query(
        output_uri=_uri_filter(output_uri),
        project=project,
        run=run,
        stream=stream,
        filename=filename,
        name=name,
        tag=tag,
        alias=alias,
        states=wanted,
        where=parse_where(where),
        order_by=parse_order(order_by),
        offset=offset,
        limit=limit,
    )


def _uri_filter(output_uri: str | os.PathLike[str] | None) -> str | None:
    """An output_uri filter as records hold it (a local path's odd bytes are %-escaped there), checked."""
    uri = None if output_uri is None else canonical_uri(output_uri)
    check_filters(output_uri=uri)
    return uri


def _check_keys(registry: Registry, query: Query, matched: bool, page: Sequence[Record] = ()) -> None:
    """Raise ``ConfigError`` for a where or sort key of ``query`` that is not known (a typo)."""
    doubtful = [("where", c.key) for c in query.where if not matched]
    doubtful += [("sort", o.key) for o in query.order_by if not any(o.key in r.metadata for r in page)]
    doubtful = [(what, key) for what, key in doubtful if key not in RECORD_FIELDS and key not in SAVED_KEYS]
    if doubtful:
        present = registry.records.metadata_keys()
        for what, key in doubtful:
            check_key(what, key, present)


def find_models(
    *,
    project: str | None = None,
    run: str | None = None,
    stream: str | None = None,
    where: Mapping[str, Any] | Sequence[str] | str | None = None,
    order_by: str | Sequence[str] | None = None,
    live: bool | None = None,
    states: Sequence[RecordState | str] | None = None,
    limit: int | None = None,
    filename: str | None = None,
    name: str | None = None,
    tag: str | None = None,
    alias: str | None = None,
    offset: int = 0,
    output_uri: str | os.PathLike[str] | None = None,
    registry: RegistryArg = None,
) -> list[Record]:
    """Records matching metadata conditions, sorted by any key, one page at a time.

    Args:
        project: only this project.
        run: only this run.
        stream: only this stream (Ignite basename, e.g. ``best_model``).
        where: ``{"score": (">", 0.9), "prefix": "best", "global_step": ("in", [10, 20])}``, or
            a where-text such as ``"score>0.9"``, ``"state=live and name!=x"`` (the grammar of
            ``--where``, docs/cli.md), or a list of them.
        order_by: a key or list of keys, ``-`` for descending (``"-score"``).
        live: ``True``: only loadable records (live, revived or pinned); ``False``: only the others.
        states: only these states (overrides ``live``).
        limit: at most this many (``None``: all).
        filename: only records with this Ignite filename.
        name: only records with this display name.
        tag: only records with this tag.
        alias: only records this alias names: ``"best"``/``"latest"`` give each matching stream's
            best/latest record, a user alias (``"production"``) the record it names.
        offset: skip this many records first (for pages; see :func:`count_models`).
        output_uri: only records stored at this output_uri (a folder, ``file://`` URI or
            ``s3://BUCKET/PREFIX``, spelled as ``TrackerSaver`` was given it): the same project
            and run at two output_uris are two sets of streams.
        registry: which registry (default as in :func:`open_registry`); one connection per
            location is kept open and reused by every call. It must exist.

    Raises:
        ConfigError: a bad where-expression (``score>abc``), a where or sort key that is neither
            a record field nor a metadata key of any record (``scor>0.5``: the message names the
            known keys), a negative limit or offset.
        RegistryError: no registry at that path.

    Examples:
        >>> find_models(project="nothing-here", alias="best", registry=":memory:")
        []
    """
    query = _query(
        output_uri=output_uri,
        project=project,
        run=run,
        stream=stream,
        filename=filename,
        name=name,
        tag=tag,
        alias=alias,
        where=where,
        live=live,
        states=states,
        order_by=order_by,
        offset=offset,
        limit=limit,
    )
    reg = shared_registry(registry, create=False)
    found = reg.records.query(query)
    _check_keys(reg, query, bool(found), found)
    return found


def find_model_pages(*, registry: RegistryArg = None, **filters: Any) -> Iterator[list[Record]]:
    """:func:`find_models`'s records a page at a time, each as soon as the registry has read it.

    Takes :func:`find_models`' keyword arguments. MLflow gives a page per search request, in the
    server's creation order, each page sorted as :func:`find_models` sorts (with ``order_by``,
    one page: a sort needs every record first); SQLite gives 100 records, then twice as many each
    time. An unknown where key is a ``ConfigError`` once nothing matched, as in :func:`find_models`.

    Examples:
        >>> list(find_model_pages(project="nothing-here", registry=":memory:"))
        []
    """
    query = _query(**filters)
    reg = shared_registry(registry, create=False)
    matched = False
    for page in reg.records.pages(query):
        if page and not matched:
            _check_keys(reg, query, True, page)
            matched = True
        if page:
            yield page
    if not matched:
        _check_keys(reg, query, False)


def count_models(
    *,
    project: str | None = None,
    run: str | None = None,
    stream: str | None = None,
    where: Mapping[str, Any] | Sequence[str] | str | None = None,
    live: bool | None = None,
    states: Sequence[RecordState | str] | None = None,
    filename: str | None = None,
    name: str | None = None,
    tag: str | None = None,
    alias: str | None = None,
    output_uri: str | os.PathLike[str] | None = None,
    registry: RegistryArg = None,
) -> int:
    """How many records :func:`find_models` finds with the same filters (for pagination).

    Examples:
        >>> count_models(project="nothing-here", registry=":memory:")
        0
    """
    query = _query(
        output_uri=output_uri,
        project=project,
        run=run,
        stream=stream,
        filename=filename,
        name=name,
        tag=tag,
        alias=alias,
        where=where,
        live=live,
        states=states,
    )
    reg = shared_registry(registry, create=False)
    count = reg.records.count(query)
    _check_keys(reg, query, count > 0)
    return count


def get_model(record_id: str | int, *, registry: RegistryArg = None) -> Record:
    """The record with ``record_id`` (``RecordNotFoundError`` if none).

    Examples:
        >>> get_model(1, registry=":memory:")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        tracker_saver.core.errors.RecordNotFoundError: record 1 does not exist
    """
    return shared_registry(registry, create=False).records.get(check_text("record id", str(record_id)))


def resolve_model(
    ref: str | int, *, output_uri: str | os.PathLike[str] | None = None, registry: RegistryArg = None
) -> Record:
    """The record a reference names.

    Args:
        ref: a record id (``"12"``); ``PROJECT/RUN/STREAM@ALIAS`` (``mnist/r1/best_model@best``:
            the stream's ``best``/``latest``, or the project's user alias if that record is in
            the stream); ``PROJECT/RUN/STREAM`` (its ``latest``); or ``PROJECT@ALIAS`` (a user
            alias such as ``mnist@production``). With streams at several output_uris, the most
            recently created match wins: pass ``output_uri`` to choose one.
        output_uri: only a record stored at this output_uri (for a record id: an error if it
            is stored elsewhere).
        registry: which registry.

    Raises:
        RecordNotFoundError: nothing matches; the message says what was looked for.

    Examples:
        >>> resolve_model("mnist/r1/best_model@best", registry=":memory:")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        tracker_saver.core.errors.RecordNotFoundError: no record is mnist/r1/best_model@best
    """
    reg = shared_registry(registry, create=False)
    uri = _uri_filter(output_uri)
    at_uri = "" if uri is None else f" at {uri}"
    text = check_text("model reference", str(ref).strip())
    if not text:
        raise RecordNotFoundError(
            "empty model reference: give a record id, PROJECT/RUN/STREAM[@ALIAS] or PROJECT@ALIAS"
        )
    left, at, alias = text.rpartition("@")
    if not at:
        left, alias = text, "latest"
    parts = left.rsplit("/", 2)
    if not at and len(parts) < 3:
        record = reg.records.get(text)  # a record id
        if uri is not None and record.output_uri != uri:
            raise RecordNotFoundError(
                f"record {record.id} ({record.name!r}) is stored at {record.output_uri}, not{at_uri}: give a "
                "record of that output_uri, or leave the output_uri out",
                record_id=record.id,
            )
        return record
    if not alias or not left:
        raise RecordNotFoundError(
            f"model reference {text!r} is not PROJECT/RUN/STREAM@ALIAS or PROJECT@ALIAS: e.g. mnist/r1/best_model@best"
        )
    found: list[Record] = []
    if len(parts) == 3:
        project, run, stream = parts
        found = reg.records.query(Query(output_uri=uri, project=project, run=run, stream=stream, alias=alias))
    if not found and alias not in DERIVED_ALIASES and at:
        found = reg.records.query(Query(output_uri=uri, project=left, alias=alias))
    if not found:
        raise RecordNotFoundError(
            f"no record is {text}{at_uri}: check the names with `tracker-saver models list` (aliases are shown "
            "there); a reference is a record id, PROJECT/RUN/STREAM[@ALIAS] or PROJECT@ALIAS"
        )
    return max(found, key=lambda r: r.created_at)


def run_summaries(records: Sequence[Record]) -> list[dict[str, Any]]:
    """One row per (output_uri, project, run): streams, records, live slot records, last save time.

    ``live`` counts the live and revived slot records, at most the run's slots; a pinned copy is a
    record but not live, and its time (when it was pinned) is no save.

    The same project and run at two output_uris are two rows: their streams never share a slot.

    Examples:
        >>> run_summaries([])
        []
    """
    runs: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in records:
        row = runs.setdefault(
            (r.output_uri or "", r.project, r.run),
            {
                "output_uri": r.output_uri,
                "project": r.project,
                "run": r.run,
                "streams": [],
                "records": 0,
                "live": 0,
                "last_save": None,
            },
        )
        if r.stream not in row["streams"]:
            row["streams"].append(r.stream)
        row["records"] += 1
        if r.state is RecordState.PINNED:  # a copy out of the slots: neither a live slot nor a save
            continue
        row["live"] += int(r.state in LOADABLE)
        if row["last_save"] is None or r.created_at > row["last_save"]:
            row["last_save"] = r.created_at
    for row in runs.values():
        row["streams"].sort()
    return sorted(runs.values(), key=lambda row: (row["project"], row["run"], row["output_uri"] or ""))


def run_stats(
    project: str, run: str, *, output_uri: str | os.PathLike[str] | None = None, registry: RegistryArg = None
) -> list[SaveStats]:
    """What the saves of run ``project/run`` cost: one row per stream, then the run's (``stream=None``).

    Counts the completed saves (:data:`SAVED_STATES`) that carry timings (see :mod:`tracker_saver.core.timings`).

    Raises:
        RecordNotFoundError: the run has no record (at ``output_uri``, when given).

    Examples:
        >>> run_stats("mnist", "r1", registry=":memory:")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        tracker_saver.core.errors.RecordNotFoundError: run mnist/r1 has no records: see `tracker-saver runs list`
    """
    found = find_models(project=project, run=run, output_uri=output_uri, registry=registry)
    if not found:
        at = f" at {output_uri}" if output_uri is not None else ""
        raise RecordNotFoundError(
            f"run {project}/{run} has no records{at}: see `tracker-saver runs list` for the runs and their projects"
        )
    saved = [r for r in found if r.state in SAVED_STATES]
    rows = [
        _footprint(
            save_stats([r for r in saved if r.stream == stream], project=project, run=run, stream=stream),
            [r for r in found if r.stream == stream],
        )
        for stream in sorted({r.stream for r in found})
    ]
    return [*rows, _footprint(save_stats(saved, project=project, run=run), found)]


def _footprint(stats: SaveStats, records: Sequence[Record]) -> SaveStats:
    """``stats`` with the objects ``records`` hold: slots (live, revived), archive entries, other pins."""
    pinned = [r for r in records if r.state is RecordState.PINNED]
    archive = sum(is_archived(r) for r in pinned)
    slots = sum(r.state in (RecordState.LIVE, RecordState.REVIVED) for r in records)
    return dataclasses.replace(stats, slots=slots, archive=archive, pinned=len(pinned) - archive)
