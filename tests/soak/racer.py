"""A racer of the race soak: one process making its plan's operations on the run's records, reporting each.

Forked by the zygote of ``tests.soak.driver`` (a config with ``"role": "racer"``), so its imports
cost nothing. It opens the registry as the CLI does, says ``{"ev": "ready"}``, waits for the line
``go START`` (every racer starts at once, at ``time.time()`` ``START``), then makes each operation of
:func:`tests.soak.plan.race_plan` in its round on a record it picks from what the registry holds now, and
reports it: ``{"ev": "op", "w", "i", "op", "via", "target", "ok", "error", "unexpected", …}``,
then ``{"ev": "end"}``.

An operation may fail for a reason a race explains: the record was evicted, pruned or unpinned
meanwhile, the slot was overwritten while it was read, the stream's writer holds it. Those are
``tracker_saver``'s errors (exit status 2 from the CLI). Anything else is ``unexpected`` (a
Python error, a traceback, a status the CLI never gives): the driver counts it as a violation.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.soak.plan import ALIASES, N_SAVED, Op, race_plan
from tests.soak.trainer import emit
from tracker_saver.core.errors import TrackerSaverError
from tracker_saver.core.records import LOADABLE, Record, RecordState, StreamId
from tracker_saver.registry import Query
from tracker_saver.registry.base import Registry
from tracker_saver.registry.shared import shared_registry

__all__ = ["race"]

#: The CLI's exit status for one of tracker_saver's errors (``cli.main``); ``repair`` says 1 when problems remain.
CLI_ERROR = 2


class Racer:
    """One racer: its registry, its plan, and how each operation is made through API, CLI or a process."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.spec = str(config["registry"])
        self.registry: Registry = shared_registry(self.spec, create=False)
        self.project, self.run, self.output_uri = str(config["project"]), str(config["run"]), str(config["output_uri"])
        self.options: dict[str, Any] = dict(config.get("storage_options") or {})
        self.worker = int(config["racer"])
        self.rng = random.Random(f"pick:{config['seed']}:{self.worker}")
        self.plan = race_plan(
            int(config["seed"]), self.worker, int(config.get("ops", 0)), exec_every=int(config.get("exec_every", 0))
        )
        self.folder = Path(config["folder"])  # what its gets write, under the run's workdir
        self.folder.mkdir(parents=True, exist_ok=True)
        self.sqlite = not self.spec.startswith(("clearml", "mlflow"))

    # -- what the registry holds now ----------------------------------------------------------------
    def records(self) -> list[Record]:
        query = Query(project=self.project, run=self.run, details=False)
        return sorted(self.registry.records.query(query), key=lambda r: (r.created_at, r.id.zfill(20)))

    def pick(self, op: Op, records: list[Record]) -> Record | None:
        """The record ``op`` works on: the hot one (the oldest loadable of the best stream), or one at random."""
        if op.op == "unpin":
            candidates = [r for r in records if r.state is RecordState.PINNED]
        elif op.op in ("get", "alias", "rename"):
            candidates = [r for r in records if r.state in LOADABLE or r.state is RecordState.PINNED]
        else:
            candidates = [r for r in records if r.state in LOADABLE]
        hot = [r for r in candidates if r.stream == "best_checkpoint" and r.state in LOADABLE]
        if op.hot and hot:
            return hot[0]
        return self.rng.choice(candidates) if candidates else None

    # -- one operation ------------------------------------------------------------------------------
    def make(self, op: Op) -> dict[str, Any]:
        """Make ``op``; what the driver is told about it."""
        records = self.records()
        target = self.pick(op, records)
        report: dict[str, Any] = {"w": self.worker, "i": op.index, "op": op.op, "via": op.via}
        if target is not None:
            report.update(target=target.id, state=target.state.value, created=target.created_at, sha=target.sha256)
        step = self.step(op, target)
        if step is None:
            return {**report, "ok": None}
        argv, call = step
        if op.op == "get":
            report["ref"] = argv[2]  # the record's id, or PROJECT@ALIAS
        started = time.monotonic()
        try:
            if op.via == "api":
                report["result"] = call()
                report["ok"] = True
            else:
                report.update(self.command(argv, op.via))
        except TrackerSaverError as exc:
            report.update(ok=False, error=f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # the violation: no error of tracker_saver's tree
            report.update(ok=False, unexpected=True, error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        report["s"] = round(time.monotonic() - started, 4)
        return report

    def step(self, op: Op, target: Record | None) -> tuple[list[str], Callable[[], Any]] | None:
        """``(CLI arguments, API call)`` of ``op`` on ``target``; ``None`` when it has nothing to work on."""
        from tracker_saver import models
        from tracker_saver.fsck import repair

        p, r = self.project, self.run
        if op.op == "get":
            if target is None and op.index % 3:
                return None
            ref = f"{p}@{op.alias}" if op.index % 3 == 0 else str(target.id)  # type: ignore[union-attr]
            dest = str(self.folder / f"get-{op.index}.pt")
            return (
                ["models", "get", ref, dest],
                lambda: (
                    models.download_model(ref, dest, registry=self.registry, storage_options=self.options)
                    .stat()
                    .st_size
                ),
            )
        if op.op == "unalias":
            return ["models", "unalias", p, op.alias], lambda: _id(
                models.remove_alias(p, op.alias, registry=self.registry)
            )
        if op.op == "prune":
            if not self.sqlite:
                return None  # prune is the SQLite registry's (its history log)
            return ["prune", "--keep-last", "1", "--project", p, "--run", r, "--json"], lambda: self.prune()
        if op.op == "repair":
            argv = ["repair", "--project", p, "--run", r]
            return argv, lambda: len(
                repair(self.registry, project=p, run=r, storage_options=self.options, echo=_quiet).problems
            )
        if op.op == "take-over":
            stream = "best_checkpoint" if op.hot else self.rng.choice(sorted(N_SAVED))
            mine = self.registry.claims.registry_id(p)
            argv = [
                "streams",
                "take-over",
                self.output_uri,
                "--project",
                p,
                "--run",
                r,
                "--stream",
                stream,
                "--from",
                mine,
            ]
            return argv, lambda: self.take_over(stream, mine)
        if target is None:
            return None
        rid = target.id
        if op.op == "pin":
            return [
                "models",
                "pin",
                rid,
            ], lambda: models.pin_model(rid, registry=self.registry, storage_options=self.options).id
        if op.op == "unpin":
            return ["models", "unpin", rid], lambda: models.unpin_model(
                rid, registry=self.registry, storage_options=self.options
            )
        if op.op == "alias":
            return [
                "models",
                "alias",
                rid,
                op.alias,
            ], lambda: models.set_alias(rid, op.alias, registry=self.registry, storage_options=self.options).id
        if op.op == "rename":
            name = f"w{self.worker}-op{op.index}"
            return ["models", "rename", rid, name], lambda: models.rename_model(rid, name, registry=self.registry).name
        raise ValueError(f"unknown operation {op.op!r}")

    def prune(self) -> list[str]:
        from tracker_saver.lifecycle.retention import Retention
        from tracker_saver.registry.events import history_of

        log = history_of(self.registry, "the race soak")
        return [p.record_id for p in log.prune(Query(project=self.project, run=self.run), Retention(keep_last=1))]

    def take_over(self, stream: str, mine: str) -> str:
        from tracker_saver.save.ownership import take_over
        from tracker_saver.storage import open_storage

        storage = open_storage(self.output_uri, storage_options=self.options)
        return take_over(
            storage, self.registry, StreamId(storage.uri, self.project, self.run, stream), from_id=mine
        ).registry_id

    def command(self, argv: list[str], via: str) -> dict[str, Any]:
        """Run the CLI with ``argv``: its ``main`` here (``cli``), or ``python -m tracker_saver`` (``exec``)."""
        argv = ["--registry", self.spec, *argv]
        if via == "exec":
            done = subprocess.run(
                [sys.executable, "-m", "tracker_saver", *argv], capture_output=True, text=True, timeout=300, check=False
            )
            status, out, err = done.returncode, done.stdout, done.stderr
        else:
            from tracker_saver.cli.main import main

            out_buf, err_buf = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out_buf), contextlib.redirect_stderr(err_buf):
                try:
                    status = main(argv)
                except SystemExit as exc:  # argparse refused the arguments: the soak's own mistake
                    status = exc.code if isinstance(exc.code, int) else 64
            out, err = out_buf.getvalue(), err_buf.getvalue()
        fine = status == 0 or (status == 1 and argv[2] == "repair")
        report: dict[str, Any] = {"ok": fine, "status": status, "out": out[-2000:]}
        if not fine:
            report["error"] = err.strip()[-2000:]
            report["unexpected"] = status != CLI_ERROR or "Traceback" in err
        return report

    def go(self, start: float, round_s: float) -> None:
        """Make each operation of the plan in its round (``time.time()`` based: every racer shares the clock)."""
        for op in self.plan:
            time.sleep(max(0.0, start + op.index * round_s + op.jitter - time.time()))
            emit("op", **self.make(op))


def _id(record: Record | None) -> str | None:
    return record.id if record is not None else None


def _quiet(_line: str) -> None:
    """``repair``'s echo: the racer reports what it returns, not what it says."""


def inspect(racer: Racer) -> dict[str, Any]:
    """What the race soak's checker reads through the package, once every racer is done: each record's
    name, who holds each alias and what ``models get PROJECT@ALIAS`` gives, and the findings of
    ``fsck --deep`` (``tracker_saver.fsck.check``) on the run."""
    from tracker_saver.fsck import check

    out: dict[str, Any] = {
        "names": {r.id: r.name for r in racer.registry.records.query(Query(project=racer.project, run=racer.run))}
    }
    aliases: dict[str, Any] = {}
    for alias in ALIASES:
        named = racer.registry.records.query(Query(project=racer.project, alias=alias, details=False))
        if not named:
            continue
        dest = racer.folder / f"alias-{alias}.pt"
        got = racer.command(["models", "get", f"{racer.project}@{alias}", str(dest)], "cli")
        sha = hashlib.sha256(dest.read_bytes()).hexdigest() if got["ok"] else None
        aliases[alias] = {"ids": [r.id for r in named], "sha": sha, "error": got.get("error")}
    out["aliases"] = aliases
    report = check(racer.registry, project=racer.project, run=racer.run, deep=True, storage_options=racer.options)
    out["fsck"] = [f"{f.kind} {f.stream} {f.key or ''} {f.detail}" for f in report.problems]
    return out


def race(config: dict[str, Any]) -> None:
    """The racer's life, as the module docstring says (with ``"inspect"`` in its config: :func:`inspect`
    once, reported as ``{"ev": "inspected", …}``); never returns."""
    try:
        racer = Racer(config)
        if config.get("inspect"):
            emit("inspected", **inspect(racer))
            os._exit(0)
        emit("ready")
        go, _, start = sys.stdin.readline().strip().partition(" ")
        if go != "go":
            os._exit(0)
        racer.go(float(start), float(config["round_s"]))
        emit("end")
    except BaseException as exc:
        emit("end", error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"[-3000:])
        os._exit(3)
    os._exit(0)


if __name__ == "__main__":
    race(json.loads(sys.argv[1]))
