"""The race soak: a training and N racers on one registry and output_uri at once, then every invariant checked.

DESIGN, "Commands race": two processes may pin, unpin, alias, rename, prune, take over or repair the
same record or stream at once, on every registry. Here one training process saves real Ignite
checkpoints on two streams (the stream's one writer) while ``racers`` processes (``tests.soak.racer``,
at least 3) make the operations of their seeded plans (:func:`tests.soak.plan.race_plan`) through
the Python API, the CLI's ``main`` and a few ``python -m tracker_saver`` processes, half of them on
one hot record, so that they collide. When every racer is done the training stops cleanly, and the
checker reads storage and registry directly (``tests.soak.backends``):

* **footprint**: each stream has exactly ``n_saved`` slot objects; every other object is a pinned
  record's; no staged leftover;
* **truth**: every live, revived and pinned record's object exists with its size and sha256, and
  holds the checkpoint its filename names; no two records share one object (a pin object included);
* **aliases**: each alias names loadable or pinned records only (ClearML may leave one on two), and
  ``tracker-saver models get PROJECT@ALIAS`` gives bytes with such a record's sha256;
* **renames**: a renamed record keeps a name some racer gave it, and only an unpin deletes it;
* **pins**: a pinned record that a ``get`` found without its bytes still exists at the end: a violation;
* **fsck** (``tracker_saver.fsck.check``, ``deep``) finds no problem;
* every failed operation failed with an error of tracker_saver's tree (CLI: exit status 2).
"""

from __future__ import annotations

import collections
import hashlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.soak import check
from tests.soak.backends import Backend, Row, open_backend
from tests.soak.driver import Proc, Zygote
from tests.soak.plan import N_SAVED

__all__ = ["RaceStats", "run_race"]

HELD = ("live", "revived", "pinned")


@dataclass
class RaceStats:
    """What a race soak did and found."""

    backend: str
    seed: int
    racers: int
    ops: collections.Counter[str] = field(default_factory=collections.Counter)
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    via: collections.Counter[str] = field(default_factory=collections.Counter)
    saves: int = 0
    pinned: int = 0
    shared_aliases: int = 0  # aliases left on two records by two moves at once (ClearML: allowed)
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def processes(self) -> int:
        """The racers and the training."""
        return self.racers + 1

    def summary(self) -> str:
        """``backend=local processes=5 operations=120 violations=0 …``."""
        return (
            f"backend={self.backend} processes={self.processes} operations={sum(self.ops.values())} "
            f"violations={len(self.violations)} ok={self.outcomes['ok']} refused={self.outcomes['refused']} "
            f"idle={self.outcomes['idle']} saves={self.saves} pinned_at_end={self.pinned} "
            f"seconds={self.seconds:.1f} seed={self.seed}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "seed": self.seed,
            "processes": self.processes,
            "racers": self.racers,
            "operations": sum(self.ops.values()),
            "ops": dict(sorted(self.ops.items())),
            "via": dict(self.via),
            "outcomes": dict(self.outcomes),
            "saves": self.saves,
            "pinned_at_end": self.pinned,
            "aliases_on_two_records": self.shared_aliases,
            "violations": self.violations,
            "seconds": round(self.seconds, 1),
        }


