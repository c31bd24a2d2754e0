"""fsck's check: compare what the registry says with what output_uri holds, changing nothing.

``check`` reads only. Per stream it finds lies (a loadable record whose object is missing or
differs), pending records of a dead writer, revivable records (not live, bytes still in their
slot), orphans (slot objects no record claims), leftover temp files and multipart uploads, and
streams holding more objects than live records. Sizes are compared first; an object is hashed
only when a decision needs it, or for every loadable record with ``deep=True``. An output_uri
that cannot be opened or read (an endpoint down, refused credentials) makes each of its
streams an ``unreachable`` finding, and the check goes on with the other output_uris.

``repair`` fixes what it can without losing a valid checkpoint, through the start-up recovery
code (:func:`tracker_saver.save.recovery.recover_slot`), holding each stream's claim. A stream
that a live process writes is reported and left alone.

Examples:
    >>> import tempfile
    >>> from tracker_saver.registry import open_registry
    >>> check(open_registry(":memory:")).problems
    []
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from tracker_saver.core.errors import ConfigError, StorageError
from tracker_saver.core.naming import parse_slot_key, run_prefix
from tracker_saver.core.records import LOADABLE, Record, StreamId
from tracker_saver.core.text import check_filters
from tracker_saver.core.wording import plural
from tracker_saver.fsck.report import (
    PLANNED,
    STALE_AFTER_S,
    Finding,
    Place,
    Report,
    foreign_finding,
    in_folder,
    misplaced_finding,
    record_finding,
    staged_finding,
    unreachable_finding,
)
from tracker_saver.registry.base import Query, Registry
from tracker_saver.save.locate import misplaced
from tracker_saver.save.recovery import owner_of, plan_slot
from tracker_saver.storage import Storage, open_storage
from tracker_saver.storage.base import ObjectStat

__all__ = ["check", "check_places"]


def _check_stream(
    storage: Storage,
    stream: StreamId,
    records: list[Record],
    objects: dict[str, ObjectStat],
    *,
    busy: bool,
    deep: bool,
) -> list[Finding]:
    """One stream's lie, pending, revivable, orphan and over-slots findings (only lies while it is written)."""
    label, out, digests = stream.label, [], {}

    def sha(key: str) -> str:
        if key not in digests:
            digests[key] = storage.digest(key)[1]
        return digests[key]

    by_key: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        if record.key:
            by_key[record.key].append(record)
    mine = [k for k in objects if owner_of(k, [stream]) is not None]
    loadable = 0
    for key in sorted(set(by_key) | set(mine)):
        found = objects.get(key)
        live = [r for r in by_key[key] if r.state in LOADABLE]
        loadable += len(live)
        for record in live:
            if found is None:
                why = "its object is missing"
            elif found.size != record.size:
                why = f"its object has {plural(found.size, 'byte')}, the record says {record.size}"
            elif _replaced(record, found) and sha(key) != record.sha256:
                why = "its object was replaced since its commit: the store's fingerprint and the sha256 differ"
            elif (deep or len(live) > 1) and sha(key) != record.sha256:
                why = "its object's sha256 differs from the record's"
            else:
                continue
            out.append(record_finding("lie", label, record, why, "demote it to evicted, then settle its slot"))
        if busy:
            continue
        plan = plan_slot(storage, by_key[key])
        loadable += sum(change != "failed" for _, change in plan)
        for record, change in plan:
            kind, why, fix = PLANNED[change]
            out.append(record_finding(kind, label, record, why, fix))
        if found is not None and not live and all(change == "failed" for _, change in plan):
            out.append(Finding("orphan", label, f"{plural(found.size, 'byte')} that no record claims",
                               "delete it with --delete-orphans", key))  # fmt: skip
    if len(mine) > loadable and not busy:
        out.append(Finding("over-slots", label, f"{plural(len(mine), 'object')} for {plural(loadable, 'loadable record')} (after repair)",
                           "settled by the fixes of its other findings"))  # fmt: skip
    return out


def _replaced(record: Record, found: ObjectStat) -> bool:
    """Whether the store says the object is not the version the record's commit made (a stat or a HEAD)."""
    return record.fingerprint is not None and found.fingerprint is not None and record.fingerprint != found.fingerprint


