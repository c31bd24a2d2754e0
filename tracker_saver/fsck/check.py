"""fsck's check: compare what the registry says with what output_uri holds, changing nothing.

``check`` reads only. Per stream it finds lies (a loadable record whose object is missing or
differs), pending records of a dead writer, revivable records (not live, bytes still in their
slot), orphans (slot objects no record claims), leftover temp files and multipart uploads, and
streams holding more objects than live records. Sizes are compared first; an object is hashed
only when a decision needs it, or for every loadable record with ``deep=True``. An output_uri
that cannot be opened or read (an endpoint down, refused credentials) makes each of its
streams an ``unreachable`` finding, and the check goes on with the other output_uris.

``repair`` fixes what it can without losing a valid checkpoint, through the start-up recovery
code (:func:`tracker_saver.save.recovery.settle_stream`), holding each stream's claim. A stream
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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tracker_saver.core.errors import ConfigError, IntegrityError, RecordNotFoundError, RegistryError, StorageError
from tracker_saver.core.naming import parse_slot_key, run_prefix
from tracker_saver.core.pools import shared_pool
from tracker_saver.core.records import LOADABLE, LOADABLE_OR_PINNED, Record, RecordState, StreamId
from tracker_saver.core.text import check_filters
from tracker_saver.core.wording import plural
from tracker_saver.fsck.report import (
    PLANNED,
    STALE_AFTER_S,
    CheckedStream,
    Finding,
    Report,
    damaged_finding,
    foreign_finding,
    in_folder,
    misplaced_finding,
    record_finding,
    staged_finding,
    unreachable_finding,
)
from tracker_saver.fsck.special import not_regular, not_regular_finding
from tracker_saver.lifecycle.pins import KEPT_BY, is_archived
from tracker_saver.registry.base import Query, Registry
from tracker_saver.registry.sqlite_check import damage, sqlite_file
from tracker_saver.save.locate import misplaced
from tracker_saver.save.ownership import owner_key
from tracker_saver.save.recovery import owner_of, plan_slot
from tracker_saver.storage import Storage, open_storage
from tracker_saver.storage.base import ObjectStat, listed

__all__ = ["check", "check_registry_file", "check_streams"]


def _check_stream(
    storage: Storage,
    stream: StreamId,
    records: list[Record],
    objects: dict[str, ObjectStat],
    special: Mapping[str, str],
    *,
    busy: bool,
    deep: bool,
) -> list[Finding]:
    """One stream's lie, pending, revivable, orphan, over-slots and not-regular findings (only lies and
    not-regular ones while it is written)."""
    label, out, digests = stream.label, [], {}

    def sha(key: str) -> str:
        if key not in digests:
            digests[key] = storage.digest(key)[1]
        return digests[key]

    by_key: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        if record.key and record.state is not RecordState.PINNED:  # pins: _check_pins
            by_key[record.key].append(record)
    owned = [k for k in objects if owner_of(k, [stream]) is not None]
    mine = [k for k in owned if k not in special]
    loadable = 0
    for key in sorted(set(by_key) | set(owned)):
        if key in special:  # never read: it may block, or lead out of the folder
            out.append(not_regular_finding(label, key, special[key], map(_holder, by_key[key])))
            continue
        found = objects.get(key)
        live = [r for r in by_key[key] if r.state in LOADABLE]
        loadable += len(live)
        for record in live:
            if (why := _differs(record, found, sha, hash_it=deep or len(live) > 1)) is not None:
                out.append(record_finding("lie", label, record, why, "demote it to evicted, then settle its slot"))
        if busy:
            continue
        plan = plan_slot(storage, by_key[key])
        loadable += sum(change != "failed" for _, change in plan)
        for record, change in plan:
            kind, why, fix = PLANNED[change]
            out.append(record_finding(kind, label, record, why, fix))
        if found is not None and not live and all(change == "failed" for _, change in plan):
            out.append(
                Finding(
                    "orphan",
                    label,
                    f"{plural(found.size, 'byte')} that no record claims",
                    "delete it with --delete-orphans",
                    key,
                )
            )
    if len(mine) > loadable and not busy:
        out.append(
            Finding(
                "over-slots",
                label,
                f"{plural(len(mine), 'object')} for {plural(loadable, 'loadable record')} (after repair)",
                "settled by the fixes of its other findings",
            )
        )
    return out


def _differs(record: Record, found: ObjectStat | None, sha: Callable[[str], str], *, hash_it: bool) -> str | None:
    """Why ``found`` (the object at ``record``'s key) does not hold the record's bytes; ``None`` if it does.

    Sizes first, then the store's fingerprint; the object is hashed when the fingerprint says
    it was replaced, and with ``hash_it``.
    """
    assert record.key is not None
    if found is None:
        return "its object is missing"
    if found.size != record.size:
        return f"its object has {plural(found.size, 'byte')}, the record says {record.size}"
    if _replaced(record, found) and sha(record.key) != record.sha256:
        return "its object was replaced since its commit: the store's fingerprint and the sha256 differ"
    if hash_it and sha(record.key) != record.sha256:
        return "its object's sha256 differs from the record's"
    return None


def _replaced(record: Record, found: ObjectStat) -> bool:
    """Whether the store says the object is not the version the record's commit made (a stat or a HEAD)."""
    return record.fingerprint is not None and found.fingerprint is not None and record.fingerprint != found.fingerprint


def _holder(record: Record) -> str:
    """A record as a finding about its object names it: ``live record 3 ('model_1.pt')``."""
    return f"{record.state.value} record {record.id} ({record.name!r})"


def _check_pins(
    registry: Registry,
    storage: Storage,
    label: str,
    pins: list[Record],
    listing: Mapping[str, ObjectStat],
    prefix: str,
    special: Mapping[str, str],
    deep: bool,
) -> list[Finding]:
    """One stream's pinned and archive records: each one's object is there and holds its bytes.

    The listing of the run's folder answers for keys under it; any other pin key gets a stat.
    A pin that looks gone is read again from the registry first: an unpin or a ``keep_every_max``
    deletes the record before its object, so one that ran meanwhile is not a finding.
    """
    out: list[Finding] = []
    digests: dict[str, str] = {}

    def sha(key: str) -> str:
        if key not in digests:
            digests[key] = storage.digest(key)[1]
        return digests[key]

    by_key: dict[str, list[Record]] = defaultdict(list)
    for record in pins:
        if record.key:
            by_key[record.key].append(record)
    for key, records in sorted(by_key.items()):
        if key in special:
            out.append(not_regular_finding(label, key, special[key], map(_holder, records)))
            continue
        found = listing.get(key) if key.startswith(prefix) and listed(key, prefix) else storage.stat(key)
        for record in records:
            why = _differs(record, found, sha, hash_it=deep)
            if why is None or (again := _still_pinned(registry, record)) is None:
                continue
            if is_archived(again):  # keep_every_max deletes these: say which kind of pin it is
                why += f" (an archive entry, kept {again.metadata[KEPT_BY]})"
            if found is None:
                fix = f"none: its bytes are gone; put the file back from a copy, or drop the record (`tracker-saver models unpin {record.id}`)"
                out.append(record_finding("pin-missing", label, record, why, fix))
            else:
                fix = f"none: put the pinned file back from a copy, or drop the record and its file (`tracker-saver models unpin {record.id}`)"
                out.append(record_finding("pin-differs", label, record, why, fix))
    return out


def _still_pinned(registry: Registry, record: Record) -> Record | None:
    """``record`` as the registry has it now, with its metadata; ``None`` if an unpin removed it since the query."""
    try:
        again = registry.records.get(record.id)
    except RecordNotFoundError:
        return None
    return again if again.key == record.key else None


def _shared_pins(records: list[Record]) -> list[Finding]:
    """``shared-pin`` findings: a pinned record whose object another loadable record points at too.

    Two pins that raced onto one key, or a pin key that is another stream's slot key: an unpin of
    one deletes the bytes the other still needs (or a save overwrites them).
    """
    by_object: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for record in records:
        if record.output_uri and record.key and record.state in LOADABLE_OR_PINNED:
            by_object[(record.output_uri, record.key)].append(record)
    out = []
    for (uri, _key), sharing in sorted(by_object.items()):
        pinned = [r for r in sharing if r.state is RecordState.PINNED]
        if not pinned or len(sharing) < 2:
            continue
        newest = max(pinned, key=lambda r: (r.created_at, r.id))
        sid = StreamId(uri, newest.project, newest.run, newest.stream)
        others = ", ".join(_holder(r) for r in sharing if r is not newest)
        why = f"its object is also {others}'s: unpinning one deletes the bytes the other still points at"
        fix = (
            "none: keep one record per object; unpin the others (`tracker-saver models unpin ID` keeps an "
            "object that another record still names)"
        )
        out.append(record_finding("shared-pin", sid.label, newest, why, fix))
    return out


def check_streams(
    registry: Registry, query: Query, deep: bool, options: Mapping[str, Any], stale_after_s: float = STALE_AFTER_S
) -> tuple[Report, dict[str, CheckedStream]]:
    """:func:`check`'s report, and where each finding's stream was found (what ``repair`` acts on).

    A SQLite registry's own check (:func:`~tracker_saver.registry.sqlite_check.damage`) reads
    the whole file: it runs on its own thread, alongside the records' check, since SQLite works
    without the GIL (0.6 s of CPU at 100,000 records, a third of what the records' check takes). A damaged
    registry is then the only finding: its records cannot be trusted, and ``repair`` acts on
    none of them, so nothing is written to it.
    """
    path = sqlite_file(registry.uri)
    if path is None:
        return _check_records(registry, query, deep, options, stale_after_s)
    integrity = shared_pool("tracker-saver-fsck").submit(damage, path, deep=deep)
    try:
        found = _check_records(registry, query, deep, options, stale_after_s)
    except RegistryError:  # "database disk image is malformed": say that the file is damaged, if it is
        if not integrity.result():
            raise
    if problems := integrity.result():
        return Report(findings=[damaged_finding(registry.uri, path, problems)]), {}
    return found


def _check_records(
    registry: Registry, query: Query, deep: bool, options: Mapping[str, Any], stale_after_s: float
) -> tuple[Report, dict[str, CheckedStream]]:
    """What :func:`check_streams` finds in the records and at their output_uris."""
    grouped: dict[tuple[str, str, str], dict[StreamId, list[Record]]] = defaultdict(lambda: defaultdict(list))
    report, checked, now, placed = Report(), dict[str, CheckedStream](), time.time(), []
    for record in registry.records.query(query):
        if (problem := misplaced(record)) is not None:
            report.findings.append(misplaced_finding(record, problem))
            continue
        placed.append(record)
        if record.output_uri is not None:
            sid = StreamId(record.output_uri, record.project, record.run, record.stream)
            grouped[(record.output_uri, record.project, record.run)][sid].append(record)
    report.findings += _shared_pins(placed)
    for record_id, why in sorted(registry.skipped().items()):
        report.findings.append(
            Finding(
                "unreadable",
                registry.uri,
                f"record {record_id} cannot be read: {why}",
                "none: put it back as tracker_saver wrote it, or delete it, in the tracker",
                record_id=record_id,
            )
        )
    storages: dict[str, Storage | str] = {}
    for (uri, project, run), streams in sorted(grouped.items()):
        if uri not in storages:
            storages[uri] = _open(registry, uri, options)  # once per output_uri, even when it fails
        storage = storages[uri]
        if isinstance(storage, str):
            why = storage
        else:
            try:
                found, found_streams = _check_run(
                    registry, storage, project, run, streams, query, deep, now, stale_after_s
                )
            except StorageError as exc:  # an endpoint down, refused credentials: the other runs still get checked
                why = str(exc)
            except IntegrityError as exc:  # the storage refused a path that changed since its lstat: not read
                where = f"{storage.uri}/{run_prefix(project, run)}"
                report.findings.append(not_regular_finding(where, exc.key, str(exc), ()))
                continue
            else:
                report.streams += found.streams
                report.findings += found.findings
                checked.update(found_streams)
                continue
        for sid in sorted(streams, key=lambda s: s.label):
            report.findings.append(unreachable_finding(sid.label, uri, why))
    return report, checked


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
) -> tuple[Report, dict[str, CheckedStream]]:
    """One run's folder at one output_uri: its streams, and what no stream claims."""
    report, checked = Report(), {}
    prefix = run_prefix(project, run)
    listing = {o.key: o for o in storage.list(prefix)}
    # Only the run's own folder: a project "a/b" lives under project "a"'s folder.
    # slot objects only (``<stream>.slot<k><ext>``): only these can be orphans
    objects = {k: o for k, o in listing.items() if parse_slot_key(k) and in_folder(k, prefix)}
    staged = [s for s in storage.staged(prefix) if in_folder(s.key, prefix)]
    paths = {r.key for rs in streams.values() for r in rs if r.key} | set(
        objects
    )  # check_streams left out misplaced ones
    folders: dict[str, str | None] = {}
    special = {key: why for key in sorted(paths) if (why := not_regular(storage, key, folders)) is not None}
    known: set[str] = set()
    for sid, records in sorted(streams.items(), key=lambda kv: kv[0].label):
        report.streams.append(sid.label)
        if (owner := not_regular(storage, owner_key(sid), folders)) is not None:  # read_owner would open it
            report.findings.append(not_regular_finding(sid.label, owner_key(sid), owner, ()))
            known |= {k for k in objects if owner_of(k, [sid]) is not None}
            continue
        if (foreign := foreign_finding(registry, storage, sid)) is not None:
            report.findings.append(foreign)
            known |= {k for k in objects if owner_of(k, [sid]) is not None}
            continue
        wrong = [r for r in records if misplaced(r, storage) is not None]
        report.findings += [misplaced_finding(r, misplaced(r, storage) or "") for r in wrong]
        records = [r for r in records if r not in wrong]
        holder = registry.claims.holder(sid)
        checked[sid.label] = CheckedStream(storage, sid)
        if holder is not None:
            detail = f"written by {holder.describe()} now: its unfinished saves are not checked"
            report.findings.append(Finding("busy", sid.label, detail, "none: run repair when it has stopped"))
        report.findings += _check_stream(storage, sid, records, objects, special, busy=holder is not None, deep=deep)
        pins = [r for r in records if r.state is RecordState.PINNED]
        report.findings += _check_pins(registry, storage, sid.label, pins, listing, prefix, special, deep)
        known |= {k for k in objects if owner_of(k, [sid]) is not None}
        for item in staged:
            if owner_of(item.key, [sid]) is not None and (holder is None or now - item.started >= stale_after_s):
                report.findings.append(staged_finding(sid.label, item, now, stale_after_s))
    if query.stream is None:  # slot objects and staged writes of no stream the registry knows
        where = f"{storage.uri}/{prefix}"
        checked[where] = CheckedStream(storage, None)
        for key in sorted(set(objects) - known):
            if key in special:
                report.findings.append(not_regular_finding(where, key, special[key], ()))
                continue
            report.findings.append(
                Finding(
                    "orphan",
                    where,
                    f"{plural(objects[key].size, 'byte')} of no known stream",
                    "delete it with --delete-orphans",
                    key,
                )
            )
        for item in staged:
            if owner_of(item.key, streams) is None:
                report.findings.append(staged_finding(where, item, now, stale_after_s))
    return report, checked


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
    return check_streams(registry, query, deep, storage_options or {})[0]


def check_registry_file(path: str, *, deep: bool = False) -> Report:
    """Only the SQLite registry file's own integrity, read without opening it as a registry.

    For a file that cannot be opened as a registry at all (a destroyed header page): the
    command line says through this whether it is damaged, rather than only that it cannot be
    opened. :func:`check` makes the same check first on every SQLite registry it is given.

    Examples:
        >>> import os, tempfile
        >>> junk = os.path.join(tempfile.mkdtemp(), "registry.db")
        >>> _ = open(junk, "wb").write(b"not a database" * 512)
        >>> [(f.kind, f.detail.split("SQLite says: ")[1]) for f in check_registry_file(junk).problems]
        [('damaged-registry', 'file is not a database')]
    """
    report, path = Report(), str(Path(path).expanduser().resolve())
    if problems := damage(path, deep=deep):
        report.findings.append(damaged_finding(f"sqlite:///{path}", path, problems))
    return report