class Race:
    """One race soak run on one back end: start, race, stop, check."""

    def __init__(
        self,
        backend: Backend,
        stats: RaceStats,
        ops: int,
        step_s: float,
        exec_every: int,
        round_s: float,
        log: Callable[[str], None],
    ) -> None:
        self.backend, self.stats, self.ops, self.step_s, self.exec_every = backend, stats, ops, step_s, exec_every
        self.round_s, self.log = round_s, log
        self.reports: list[dict[str, Any]] = []
        self.t0 = time.monotonic()

    def violation(self, problem: str) -> None:
        self.stats.violations.append(problem)
        self.log(f"  VIOLATION {problem}")

    def run(self, zygote: Zygote) -> None:
        seed = self.stats.seed
        trainer = zygote.spawn("scratch", "", seed, step_s=self.step_s)
        trainer.send("start")
        trainer.wait_for("ready", 300)
        trainer.send("go")
        racers = [  # once the registry exists: they open it as the CLI does, never creating it
            zygote.spawn(
                "",
                "",
                seed,
                role="racer",
                racer=w,
                ops=self.ops,
                exec_every=self.exec_every,
                round_s=self.round_s,
                folder=str(self.backend.workdir / f"racer-{w}"),
            )
            for w in range(self.stats.racers)
        ]
        done: collections.Counter[str] = collections.Counter()
        while min(done[s] for s in N_SAVED) < max(N_SAVED.values()) + 1:  # every slot used, one record evicted
            event = trainer.wait_for("done", 120)
            done[_stream(event["f"])] += 1
        self.log(f"  the training saved every slot in {time.monotonic() - self.t0:.1f} s")
        for racer in racers:
            racer.connect()
            racer.wait_for("ready", 120)
        start = time.time() + 0.2
        for racer in racers:
            racer.send(f"go {start}")
        for index, racer in enumerate(racers):
            self._collect(index, racer)
        self.log(f"  the racers are done at {time.monotonic() - self.t0:.1f} s")
        trainer.send("stop")
        self._drain_trainer(trainer, done)

    def _collect(self, index: int, racer: Proc) -> None:
        while (event := racer.next(900)) is not None:
            if event.get("ev") == "op":
                self.reports.append(event)
                self._count(event)
            elif event.get("ev") == "end":
                if event.get("error"):
                    self.violation(f"racer {index} stopped: {event['error']}")
                break
        if racer.wait() != 0:
            self.violation(f"racer {index} exited with status {racer.code}: {racer.stderr()[-500:]}")

    def _count(self, event: dict[str, Any]) -> None:
        self.stats.ops[event["op"]] += 1
        self.stats.via[event["via"]] += 1
        outcome = "idle" if event["ok"] is None else "ok" if event["ok"] else "refused"
        self.stats.outcomes[outcome] += 1
        if event.get("unexpected"):
            self.violation(
                f"racer {event['w']} op {event['i']} ({event['op']} via {event['via']} on record "
                f"{event.get('target')}) failed outside tracker_saver's errors: {event.get('error', '')[:1500]}"
            )

    def _drain_trainer(self, trainer: Proc, done: collections.Counter[str]) -> None:
        while (event := trainer.next(300)) is not None:
            if event.get("ev") in ("error", "exit"):
                self.violation(f"training: a save raised while the racers ran: {event.get('error')}")
            elif event.get("ev") == "done":
                done[_stream(event["f"])] += 1
        self.stats.saves = sum(done.values())
        if trainer.wait() != 0:
            self.violation(f"training exited with status {trainer.code}: {trainer.stderr()[-800:]}")

    # -- the checker --------------------------------------------------------------------------------
    def check(self, zygote: Zygote) -> None:
        snap = check.snapshot(self.backend)
        for problem in footprint(self.backend, snap) + truth(self.backend, snap.rows):
            self.violation(problem)
        held = [r for r in snap.rows if r.state in HELD]
        self.stats.pinned = sum(r.state == "pinned" for r in held)
        self.log(f"  read storage and registry at {time.monotonic() - self.t0:.1f} s")
        inspector = zygote.spawn(
            "", "", self.stats.seed, role="racer", racer=-1, inspect=True, folder=str(self.backend.workdir / "inspect")
        )
        inspector.connect()
        seen = inspector.wait_for("inspected", 600)
        inspector.wait()
        problems = self._aliases(held, seen["aliases"]) + self._renames(snap.rows, seen["names"]) + self._gets(held)
        for problem in problems + [f"fsck: {finding}" for finding in seen["fsck"]]:
            self.violation(problem)

    def _aliases(self, held: list[Row], seen: dict[str, Any]) -> list[str]:
        """Each alias, as stored, names only held records, and ``models get PROJECT@ALIAS`` gives the bytes of one.

        Two holders are allowed: on ClearML two moves at once may leave the alias on both records until the
        next move (docs/lifecycle.md); never on none, never on a record that is gone. They are counted.
        """
        by_id = {r.id: r for r in held}
        problems = []
        for alias, ids in sorted(self.backend.aliases().items()):
            found, where = seen.get(alias), f"models get {self.backend.project}@{alias}"
            self.stats.shared_aliases += len(ids) > 1
            if not ids or any(i not in by_id for i in ids):
                problems.append(f"alias: {alias} names {ids}, not only loadable or pinned records")
            elif found is None or found["sha"] is None:
                problems.append(f"alias: {where} failed: {found['error'] if found else 'no record has the alias'}")
            elif found["sha"] not in {by_id[i].sha256 for i in ids}:
                problems.append(f"alias: {where} gave bytes that are not those of record {' or '.join(ids)}")
        return problems

    def _renames(self, rows: list[Row], names: dict[str, str]) -> list[str]:
        """A renamed record keeps a name a racer gave it; only an unpin may delete it (prune never does)."""
        given: dict[tuple[str, float], set[str]] = collections.defaultdict(set)
        unpinned = set()
        for rep in self.reports:
            if rep["ok"] and rep["op"] == "rename":
                given[(rep["target"], rep["created"])].add(f"w{rep['w']}-op{rep['i']}")
            if rep["ok"] and rep["op"] == "unpin":
                unpinned.add((rep["target"], rep["created"]))
        now = {r.id: r.created for r in rows}
        problems = []
        for (rid, created), options in given.items():
            there = rid in now and abs(now[rid] - created) < 0.01
            if there and names.get(rid) not in options:
                problems.append(f"rename: record {rid} is named {names.get(rid)!r}, not one of {sorted(options)}")
            elif not there and (rid, created) not in unpinned:
                problems.append(f"rename: record {rid}, renamed to {sorted(options)}, is gone; nobody unpinned it")
        return problems

    def _gets(self, held: list[Row]) -> list[str]:
        """A pinned record that a ``get`` of its id found without its bytes (or with others), and that still exists."""
        now = {r.id: r.created for r in held if r.state == "pinned"}
        return [
            f"pin: racer {rep['w']} op {rep['i']} could not get pinned record {rep['target']}, which still exists: "
            f"{rep.get('error', '')[:300]}"
            for rep in self.reports
            if rep["op"] == "get"
            and rep["ok"] is False
            and rep.get("state") == "pinned"
            and rep.get("ref") == rep["target"]
            and rep["target"] in now
            and abs(now[rep["target"]] - rep["created"]) < 0.01
        ]