def check_places(
    registry: Registry, query: Query, deep: bool, options: Mapping[str, Any], stale_after_s: float = STALE_AFTER_S
) -> tuple[Report, dict[str, Place]]:
    """:func:`check`'s report, and where each finding's stream was found (what ``repair`` acts on)."""
    grouped: dict[tuple[str, str, str], dict[StreamId, list[Record]]] = defaultdict(lambda: defaultdict(list))
    report, places, now = Report(), {}, time.time()
    for record in registry.query(query):
        if (problem := misplaced(record)) is not None:
            report.findings.append(misplaced_finding(record, problem))
        elif record.output_uri is not None:
            sid = StreamId(record.output_uri, record.project, record.run, record.stream)
            grouped[(record.output_uri, record.project, record.run)][sid].append(record)
    for record_id, why in sorted(registry.skipped().items()):
        report.findings.append(Finding("unreadable", registry.uri, f"record {record_id} cannot be read: {why}",
                                       "none: put it back as tracker_saver wrote it, or delete it, in the tracker",
                                       record_id=record_id))  # fmt: skip
    storages: dict[str, Storage | str] = {}
    for (uri, project, run), streams in sorted(grouped.items()):
        if uri not in storages:
            storages[uri] = _open(registry, uri, options)  # once per output_uri, even when it fails
        storage = storages[uri]
        if isinstance(storage, str):
            why = storage
        else:
            try:
                found, found_places = _check_run(registry, storage, project, run, streams, query, deep, now,
                                                 stale_after_s)  # fmt: skip
            except StorageError as exc:  # an endpoint down, refused credentials: the other runs still get checked
                why = str(exc)
            else:
                report.streams += found.streams
                report.findings += found.findings
                places.update(found_places)
                continue
        for sid in sorted(streams, key=lambda s: s.label):
            report.findings.append(unreachable_finding(sid.label, uri, why))
    return report, places


def _open(registry: Registry, uri: str, options: Mapping[str, Any]) -> Storage | str:
    """The storage of an output_uri, or why it cannot be opened (bad options, no boto3)."""
    for_uri = getattr(registry, "storage_options_for", None)  # a tracker that knows its S3 credentials
    try:
        return open_storage(uri, **(for_uri(uri, options) if for_uri else options))
    except (ConfigError, StorageError, ModuleNotFoundError) as exc:
        return str(exc)


def _check_run(
    registry: Registry,
    storage: Storage,
    project: str,
    run: str,
    streams: Mapping[StreamId, list[Record]],
    query: Query,
    deep: bool,
    now: float,
    stale_after_s: float,
) -> tuple[Report, dict[str, Place]]:
    """One run's folder at one output_uri: its streams, and what no stream claims."""
    report, places = Report(), {}
    prefix = run_prefix(project, run)
    # Only the run's own folder: a project "a/b" lives under project "a"'s folder.
    # slot objects only (``<stream>.slot<k><ext>``): only these can be orphans
    objects = {o.key: o for o in storage.list(prefix) if parse_slot_key(o.key) and in_folder(o.key, prefix)}
    staged = [s for s in storage.staged(prefix) if in_folder(s.key, prefix)]
    known: set[str] = set()
    for sid, records in sorted(streams.items(), key=lambda kv: kv[0].label):
        report.streams.append(sid.label)
        if (foreign := foreign_finding(registry, storage, sid)) is not None:
            report.findings.append(foreign)
            known |= {k for k in objects if owner_of(k, [sid]) is not None}
            continue
        wrong = [r for r in records if misplaced(r, storage) is not None]
        report.findings += [misplaced_finding(r, misplaced(r, storage) or "") for r in wrong]
        records = [r for r in records if r not in wrong]
        holder = registry.holder(sid)
        places[sid.label] = Place(storage, sid)
        if holder is not None:
            detail = f"written by {holder.describe()} now: its unfinished saves are not checked"
            report.findings.append(Finding("busy", sid.label, detail, "none: run repair when it has stopped"))
        report.findings += _check_stream(storage, sid, records, objects, busy=holder is not None, deep=deep)
        known |= {k for k in objects if owner_of(k, [sid]) is not None}
        for item in staged:
            if owner_of(item.key, [sid]) is not None and (holder is None or now - item.started >= stale_after_s):
                report.findings.append(staged_finding(sid.label, item, now, stale_after_s))
    if query.stream is None:  # slot objects and staged writes of no stream the registry knows
        where = f"{storage.uri}/{prefix}"
        places[where] = Place(storage, None)
        for key in sorted(set(objects) - known):
            report.findings.append(Finding("orphan", where, f"{plural(objects[key].size, 'byte')} of no known stream",
                                           "delete it with --delete-orphans", key))  # fmt: skip
        for item in staged:
            if owner_of(item.key, streams) is None:
                report.findings.append(staged_finding(where, item, now, stale_after_s))
    return report, places


def check(
    registry: Registry,
    *,
    project: str | None = None,
    run: str | None = None,
    stream: str | None = None,
    deep: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> Report:
    """Check every stream the registry knows (narrowed by project, run, stream); change nothing.

    Args:
        registry: the registry to check.
        project, run, stream: only these (``None``: all).
        deep: hash every loadable record's object, not only where sizes leave a doubt.
        storage_options: options for opening each output_uri (S3: ``endpoint_url``, ``profile``…).
    """
    check_filters(project=project, run=run, stream=stream)
    query = Query(project=project, run=run, stream=stream, details=False)
    return check_places(registry, query, deep, storage_options or {})[0]
