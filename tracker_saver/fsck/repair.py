"""fsck's repair: settle what :func:`tracker_saver.fsck.check` finds without losing a valid checkpoint."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from tracker_saver.core.claims import new_holder, release_local
from tracker_saver.core.errors import StreamBusyError
from tracker_saver.core.records import LOADABLE, RecordState, StreamId
from tracker_saver.core.text import check_filters
from tracker_saver.fsck.check import check_streams
from tracker_saver.fsck.report import (
    REPORTED_ONLY,
    STALE_AFTER_S,
    CheckedStream,
    Finding,
    Report,
)
from tracker_saver.registry.base import Query, Registry, busy, stream_query
from tracker_saver.save.recovery import plan_slot, settle_stream
from tracker_saver.storage import Storage
from tracker_saver.storage.base import Staged

__all__ = ["repair"]


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
    What is someone else's or gone for good (a misplaced or unreadable record, a pinned record
    whose object is missing or differs, a pin object two records share, a path that is not a
    regular file) is reported and left to a person; a damaged registry is written nothing.

    With ``dry_run`` it changes nothing and echoes each action it would take (``would …``):
    recovery's plan for each slot after the demotions, and a slot object that the plan leaves
    no record for (an orphan the next check reports). A stream on an unreachable output_uri is
    skipped.

    Returns:
        The check made afterwards (with ``dry_run``: the check before, so its problems are
        what ``check`` reports), with the actions taken (``would …`` with ``dry_run``).
    """
    check_filters(project=project, run=run, stream=stream)
    query = Query(project=project, run=run, stream=stream, details=False)
    before, checked = check_streams(registry, query, deep, storage_options or {}, stale_after_s)
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
        elif finding.kind in REPORTED_ONLY:  # someone else's record, bytes that are gone, a damaged registry
            act(f"leave {finding.detail} ({finding.fix})")
        else:
            todo[finding.stream].append(finding)
    for label, findings in todo.items():
        where = checked[label]
        holder = new_holder(where)  # alive while this repair runs
        try:
            if where.stream is not None and not dry_run:
                registry.claims.claim(where.stream, holder)
            elif where.stream is not None and (writer := registry.claims.holder(where.stream)) is not None:
                raise busy(where.stream, writer)  # what the claim would say
        except StreamBusyError as exc:
            act(f"skip {label}: {exc}")
            continue
        try:
            _repair_stream(registry, where, findings, delete_orphans, stale_after_s, act, dry_run)
        finally:
            if where.stream is not None and not dry_run:
                registry.claims.release(where.stream, holder)
            release_local(holder)
    if dry_run:
        before.actions = actions
        return before
    after = check_streams(registry, query, deep, storage_options or {}, stale_after_s)[0]
    after.actions = actions
    return after


def _repair_stream(
    registry: Registry,
    where: CheckedStream,
    findings: list[Finding],
    delete_orphans: bool,
    stale_after_s: float,
    act: Callable[..., None],
    dry_run: bool,
) -> None:
    storage, sid = where.storage, where.stream
    settled = {f.key for f in findings if f.kind in ("lie", "pending", "revivable")}  # settle_stream's keys
    if sid is not None:
        for f in findings:
            if f.kind == "lie" and f.record_id is not None:
                act(
                    f"demote record {f.record_id} to evicted in {sid.label} ({f.detail})",
                    lambda rid=f.record_id: registry.records.evict(rid),
                )
        slots = sorted({f.slot for f in findings if f.kind in ("lie", "pending", "revivable") and f.slot is not None})
        demoted = {f.record_id for f in findings if f.kind == "lie"}
        for slot in slots:
            if dry_run:
                _plan_slot(registry, storage, sid, slot, demoted, act)
            else:
                for action in settle_stream(storage, registry, sid, slot=slot, restored=RecordState.REVIVED).actions:
                    act(f"{action} in {sid.label}")
    now = time.time()
    for f in findings:
        if f.kind == "orphan" and f.key is not None:
            if delete_orphans:
                act(f"delete orphan {storage.url(f.key)} ({f.detail})", lambda key=f.key: storage.delete(key))
            else:
                act(f"keep orphan {storage.url(f.key)}: pass --delete-orphans to delete it")
        elif f.kind == "staged" and f.key in settled and f.key is not None:  # settle_stream removes it, claim held
            act(f"remove {f.detail} to {storage.url(f.key)} with the settling of its slot")
        elif f.kind == "staged" and f.key and f.ref and f.started is not None and now - f.started >= stale_after_s:
            item = Staged(f.key, f.ref, f.started)
            act(f"remove {f.detail} to {storage.url(f.key)}", lambda item=item: storage.abort_staged(item))


#: A change of recovery's plan, as a dry run says it would make it.
_WOULD = {"promoted": "promote", "restored": "revive", "failed": "fail"}


def _plan_slot(
    registry: Registry, storage: Storage, sid: StreamId, slot: int, demoted: set[str | None], act: Callable[..., None]
) -> None:
    """A dry run of :func:`settle_stream` on one slot, as it runs after the demotions of the slot's lies."""
    records = registry.records.query(stream_query(sid, slot=slot))
    records = [replace(r, state=RecordState.EVICTED) if r.id in demoted else r for r in records]
    plan = plan_slot(storage, records)
    for record, change in plan:
        act(f"{_WOULD[change]} record {record.id} ({record.filename!r}, slot {slot}) in {sid.label}")
    kept = any(r.state in LOADABLE for r in records) or any(change != "failed" for _, change in plan)
    key = next((r.key for r in records if r.key), None)
    if not kept and key is not None and storage.stat(key) is not None:
        act(f"leave {storage.url(key)} with no record: an orphan, kept until a repair with --delete-orphans")
