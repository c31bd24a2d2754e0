"""The invariants, checked on what storage and registry hold (read directly, never through a saver).

* **footprint**: per stream at most ``n_saved`` complete objects, each at a slot key
  ``<project>/<run>/<stream>.slot<k>.pt`` with ``k < n_saved``, and nothing else at output_uri.
  Staged leftovers (temp files, incomplete multipart uploads) are counted: at most one per
  stream right after a kill (the save in flight), none once the next process has started;
* **truth, with no repair at all**: every ``live``/``revived`` record's object exists with the
  recorded size and sha256, and loads (``torch.load``) as the model and trainer state of the
  iteration its filename names; ClearML shows no model as loadable that is not;
* after start-up recovery: no ``pending`` record; start-up only promoted, revived or failed
  records; the loadable records are exactly the twin's; every object belongs to one of them;
  once a save of the last stream completed, the last stream has a loadable checkpoint.
"""

from __future__ import annotations

import collections
import hashlib
import io
import re
from dataclasses import dataclass

import torch

from tests.soak.backends import Backend, Obj, Row
from tests.soak.plan import N_SAVED

__all__ = ["LOADABLE", "Snapshot", "after_kill", "after_startup", "snapshot", "transitions"]

LOADABLE = ("live", "revived")
#: The transitions start-up recovery may make (DESIGN, "Record states"), and their names.
STARTUP = {("pending", "live"): "promoted", ("evicted", "revived"): "revived", ("pending", "failed"): "failed"}
_ITERATION = {
    "checkpoint": re.compile(r"checkpoint_(\d+)\.pt"),
    "best_checkpoint": re.compile(r"best_checkpoint_(\d+)_acc="),
}


@dataclass(frozen=True)
class Snapshot:
    """What the back end holds at one moment: records, complete objects, staged leftovers."""

    rows: list[Row]
    objects: list[Obj]
    staged: list[str]


def snapshot(backend: Backend) -> Snapshot:
    """Read the registry, then storage (a record is written before its object, so this order is safe)."""
    rows = backend.rows()
    objects, staged = backend.listing()
    return Snapshot(rows, objects, staged)


def _stream_of(backend: Backend, key: str) -> tuple[str, int] | None:
    """``(stream, slot)`` of a slot key of the run, or ``None`` for any other key."""
    found = re.fullmatch(rf"{re.escape(backend.project)}/{re.escape(backend.run)}/(\w+)\.slot(\d+)\.pt", key)
    return (found[1], int(found[2])) if found and found[1] in N_SAVED else None


def _footprint(backend: Backend, snap: Snapshot, *, started: bool) -> list[str]:
    problems = []
    per_stream: collections.Counter[str] = collections.Counter()
    for obj in snap.objects:
        found = _stream_of(backend, obj.key)
        if found is None:
            problems.append(f"footprint: {obj.key!r} is not a slot key of the run's streams")
            continue
        stream, slot = found
        per_stream[stream] += 1
        if slot >= N_SAVED[stream]:
            problems.append(f"footprint: {obj.key!r} is slot {slot} of {stream}, which has {N_SAVED[stream]} slots")
    for stream, count in per_stream.items():
        if count > N_SAVED[stream]:
            problems.append(f"footprint: {stream} has {count} objects, n_saved={N_SAVED[stream]}")
    leftovers: collections.Counter[str] = collections.Counter()
    for item in snap.staged:
        name = item.rsplit("/", 1)[-1].removeprefix(".tmp-")
        leftovers[name.split(".slot")[0]] += 1
    if started and snap.staged:
        problems.append(f"footprint: staged leftovers remain after start-up: {', '.join(snap.staged)}")
    for stream, count in leftovers.items():
        if count > 1:
            problems.append(f"footprint: {count} staged leftovers of {stream} (one save in flight at most)")
    return problems


