"""What fsck found and did: its findings, their kinds, and the report ``tracker-saver fsck`` prints."""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from tracker_saver.core.claims import STALE_AFTER_S
from tracker_saver.core.errors import StreamOwnedError
from tracker_saver.core.masking import strip_userinfo
from tracker_saver.core.records import Record, StreamId
from tracker_saver.registry.base import Registry
from tracker_saver.save.ownership import read_owner
from tracker_saver.storage import Storage
from tracker_saver.storage.base import Staged

__all__ = [
    "PLANNED",
    "PROBLEMS",
    "REPORTED_ONLY",
    "STALE_AFTER_S",
    "Finding",
    "CheckedStream",
    "Report",
    "damaged_finding",
    "foreign_finding",
    "in_folder",
    "misplaced_finding",
    "record_finding",
    "staged_finding",
    "unreachable_finding",
]


#: Finding kinds that ``repair`` reports and never acts on: what they name is someone else's, or
#: bytes that are gone; a person decides (each finding's ``fix`` says how).
REPORTED_ONLY = (
    "misplaced",
    "unreadable",
    "pin-missing",
    "pin-differs",
    "shared-pin",
    "not-regular",
    "damaged-registry",
)
#: Finding kinds that are problems (``busy`` and ``foreign`` only say a stream was skipped).
PROBLEMS = ("lie", "pending", "revivable", "orphan", "staged", "over-slots", "unreachable", *REPORTED_ONLY)


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
class CheckedStream:
    """A stream fsck checked, the unit ``repair`` settles under one claim: its storage and its id.

    ``stream`` is ``None`` for objects at a storage that no known stream claims (orphans).
    """

    storage: Storage
    stream: StreamId | None


def in_folder(key: str, prefix: str) -> bool:
    return "/" not in key[len(prefix) :]


def record_finding(kind: str, label: str, record: Record, why: str, fix: str) -> Finding:
    what = f"{record.state.value} record {record.id} ({record.name!r}): {why}"
    return Finding(kind, label, what, fix, record.key, record.id, record.slot)


def staged_finding(label: str, item: Staged, now: float, stale_after_s: float) -> Finding:
    age = now - item.started
    fix = "remove it" if age >= stale_after_s else f"remove it once older than {stale_after_s:.0f} s (--stale-after)"
    detail = f"unfinished write {item.ref!r} started {age:.0f} s ago"
    return Finding("staged", label, detail, fix, item.key, ref=item.ref, started=item.started)


def misplaced_finding(record: Record, problem: str) -> Finding:
    stream = f"{record.project}/{record.run}/{record.stream}"
    return record_finding(
        "misplaced",
        stream,
        record,
        problem,
        "none: nothing reads or deletes what it names; delete the record in its registry",
    )


def foreign_finding(registry: Registry, storage: Storage, sid: StreamId) -> Finding | None:
    """A ``foreign`` finding when another registry owns ``sid`` at ``storage`` (its owner object says so)."""
    try:
        owner = read_owner(storage, sid)
    except StreamOwnedError as exc:
        return Finding("foreign", sid.label, str(exc), "none: restore the owner object, or take the stream over")
    if owner is None or owner.registry_id == registry.claims.registry_id(sid.project):
        return None
    return Finding(
        "foreign",
        sid.label,
        f"owned by {owner.describe()}: not checked from this registry",
        "none: check it with the registry that owns it",
    )


def damaged_finding(uri: str, path: str, problems: list[str]) -> Finding:
    """A ``damaged-registry`` finding: SQLite's own check of the registry file failed."""
    quoted = shlex.quote(path)
    detail = f"the registry file {path!r} is damaged, so no record was checked; SQLite says: {'; '.join(problems)}"
    fix = (
        "none: write nothing to it (no saves, no repair) and keep the file; restore it from a backup, or rescue "
        f"what SQLite can still read into a new file (sqlite3 {quoted} .recover | sqlite3 recovered.db) and see "
        "what it kept before you put it in the damaged one's place (`tracker-saver --registry recovered.db runs "
        "list`, then `fsck --deep`): a damaged page's records are lost, or left in its lost_and_found table"
    )
    return Finding("damaged-registry", uri, detail, fix)


def unreachable_finding(label: str, uri: str, why: str) -> Finding:
    # `why` is our own message (storage errors mask credentials); the uri loses any user:password@.
    detail = f"output_uri {strip_userinfo(uri)} could not be read, so the stream was not checked: {why}"
    return Finding("unreachable", label, detail, "none: make it reachable, then run fsck again")


#: How each change of a recovery plan reads as a finding: (kind, why, what repair does).
PLANNED = {
    "promoted": ("pending", "its bytes are complete in its slot (the writer died before registering)", "promote it"),
    "failed": ("pending", "its bytes never reached its slot (the writer died)", "mark it failed"),
    "restored": ("revivable", "no loadable record holds its slot and its bytes still match", "revive it"),
}
