"""The soak's loop: start a training process, kill it as planned, check, restart; count and report.

One kill cycle, with the next process already spawned (its imports take seconds) while the
current one trains:

1. ``start`` the process: it builds its saver (start-up recovery) and restores; ``ready``;
2. check everything is settled and as the twin expects (``check.after_startup``); count what
   start-up promoted, revived and failed;
3. ``go``: it trains, and dies as the plan says (a random delay, a crash point, a gateway stop);
4. its events drive the twin; check footprint and truth with no repair (``check.after_kill``).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tests import forkserver
from tests.soak import check
from tests.soak.backends import Backend, open_backend
from tests.soak.plan import Kill, make_plan, targeted_points
from tests.soak.twin import InFlight, Twin

__all__ = ["Stats", "run_soak"]

ROOT = Path(__file__).resolve().parents[2]
#: Seconds a targeted kill may take to reach its point before it counts as missed.
POINT_TIMEOUT = 90.0


@dataclass
class Stats:
    """What a soak run did and found."""

    backend: str
    seed: int
    kills: int = 0
    violations: list[str] = field(default_factory=list)
    recovered: collections.Counter[str] = field(default_factory=collections.Counter)
    kinds: collections.Counter[str] = field(default_factory=collections.Counter)
    points: collections.Counter[str] = field(default_factory=collections.Counter)
    missed: list[str] = field(default_factory=list)
    gateway: collections.Counter[str] = field(default_factory=collections.Counter)
    in_between: collections.Counter[str] = field(default_factory=collections.Counter)
    restores: collections.Counter[str] = field(default_factory=collections.Counter)
    saves: int = 0
    hidden: set[str] = field(default_factory=set)  # ClearML, MLflow: loadable records the tracker shows as not
    seconds: float = 0.0

    def summary(self) -> str:
        """The one summary line: ``kills=500 violations=0 revived=37 promoted=12 …``."""
        return (
            f"backend={self.backend} kills={self.kills} violations={len(self.violations)} "
            f"revived={self.recovered['revived']} promoted={self.recovered['promoted']} "
            f"failed={self.recovered['failed']} saves={self.saves} random={self.kinds['random']} "
            f"targeted={self.kinds['targeted']} gateway={self.kinds['gateway']} missed={len(self.missed)} "
            f"s_per_kill={self.seconds / max(self.kills, 1):.2f} seed={self.seed}"
        )

    def to_json(self) -> dict[str, Any]:
        """Everything, for the JSON line."""
        return {
            "backend": self.backend,
            "seed": self.seed,
            "kills": self.kills,
            "violations": self.violations,
            "violation_kinds": dict(collections.Counter(_kind(v) for v in self.violations)),
            "revived": self.recovered["revived"],
            "promoted": self.recovered["promoted"],
            "failed": self.recovered["failed"],
            "saves": self.saves,
            "kinds": dict(self.kinds),
            "points": dict(sorted(self.points.items())),
            "missed": self.missed,
            "gateway": dict(self.gateway),
            "commit_point_unknown": dict(self.in_between),
            "restores": dict(self.restores),
            "clearml_hidden_loadable": len(self.hidden),
            "seconds": round(self.seconds, 1),
            "seconds_per_kill": round(self.seconds / max(self.kills, 1), 2),
        }


def _kind(violation: str) -> str:
    """The check a violation line names: ``after start-up: footprint``, ``after the kill: truth``, …"""
    problem = violation.split(": ", 1)[-1]
    return ": ".join(problem.split(": ")[:2])


class Zygote:
    """The fork server (``tests.soak.trainer --zygote``) and the Unix socket its children call back on."""

    def __init__(self, backend: Backend, mutant: str = "") -> None:
        self.backend, self.mutant = backend, mutant
        self.folder = Path(tempfile.mkdtemp(prefix="soak-", dir="/tmp"))  # short: a socket path has <108 bytes
        path = str(self.folder / "driver.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(16)
        self._lock = threading.Condition()
        self._calls: dict[int, tuple[socket.socket, IO[bytes], int]] = {}  # id -> connection, reader, pid
        self._exits: dict[int, int] = {}  # pid -> exit code
        self._forked: set[int] = set()
        self._ids = 0
        preload = ["torch", "ignite.engine", "ignite.handlers", "tracker_saver", "tracker_saver.registry.sqlite"]
        if backend.s3 is not None:
            preload += ["boto3", "tracker_saver.storage.s3"]
        if backend.standin is not None:
            preload += ["clearml", "clearml.backend_api.services", "tracker_saver.integrations.clearml.registry"]
        if backend.mlflow is not None:
            preload += ["mlflow", "tracker_saver.integrations.mlflow.registry"]
        self._err = tempfile.TemporaryFile(mode="w+")
        # Forked from the tests' fork server, which has imported torch, ignite, tracker_saver, boto3
        # and mlflow already: a new interpreter spent 3 to 5 s of CPU importing them per run.
        self.popen = forkserver.spawn(
            "tests.soak.trainer", ["--zygote", path, *preload], env=backend.process_env(""), cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
        )  # fmt: skip
        threading.Thread(target=self._accept, daemon=True).start()
        threading.Thread(target=self._read, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            reader = conn.makefile("rb")
            hello = json.loads(reader.readline() or b"{}")
            with self._lock:
                self._calls[int(hello.get("id", -1))] = (conn, reader, int(hello.get("pid", 0)))
                self._lock.notify_all()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            event = json.loads(line)
            if event.get("ev") == "forked":
                self._forked.add(int(event["pid"]))
            elif event.get("ev") == "exited":
                with self._lock:
                    self._exits[int(event["pid"])] = int(event["code"])
                    self._lock.notify_all()
        with self._lock:
            self._exits[-1] = -1  # the zygote itself is gone
            self._lock.notify_all()

    def spawn(self, restore: str, crash: str, seed: int, **extra: Any) -> Proc:
        """Fork a training process that restores as ``restore`` says and dies at ``crash``; ``extra``
        goes into its config (the race soak's ``step_s``, or ``role="racer"`` for a racer)."""
        self._ids += 1
        config = {
            "output_uri": self.backend.output_uri,
            "registry": self.backend.registry,
            "storage_options": self.backend.storage_options,
            "project": self.backend.project,
            "run": self.backend.run,
            "restore": restore,
            "seed": seed,
            "pad_bytes": self.backend.pad_bytes,
            "step_s": 0.01,
            "mutant": self.mutant,
            **extra,
        }
        stderr = str(self.folder / f"proc-{self._ids}.err")
        command = {"id": self._ids, "config": config, "crash": crash, "stderr": stderr}
        assert self.popen.stdin is not None
        self.popen.stdin.write(json.dumps(command) + "\n")
        self.popen.stdin.flush()
        return Proc(self, self._ids, restore, stderr)

    def connection(self, ident: int, timeout: float) -> tuple[socket.socket, IO[bytes], int]:
        """The socket of child ``ident`` once it called back."""
        with self._lock:
            if not self._lock.wait_for(lambda: ident in self._calls or -1 in self._exits, timeout):
                raise RuntimeError(f"training process {ident} never called back:\n{self.stderr()}")
            if ident not in self._calls:
                raise RuntimeError(f"the zygote died:\n{self.stderr()}")
            return self._calls.pop(ident)

    def wait_exit(self, pid: int, timeout: float = 60) -> int:
        """Wait until the zygote reaped ``pid`` (a zombie would still hold its claim); its exit code."""
        with self._lock:
            if not self._lock.wait_for(lambda: pid in self._exits or -1 in self._exits, timeout):
                raise RuntimeError(f"training process {pid} was not reaped in {timeout} s")
            return self._exits.pop(pid, -1)

    def stderr(self) -> str:
        self._err.seek(0)
        return self._err.read()[-3000:]

    def close(self) -> None:
        """Kill what it forked that still runs, stop it, remove the socket."""
        with self._lock:
            alive = self._forked - set(self._exits)
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            assert self.popen.stdin is not None
            self.popen.stdin.close()
        try:
            self.popen.wait(30)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        self.listener.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class Proc:
    """One training process: its events (read by a thread), its commands, its stderr in a file."""

    def __init__(self, zygote: Zygote, ident: int, restore: str, stderr: str) -> None:
        self.zygote, self.ident, self.restore, self._stderr = zygote, ident, restore, stderr
        self.pid = 0
        self.code: int | None = None
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.ended = False  # its output closed: it is dead or leaving
        self._conn: socket.socket | None = None

    def connect(self, timeout: float = 300) -> None:
        """Wait for the process to call back (its imports are done by the zygote)."""
        if self._conn is None:
            self._conn, reader, self.pid = self.zygote.connection(self.ident, timeout)
            threading.Thread(target=self._read, args=(reader,), daemon=True).start()

    def _read(self, reader: IO[bytes]) -> None:
        for line in reader:
            with contextlib.suppress(ValueError):  # a line cut by the SIGKILL
                self.events.put(json.loads(line))
        self.events.put(None)

    def send(self, line: str) -> None:
        """Write one command line (nothing happens if the process is gone)."""
        self.connect()
        assert self._conn is not None
        with contextlib.suppress(OSError):
            self._conn.sendall((line + "\n").encode())

    def next(self, timeout: float) -> dict[str, Any] | None:
        """The next event; ``None`` once the process's output closed; ``TimeoutError`` after ``timeout``."""
        if self.ended:
            return None
        try:
            event = self.events.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            raise TimeoutError from None
        self.ended = event is None
        return event

    def wait_for(self, ev: str, timeout: float) -> dict[str, Any]:
        """Skip to the event ``ev``; ``RuntimeError`` with the stderr tail when it never comes."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                event = self.next(deadline - time.monotonic())
            except TimeoutError:
                event = None
            if event is None:
                self.kill()
                raise RuntimeError(f"the training process never said {ev!r}:\n{self.stderr()}")
            if event.get("ev") == ev:
                return event

    def kill(self) -> None:
        """SIGKILL it (if it still runs) and wait until it is reaped: a killed holder holds nothing."""
        self.connect()
        if self.code is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.wait()

    def wait(self) -> int:
        """Its exit code, once the zygote reaped it (``-9`` after SIGKILL)."""
        if self.code is None:
            self.code = self.zygote.wait_exit(self.pid)
            if self._conn is not None:
                self._conn.close()
        return self.code

    def stderr(self) -> str:
        with contextlib.suppress(OSError):
            return Path(self._stderr).read_text()[-4000:]
        return ""

    def close(self) -> None:
        """Tell a waiting process to leave, and reap it."""
        self.send("stop")
        try:
            self.zygote.wait_exit(self.pid, 30)
            self.code = 0
        except RuntimeError:
            self.kill()


class Soak:
    """One soak run over one back end."""

    def __init__(
        self,
        backend: Backend,
        plan: list[Kill],
        seed: int,
        log: Callable[[str], None],
        *,
        mutant: str = "",
        point_timeout: float = POINT_TIMEOUT,
        until_violation: bool = False,
    ) -> None:
        self.backend, self.plan, self.seed, self.log, self.mutant = backend, plan, seed, log, mutant
        self.point_timeout, self.until_violation = point_timeout, until_violation
        self.twin = Twin(seed)
        self.stats = Stats(backend.name, seed)
        self.rng = random.Random(seed + 1)
        self.zygote: Zygote | None = None

    def spawn(self, index: int, restore: str) -> Proc:
        crash = self.plan[index].env if index < len(self.plan) else ""
        assert self.zygote is not None
        return self.zygote.spawn(restore, crash, self.seed)

    def violation(self, kill: Kill | None, problem: str) -> None:
        where = f"kill={kill.index} point={kill.label} restore={kill.restore}" if kill else "kill=-1 (first start)"
        replay = f"python -m tests.soak --backend {self.backend.name} --seed {self.seed} --kills {(kill.index + 1) if kill else 1}"
        line = f"VIOLATION seed={self.seed} {where}: {problem} (replay: {replay})"
        self.stats.violations.append(line)
        self.log(line)

    def run(self) -> Stats:
        """Every kill of the plan, then one last start; the stats."""
        started = time.monotonic()
        self.zygote = Zygote(self.backend, self.mutant)
        try:
            self._run()
        finally:
            self.zygote.close()
            self.stats.seconds = time.monotonic() - started
        return self.stats

    def _run(self) -> None:
        proc, restore = self.spawn(0, "resume"), "resume"
        previous: Kill | None = None
        before: check.Snapshot | None = None
        unknown: InFlight | None = None
        for index in range(len(self.plan) + 1):
            t0 = time.monotonic()
            proc.send("start")
            try:
                ready = proc.wait_for("ready", 300)
            except RuntimeError as exc:  # the restart itself failed: nothing more to soak
                error = [line for line in str(exc).splitlines() if line.strip()]
                self.violation(previous, f"restart ({restore}) failed: {error[-1].strip()[:300]}")
                return
            self._after_startup(previous, restore, ready, before, unknown)
            if index == len(self.plan):
                proc.close()
                return
            kill = self.plan[index]
            following = self.spawn(index + 1, kill.restore)
            self._kill(proc, kill)
            unknown = self.twin.end()
            before = check.snapshot(self.backend)
            for problem in check.after_kill(self.backend, before):
                self.violation(kill, problem)
            self.stats.kills += 1
            self.stats.kinds[kill.kind] += 1
            self.log(
                f"kill {index + 1}/{len(self.plan)} {kill.label} -> restore={kill.restore} "
                f"[{time.monotonic() - t0:.1f} s, {len(self.stats.violations)} violations]"
            )
            if self.backend.standin is not None:
                with self.backend.standin._lock:
                    self.backend.standin.calls.clear()  # it keeps every request: memory
            if self.until_violation and self.stats.violations:
                following.kill()
                return
            proc, restore, previous = following, kill.restore, kill

    def _after_startup(
        self,
        kill: Kill | None,
        restore: str,
        ready: dict[str, Any],
        before: check.Snapshot | None,
        unknown: InFlight | None,
    ) -> None:
        after = check.snapshot(self.backend)
        if before is not None:
            counts, problems = check.transitions(before, after)
            self.stats.recovered.update(counts)
            for problem in problems:
                self.violation(kill, problem)
        if unknown is not None:
            mine = [r for r in after.rows if r.stream == unknown.stream and r.filename == unknown.entry.filename]
            committed = bool(mine) and mine[-1].state in check.LOADABLE
            self.twin.resolve(unknown, committed)
            self.stats.in_between["committed" if committed else "rolled back"] += 1
        if self.backend.standin is not None:
            hidden = {r.id for r in after.rows if r.state in check.LOADABLE and not r.shown} - self.stats.hidden
            if hidden:
                self.log(
                    f"  ClearML shows {len(hidden)} loadable record(s) as archived or without a uri: {sorted(hidden)}"
                )
            self.stats.hidden |= hidden
        expected = self.twin.expected()
        for problem in check.after_startup(self.backend, after, expected, "checkpoint" in self.twin.completed):
            self.violation(kill, problem)
        start = self.twin.restart(restore)
        self.stats.restores[restore] += 1
        if ready.get("iteration") != start:
            self.violation(
                kill,
                f"resume: the process restored ({restore}) to iteration {ready.get('iteration')}, expected {start}",
            )

    # -- kills --------------------------------------------------------------------------------
    def _kill(self, proc: Proc, kill: Kill) -> None:
        standin = self.backend.standin
        if kill.kind == "targeted" and kill.point.startswith("request:"):
            assert standin is not None
            proc.connect()
            standin.arm(kill.point.partition(":")[2], kill.count, proc.pid)
        proc.send("go")
        if kill.kind == "random":
            self._follow(proc, kill, until=time.monotonic() + kill.delay)
            proc.kill()
        elif kill.kind == "targeted":
            ended = self._follow(proc, kill, until=time.monotonic() + self.point_timeout)
            if standin is not None and kill.point.startswith("request:"):
                standin.disarm()
                if standin.fired:
                    self.stats.points[kill.point] += 1
            if not ended:
                self.stats.missed.append(kill.label)
                self.log(f"  {kill.label} was not reached in {self.point_timeout:.0f} s: killed")
            proc.kill()
        else:
            self._gateway(proc, kill)
        self._drain(proc, kill)

    def _follow(self, proc: Proc, kill: Kill, *, until: float, stop_at: str | None = None) -> bool:
        """Feed the process's events to the twin until ``until``; ``True`` if its output ended first."""
        while True:
            try:
                event = proc.next(until - time.monotonic())
            except TimeoutError:
                return False
            if event is None:
                return True
            self._event(kill, event)
            if stop_at is not None and event.get("ev") == stop_at:
                return False

    def _drain(self, proc: Proc, kill: Kill) -> None:
        proc.wait()
        while (event := proc.next(30)) is not None:
            self._event(kill, event)

    def _event(self, kill: Kill, event: dict[str, Any]) -> None:
        kind = event.get("ev")
        problem = None
        if kind == "epoch":
            problem = self.twin.epoch(int(event["epoch"]), int(event["iteration"]))
        elif kind in ("remove", "save", "superseded", "committed", "done", "error"):
            problem = self.twin.event(event)
            if kind == "save":
                self.stats.saves += 1
            if kind == "error" and kill.kind != "gateway":
                problem = f"a save raised: {event.get('error')}"
        elif kind == "crash":
            self.stats.points[f"{event['point']}"] += 1
        elif kind == "exit" and kill.kind != "gateway":
            problem = f"the training stopped: {event.get('error')}"
        if problem is not None:
            self.violation(kill, problem)

    def _gateway(self, proc: Proc, kill: Kill) -> None:
        """Stop radosgw while a part upload is held, start it again; the save completes or raises."""
        gateway = self.backend.gateway
        assert gateway is not None
        if self._follow(proc, kill, until=time.monotonic() + self.point_timeout, stop_at="hold"):
            self.stats.missed.append(kill.label)
            return
        stopped = gateway.stop()
        proc.send("resume")
        if not stopped:
            self.stats.gateway["skipped (gateway in use)"] += 1
            self._follow(proc, kill, until=time.monotonic() + kill.delay)
            proc.kill()
            return
        self.stats.points[kill.point] += 1
        inflight = self.twin.inflight
        try:
            if kill.point == "gateway-outage":  # down until the held save has given up
                ended = False
                deadline = time.monotonic() + 120
                while not ended and (inflight is None or inflight.error is None) and time.monotonic() < deadline:
                    ended = self._follow(proc, kill, until=min(deadline, time.monotonic() + 1.0))
                    if self.twin.inflight is not inflight:
                        break
            else:
                ended = self._follow(proc, kill, until=time.monotonic() + kill.delay)
        finally:
            gateway.start()
        outcome = "died"
        if not ended and inflight is not None:
            # The held save either retries and completes, or raises; nothing else may happen.
            deadline = time.monotonic() + 120
            while self.twin.inflight is inflight and time.monotonic() < deadline and inflight.error is None:
                try:
                    event = proc.next(deadline - time.monotonic())
                except TimeoutError:
                    break
                if event is None:
                    break
                self._event(kill, event)
            outcome = (
                "failed loudly" if inflight.error else "completed" if self.twin.inflight is not inflight else "hung"
            )
        elif inflight is not None and inflight.error:
            outcome = "failed loudly"
        self.stats.gateway[outcome] += 1
        detail = f": {inflight.error[:160]}" if inflight is not None and inflight.error else ""
        down = "until the save gave up" if kill.point == "gateway-outage" else f"{kill.delay:.2f} s"
        self.log(f"  gateway down {down} during a part upload: the save {outcome}{detail}")
        if outcome == "hung":
            self.violation(kill, "the save neither completed nor raised within 120 s of the gateway's restart")
        self._follow(proc, kill, until=time.monotonic() + self.rng.uniform(0.0, 0.5))
        proc.kill()


def run_soak(
    backend: str,
    kills: int,
    seed: int,
    *,
    ceph: Any = None,
    workdir: str | None = None,
    max_delay: float | None = None,
    log: Callable[[str], None] | None = None,
    mutant: str = "",
    point_timeout: float = POINT_TIMEOUT,
    random_every: int = 2,
    mlflow_uri: str | None = None,
    until_violation: bool = False,
) -> Stats:
    """Run the soak on a fresh back end; see ``python -m tests.soak --help``.

    ``mutant`` names a deliberate bug of ``tests.soak.trainer.MUTANTS`` to run instead of the
    real saver's behaviour: the checks must catch it (the harness's own test); ``until_violation``
    ends the run after the first kill that found a violation. One kill in ``random_every`` is random
    in time (:func:`tests.soak.plan.make_plan`). ``mlflow_uri``: the MLflow server to use (default: a
    server of its own).
    """
    say = log or (lambda line: print(line, file=sys.stderr, flush=True))
    with open_backend(backend, ceph=ceph, workdir=workdir, mlflow_uri=mlflow_uri) as where:
        plan = make_plan(backend, kills, seed, max_delay=max_delay or where.max_delay, random_every=random_every)
        say(
            f"soak: {backend} kills={kills} seed={seed} output_uri={where.output_uri} registry={where.registry} "
            f"run={where.run} points={','.join(targeted_points(backend))}"
        )
        soak = Soak(where, plan, seed, say, mutant=mutant, point_timeout=point_timeout, until_violation=until_violation)
        return soak.run()