def _stream(filename: str) -> str:
    """The soak training's stream of one of its filenames (``best_checkpoint_3_acc=0.41.pt``, ``checkpoint_3.pt``)."""
    return "best_checkpoint" if filename.startswith("best_") else "checkpoint"


def footprint(backend: Backend, snap: check.Snapshot) -> list[str]:
    """Exactly ``n_saved`` slot objects a stream; every other object a held record's; nothing staged."""
    problems = []
    held = collections.Counter(r.key for r in snap.rows if r.state in HELD)
    slots: collections.Counter[str] = collections.Counter()
    for obj in snap.objects:
        found = check._stream_of(backend, obj.key)
        if found is not None:
            slots[found[0]] += 1
        elif obj.key not in held:
            problems.append(f"footprint: {obj.key!r} is no slot object and no record's: left behind")
    problems += [
        f"footprint: {stream} has {slots[stream]} slot objects, n_saved={n}"
        for stream, n in N_SAVED.items()
        if slots[stream] != n
    ]
    problems += [f"footprint: a staged write was left: {item}" for item in snap.staged]
    return problems


def truth(backend: Backend, rows: list[Row]) -> list[str]:
    """Every held record's object has its size, sha256 and checkpoint; no two records share one."""
    problems = []
    keys: dict[str, list[str]] = collections.defaultdict(list)
    for row in rows:
        if row.state not in HELD:
            continue
        keys[row.key or ""].append(row.id)
        what = f"truth: {row.state} record {row.id} ({row.filename!r}, {row.key})"
        data = backend.read(row.key) if row.key else None
        if data is None:
            problems.append(f"{what} has no object")
            continue
        digest = hashlib.sha256(data).hexdigest()
        if (len(data), digest) != (row.size, row.sha256):
            problems.append(f"{what}: the object has {len(data)} bytes, sha256 {digest[:12]}…, not the record's")
            continue
        problems += check._content(what, row, data)
    problems += [f"truth: records {ids} share the object {key!r}" for key, ids in keys.items() if len(ids) > 1]
    return problems


def run_race(
    backend: str,
    seed: int,
    *,
    racers: int = 4,
    ops: int = 12,
    step_s: float = 0.05,
    exec_every: int = 8,
    round_s: float = 0.3,
    ceph: Any = None,
    workdir: str | None = None,
    mlflow_uri: str | None = None,
    log: Callable[[str], None] | None = None,
) -> RaceStats:
    """Run the race soak on a fresh back end (``python -m tests.soak --race --help``).

    ``racers`` processes make ``ops`` operations each while a training saves every ``step_s`` seconds;
    one operation in ``exec_every`` runs ``python -m tracker_saver`` (0: none); the racers make their
    ``i``-th operations together, ``i * round_s`` seconds after they start.
    """
    if racers < 3:
        raise ValueError(f"racers must be at least 3 (with the training, N >= 4 processes), got {racers}")
    say = log or (lambda line: print(line, file=sys.stderr, flush=True))
    stats = RaceStats(backend, seed, racers)
    started = time.monotonic()
    with open_backend(backend, ceph=ceph, workdir=workdir, mlflow_uri=mlflow_uri) as where:
        say(f"race: {backend} racers={racers} ops={ops} seed={seed} output_uri={where.output_uri} run={where.run}")
        race = Race(where, stats, ops, step_s, exec_every, round_s, say)
        zygote = Zygote(where)
        try:
            race.run(zygote)
            race.check(zygote)
        finally:
            zygote.close()
        Path(where.workdir / "race-ops.jsonl").write_text("".join(json.dumps(r) + "\n" for r in race.reports))
    stats.seconds = time.monotonic() - started
    return stats
