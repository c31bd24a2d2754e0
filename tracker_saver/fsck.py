"""fsck and repair: compare what the registry says with what output_uri holds, and settle it.

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
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tracker_saver.core.claims import new_holder, release_local
from tracker_saver.core.errors import ConfigError, StorageError, StreamBusyError
from tracker_saver.core.masking import strip_userinfo
from tracker_saver.core.naming import parse_slot_key, run_prefix
from tracker_saver.core.records import LOADABLE, Record, RecordState, StreamId
from tracker_saver.core.text import check_filters
from tracker_saver.core.wording import plural
from tracker_saver.registry.base import Query, Registry, busy, stream_query
from tracker_saver.save.recovery import owner_of, plan_slot, recover_slot
from tracker_saver.storage import Storage, open_storage
from tracker_saver.storage.base import ObjectStat, Staged

__all__ = ["STALE_AFTER_S", "Finding", "Report", "check", "repair"]

#: ``repair`` leaves a temp file or multipart upload younger than this alone (unless its slot is
#: settled under the stream's claim, as at start-up): an hour is six claim leases, so no live
#: writer on any host still owns it.
STALE_AFTER_S = 3600.0


#: Finding kinds that are problems (``busy`` only says a stream was skipped).
PROBLEMS = ("lie", "pending", "revivable", "orphan", "staged", "over-slots", "unreachable")


@dataclass(frozen=True)
class Finding:
    """One thing fsck found: its kind, where (a stream's label), and what repair does about it.

    ``slot`` names the slot of a record finding; ``ref`` and ``started`` the staged write of a
    ``staged`` finding (a temp file's path or an upload id, and when it began).
    """

    kind: str
    stream: str
    detail: str
    fix: str
    key: str | None = None
    record_id: str | None = None
    slot: int | None = None
    ref: str | None = None
    started: float | None = None


@dataclass
class Report:
    """What a check (or a repair) found and did."""

    streams: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[Finding]:
        """Findings that make ``tracker-saver fsck`` exit non-zero."""
        return [f for f in self.findings if f.kind in PROBLEMS]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for ``--json``."""
        return {
            "streams": self.streams,
            "problems": len(self.problems),
            "findings": [asdict(f) for f in self.findings],
            "actions": self.actions,
        }


@dataclass
class _Place:
    """Where findings were made: a storage, and the stream (``None``: no known stream)."""

    storage: Storage
    stream: StreamId | None


def _in_folder(key: str, prefix: str) -> bool:
    return "/" not in key[len(prefix) :]


def _record_finding(kind: str, label: str, record: Record, why: str, fix: str) -> Finding:
    what = f"{record.state.value} record {record.id} ({record.name!r}): {why}"
    return Finding(kind, label, what, fix, record.key, record.id, record.slot)


def _staged_finding(label: str, item: Staged, now: float, stale_after_s: float) -> Finding:
    age = now - item.started
    fix = "remove it" if age >= stale_after_s else f"remove it once older than {stale_after_s:.0f} s (--stale-after)"
    detail = f"unfinished write {item.ref!r} started {age:.0f} s ago"
    return Finding("staged", label, detail, fix, item.key, ref=item.ref, started=item.started)


def _unreachable_finding(label: str, uri: str, why: str) -> Finding:
    # `why` is our own message (storage errors mask credentials); the uri loses any user:password@.
    detail = f"output_uri {strip_userinfo(uri)} could not be read, so the stream was not checked: {why}"
    return Finding("unreachable", label, detail, "none: make it reachable, then run fsck again")


#: How each change of a recovery plan reads as a finding: (kind, why, what repair does).
_PLANNED = {
    "promoted": ("pending", "its bytes are complete in its slot (the writer died before registering)", "promote it"),
    "failed": ("pending", "its bytes never reached its slot (the writer died)", "mark it failed"),
    "restored": ("revivable", "no loadable record holds its slot and its bytes still match", "revive it"),
}


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
            elif (deep or len(live) > 1) and sha(key) != record.sha256:
                why = "its object's sha256 differs from the record's"
            else:
                continue
            out.append(_record_finding("lie", label, record, why, "demote it to evicted, then settle its slot"))
        if busy:
            continue
        plan = plan_slot(storage, by_key[key])
        loadable += sum(change != "failed" for _, change in plan)
        for record, change in plan:
            kind, why, fix = _PLANNED[change]
            out.append(_record_finding(kind, label, record, why, fix))
        if found is not None and not live and all(change == "failed" for _, change in plan):
            out.append(Finding("orphan", label, f"{plural(found.size, 'byte')} that no record claims",
                               "delete it with --delete-orphans", key))  # fmt: skip
    if len(mine) > loadable and not busy:
        out.append(Finding("over-slots", label, f"{plural(len(mine), 'object')} for {plural(loadable, 'loadable record')} (after repair)",
                           "settled by the fixes of its other findings"))  # fmt: skip
    return out


def _check(
    registry: Registry, query: Query, deep: bool, options: Mapping[str, Any], stale_after_s: float = STALE_AFTER_S
) -> tuple[Report, dict[str, _Place]]:
    grouped: dict[tuple[str, str, str], dict[StreamId, list[Record]]] = defaultdict(lambda: defaultdict(list))
    for record in registry.query(query):
        if record.output_uri is not None:
            sid = StreamId(record.output_uri, record.project, record.run, record.stream)
            grouped[(record.output_uri, record.project, record.run)][sid].append(record)
    report, places, now = Report(), {}, time.time()
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
            report.findings.append(_unreachable_finding(sid.label, uri, why))
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
) -> tuple[Report, dict[str, _Place]]:
    """One run's folder at one output_uri: its streams, and what no stream claims."""
    report, places = Report(), {}
    prefix = run_prefix(project, run)
    # Only the run's own folder: a project "a/b" lives under project "a"'s folder.
    # slot objects only (``<stream>.slot<k><ext>``): only these can be orphans
    objects = {o.key: o for o in storage.list(prefix) if parse_slot_key(o.key) and _in_folder(o.key, prefix)}
    staged = [s for s in storage.staged(prefix) if _in_folder(s.key, prefix)]
    known: set[str] = set()
    for sid, records in sorted(streams.items(), key=lambda kv: kv[0].label):
        holder = registry.holder(sid)
        report.streams.append(sid.label)
        places[sid.label] = _Place(storage, sid)
        if holder is not None:
            detail = f"written by {holder.describe()} now: its unfinished saves are not checked"
            report.findings.append(Finding("busy", sid.label, detail, "none: run repair when it has stopped"))
        report.findings += _check_stream(storage, sid, records, objects, busy=holder is not None, deep=deep)
        known |= {k for k in objects if owner_of(k, [sid]) is not None}
        for item in staged:
            if owner_of(item.key, [sid]) is not None and (holder is None or now - item.started >= stale_after_s):
                report.findings.append(_staged_finding(sid.label, item, now, stale_after_s))
    if query.stream is None:  # slot objects and staged writes of no stream the registry knows
        where = f"{storage.uri}/{prefix}"
        places[where] = _Place(storage, None)
        for key in sorted(set(objects) - known):
            report.findings.append(Finding("orphan", where, f"{plural(objects[key].size, 'byte')} of no known stream",
                                           "delete it with --delete-orphans", key))  # fmt: skip
        for item in staged:
            if owner_of(item.key, streams) is None:
                report.findings.append(_staged_finding(where, item, now, stale_after_s))
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
    return _check(registry, Query(project=project, run=run, stream=stream), deep, storage_options or {})[0]


def repair(
    registry: Registry,
    *,
    project: str | None = None,
    run: str | None = None,
    stream: str | None = None,
    deep: bool = False,
    delete_orphans: bool = False,
    stale_after_s: float = STALE_AFTER_S,
    dry_run: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    echo: Callable[[str], None] = print,
) -> Report:
    """Fix what :func:`check` finds without losing a valid checkpoint, and ``echo`` each action.

    Lies are demoted to evicted; then each slot with a lie, a pending or a revivable record
    goes through start-up recovery (promote, revive, fail). Temp files and multipart uploads
    older than ``stale_after_s`` are removed; orphans are deleted only with ``delete_orphans``.
    Each stream is repaired holding its claim; one that a live process writes is skipped.

    With ``dry_run`` it changes nothing and echoes each action it would take (``would …``):
    recovery's plan for each slot after the demotions, and a slot object that the plan leaves
    no record for (an orphan the next check reports). A stream on an unreachable output_uri is
    skipped.

    Returns:
        The check made afterwards (with ``dry_run``: the check before, so its problems are
        what ``check`` reports), with the actions taken (``would …`` with ``dry_run``).
    """
    check_filters(project=project, run=run, stream=stream)
    query = Query(project=project, run=run, stream=stream)
    before, places = _check(registry, query, deep, storage_options or {}, stale_after_s)
    actions: list[str] = []

    def act(text: str, do: Callable[[], object] | None = None) -> None:
        actions.append(("would " if dry_run else "") + text)
        echo(actions[-1])
        if do is not None and not dry_run:
            do()

    todo: dict[str, list[Finding]] = defaultdict(list)
    for finding in before.problems:
        if finding.kind == "unreachable":  # nothing to repair it with
            act(f"skip {finding.stream}: {finding.detail}")
        else:
            todo[finding.stream].append(finding)
    for label, findings in todo.items():
        place = places[label]
        holder = new_holder(place)  # alive while this repair runs
        try:
            if place.stream is not None and not dry_run:
                registry.claim(place.stream, holder)
            elif place.stream is not None and (writer := registry.holder(place.stream)) is not None:
                raise busy(place.stream, writer)  # what the claim would say
        except StreamBusyError as exc:
            act(f"skip {label}: {exc}")
            continue
        try:
            _repair_place(registry, place, findings, delete_orphans, stale_after_s, act, dry_run)
        finally:
            if place.stream is not None and not dry_run:
                registry.release(place.stream, holder)
            release_local(holder)
    if dry_run:
        before.actions = actions
        return before
    after = _check(registry, query, deep, storage_options or {}, stale_after_s)[0]
    after.actions = actions
    return after


def _repair_place(
    registry: Registry,
    place: _Place,
    findings: list[Finding],
    delete_orphans: bool,
    stale_after_s: float,
    act: Callable[..., None],
    dry_run: bool,
) -> None:
    storage, sid = place.storage, place.stream
    settled = {f.key for f in findings if f.kind in ("lie", "pending", "revivable")}  # recover_slot's keys
    if sid is not None:
        for f in findings:
            if f.kind == "lie" and f.record_id is not None:
                act(f"demote record {f.record_id} to evicted in {sid.label} ({f.detail})",
                    lambda rid=f.record_id: registry.evict(rid))  # fmt: skip
        slots = sorted({f.slot for f in findings if f.kind in ("lie", "pending", "revivable") and f.slot is not None})
        demoted = {f.record_id for f in findings if f.kind == "lie"}
        for slot in slots:
            if dry_run:
                _plan_slot(registry, storage, sid, slot, demoted, act)
            else:
                for action in recover_slot(storage, registry, sid, slot, restored=RecordState.REVIVED):
                    act(f"{action} in {sid.label}")
    now = time.time()
    for f in findings:
        if f.kind == "orphan" and f.key is not None:
            if delete_orphans:
                act(f"delete orphan {storage.url(f.key)} ({f.detail})", lambda key=f.key: storage.delete(key))
            else:
                act(f"keep orphan {storage.url(f.key)}: pass --delete-orphans to delete it")
        elif f.kind == "staged" and f.key in settled and f.key is not None:  # recover_slot removes it, claim held
            act(f"remove {f.detail} to {storage.url(f.key)} with the settling of its slot")
        elif f.kind == "staged" and f.key and f.ref and f.started is not None and now - f.started >= stale_after_s:
            item = Staged(f.key, f.ref, f.started)
            act(f"remove {f.detail} to {storage.url(f.key)}", lambda item=item: storage.abort_staged(item))


#: A change of recovery's plan, as a dry run says it would make it.
_WOULD = {"promoted": "promote", "restored": "revive", "failed": "fail"}


def _plan_slot(
    registry: Registry, storage: Storage, sid: StreamId, slot: int, demoted: set[str | None], act: Callable[..., None]
) -> None:
    """A dry run of :func:`recover_slot` on one slot, as it runs after the demotions of the slot's lies."""
    records = registry.query(stream_query(sid, slot=slot))
    records = [replace(r, state=RecordState.EVICTED) if r.id in demoted else r for r in records]
    plan = plan_slot(storage, records)
    for record, change in plan:
        act(f"{_WOULD[change]} record {record.id} ({record.filename!r}, slot {slot}) in {sid.label}")
    kept = any(r.state in LOADABLE for r in records) or any(change != "failed" for _, change in plan)
    key = next((r.key for r in records if r.key), None)
    if not kept and key is not None and storage.stat(key) is not None:
        act(f"leave {storage.url(key)} with no record: an orphan, kept until a repair with --delete-orphans")