def _truth(backend: Backend, snap: Snapshot) -> list[str]:
    problems = []
    for row in snap.rows:
        if row.shown and row.state not in LOADABLE:
            problems.append(
                f"lie: the tracker shows model {row.id} ({row.filename!r}) as loadable, but it is {row.state}"
            )
        if row.state not in LOADABLE:
            continue
        what = f"truth: {row.state} record {row.id} ({row.filename!r}, {row.key})"
        data = backend.read(row.key) if row.key else None
        if data is None:
            problems.append(f"{what} has no object")
            continue
        digest = hashlib.sha256(data).hexdigest()
        if (len(data), digest) != (row.size, row.sha256):
            problems.append(
                f"{what}: the object has {len(data)} bytes, sha256 {digest[:12]}…; "
                f"the record says {row.size} bytes, sha256 {(row.sha256 or '-')[:12]}…"
            )
            continue
        problems += _content(what, row, data)
    return problems


def _content(what: str, row: Row, data: bytes) -> list[str]:
    """The bytes are the checkpoint the filename names: model and trainer state of its iteration."""
    pattern = _ITERATION.get(row.stream)
    found = pattern.match(row.filename) if pattern else None
    if found is None:
        return [f"{what}: the filename names no iteration"]
    iteration = int(found[1])
    try:
        state = torch.load(io.BytesIO(data), weights_only=True)
        got = int(state["trainer"]["iteration"])
        weights = state["model"]["linear.weight"]
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        return [f"{what} does not load as a checkpoint: {type(exc).__name__}: {reason}"]
    if got != iteration or not bool((weights == float(iteration)).all()):
        return [f"{what} holds the state of iteration {got}, not {iteration}"]
    return []


def after_kill(backend: Backend, snap: Snapshot) -> list[str]:
    """Right after a kill, before anything started: footprint and truth with no repair at all."""
    return [f"after the kill: {p}" for p in _footprint(backend, snap, started=False) + _truth(backend, snap)]


def transitions(before: Snapshot, after: Snapshot) -> tuple[collections.Counter[str], list[str]]:
    """What start-up changed: counts of promoted/revived/failed records, and changes it may not make."""
    counts: collections.Counter[str] = collections.Counter()
    problems = []
    old = {r.id: r for r in before.rows}
    for row in after.rows:
        was = old.get(row.id)
        if was is None:
            problems.append(f"start-up: record {row.id} ({row.filename!r}, {row.state}) appeared before training")
        elif was.state != row.state:
            change = STARTUP.get((was.state, row.state))
            if change is None:
                problems.append(f"start-up: record {row.id} ({row.filename!r}) went from {was.state} to {row.state}")
            else:
                counts[change] += 1
    return counts, problems


def after_startup(backend: Backend, snap: Snapshot, expected: dict[str, list[str]], last_completed: bool) -> list[str]:
    """After the next process's start-up recovery, before it trains: everything settled and as expected."""
    problems = _footprint(backend, snap, started=True) + _truth(backend, snap)
    problems += [
        f"recovery: record {r.id} ({r.filename!r}) is still pending" for r in snap.rows if r.state == "pending"
    ]
    loadable = [r for r in snap.rows if r.state in LOADABLE]
    for stream in N_SAVED:
        have = sorted(r.filename for r in loadable if r.stream == stream)
        want = sorted(expected.get(stream, []))
        if have != want:
            problems.append(f"records: {stream} has loadable {have}, Ignite and the slot rules keep {want}")
    keys = collections.Counter(r.key for r in loadable)
    problems += [f"records: {n} loadable records share the key {k!r}" for k, n in keys.items() if n > 1]
    owned = set(keys)
    problems += [f"footprint: {o.key!r} belongs to no loadable record" for o in snap.objects if o.key not in owned]
    if last_completed and not any(r.stream == "checkpoint" for r in loadable):
        problems.append("last: a save of the last stream completed, yet it has no loadable checkpoint")
    return [f"after start-up: {p}" for p in problems]
