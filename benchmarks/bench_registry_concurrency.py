"""Saves per second into one SQLite registry: 1 or 2 training processes, with or without 8 query threads.

Each training process is a real ``TrackerSaver`` + Ignite ``Checkpoint`` (``n_saved=1``) on a
tiny model, saving on every iteration into a local output folder, each in its own run, all
into one SQLite registry file. The query threads (in this process) loop over what users run
while training goes on: half call :func:`tracker_saver.find_models` through the shared
per-location connection, half ``SQLiteRegistry.query`` on a connection of their own.

Scenarios, each ``--repeats`` times (median reported): ``1 proc``, ``1 proc + 8 threads``,
``2 procs``, ``2 procs + 8 threads``. The processes start, import and open the saver first,
then all begin saving at one signal: the clock covers the saves only.

Reported: saves/s of all processes together (total saves / time from the first process's first
save to the last one's last; median and range over the repeats), saves/s of each process, and
the query latency p50 / p95::

    python benchmarks/bench_registry_concurrency.py --saves 500 --repeats 3

Prints a table, then one JSON line. ``tests/test_concurrency.py`` runs the same training
processes (``child`` mode below) and checks that no record is lost.

Child mode (one training process)::

    python benchmarks/bench_registry_concurrency.py child --output DIR --registry DB --run NAME --saves N

prints ``{"ready": true}`` once the saver is open, waits for a line on stdin, saves ``N``
times, then prints ``{"run": ..., "saves": N, "seconds": ..., "started": ..., "ended": ...}`` (``time.time()``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROJECT = "bench"
THREADS = 8
#: Scenario name → (training processes, with the query threads).
SCENARIOS = {
    "1 proc": (1, False),
    "1 proc + 8 threads": (1, True),
    "2 procs": (2, False),
    "2 procs + 8 threads": (2, True),
}


def child(output: str, registry: str, run: str, saves: int) -> None:
    """One training process: ``saves`` checkpoints of a tiny model, one per iteration."""
    import torch
    from ignite.engine import Engine, Events
    from ignite.handlers import Checkpoint

    from tracker_saver import TrackerSaver

    saver = TrackerSaver(output, project=PROJECT, run=run, registry=registry)
    torch.manual_seed(0)
    trainer = Engine(lambda engine, batch: None)
    trainer.add_event_handler(
        Events.ITERATION_COMPLETED, Checkpoint({"model": torch.nn.Linear(4, 2)}, saver, n_saved=1)
    )
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.readline()
    started, t0 = time.time(), time.perf_counter()
    trainer.run([0] * saves, max_epochs=1)
    seconds = time.perf_counter() - t0
    ended = time.time()
    saver.close()
    print(json.dumps({"run": run, "saves": saves, "seconds": seconds, "started": started, "ended": ended}), flush=True)


def start_child(args: list[str], env: dict[str, str] | None, stderr: IO[str]) -> Any:
    """``python bench_registry_concurrency.py child ARGS``, a new interpreter with stdin and stdout piped."""
    pipe = subprocess.PIPE
    command = [sys.executable, __file__, *args]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdin=pipe, stdout=pipe, stderr=stderr, text=True)


class Trainers:
    """Training processes in ``child`` mode, started and opened, waiting for :meth:`go`.

    ``start`` starts one (:func:`start_child`'s arguments, a ``Popen``-like result; by default
    :func:`start_child`, looked up when called): the tests fork theirs from a server that has
    imported torch already.
    """

    def __init__(
        self,
        output: str,
        registry: str,
        runs: list[str],
        saves: int,
        env: dict[str, str] | None = None,
        start: Callable[[list[str], dict[str, str] | None, IO[str]], Any] | None = None,
    ):
        self.procs = []
        self.errs = []
        for run in runs:
            err = tempfile.TemporaryFile(mode="w+")  # a pipe could fill up and block the child
            args = ["child", "--output", output, "--registry", registry, "--run", run, "--saves", str(saves)]
            self.procs.append((start or start_child)(args, env, err))
            self.errs.append(err)
        for i, proc in enumerate(self.procs):
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line or not json.loads(line).get("ready"):
                self.kill()
                raise RuntimeError(f"training process {i} did not start:\n{self.stderr(i)}")

    def go(self) -> None:
        """Let every process start saving."""
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()

    def wait(self, timeout: float = 600) -> list[dict[str, Any]]:
        """Each process's result line; raises if one failed (its stderr in the message)."""
        results = []
        for i, proc in enumerate(self.procs):
            assert proc.stdout is not None
            out = proc.stdout.read()
            if proc.wait(timeout) != 0 or not out.strip():
                raise RuntimeError(f"training process {i} exited with {proc.returncode}:\n{self.stderr(i)}")
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results

    def stderr(self, i: int) -> str:
        self.errs[i].seek(0)
        return str(self.errs[i].read())

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


class Queries:
    """``THREADS`` threads querying the registry in a loop until :meth:`stop`; latencies and errors."""

    def __init__(self, registry: str, runs: list[str]) -> None:
        self.registry = registry
        self.runs = runs
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(THREADS)]
        for thread in self._threads:
            thread.start()

    def _loop(self, i: int) -> None:
        from tracker_saver import find_models
        from tracker_saver.core.records import LOADABLE
        from tracker_saver.registry import Query
        from tracker_saver.registry.sqlite import SQLiteRegistry

        own = SQLiteRegistry(self.registry) if i % 2 else None
        n = 0
        try:
            while not self._stop.is_set():
                run = self.runs[n % len(self.runs)]
                t0 = time.perf_counter()
                if own is None:  # the shared per-location connection, as the CLI and scripts use it
                    find_models(project=PROJECT, run=run, order_by="-global_step", limit=3, registry=self.registry)
                elif n % 2:
                    own.records.query(Query(project=PROJECT, states=LOADABLE))
                else:
                    find_models(project=PROJECT, run=run, where={"global_step": (">", n)}, limit=5, registry=own)
                with self._lock:
                    self.latencies.append(time.perf_counter() - t0)
                n += 1
        except Exception as exc:
            with self._lock:
                self.errors.append(f"thread {i}: {type(exc).__name__}: {exc}")
        finally:
            if own is not None:
                own.close()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)


def scenario(procs: int, threads: bool, saves: int) -> dict[str, Any]:
    """One run: ``procs`` training processes (``saves`` each), with or without the query threads."""
    with tempfile.TemporaryDirectory() as tmp:
        registry = str(Path(tmp) / "registry.db")
        runs = [f"run-{i}" for i in range(procs)]
        trainers = Trainers(str(Path(tmp) / "output"), registry, runs, saves)
        queries = Queries(registry, runs) if threads else None
        try:
            trainers.go()
            results = trainers.wait()
        finally:
            trainers.kill()
            if queries is not None:
                queries.stop()
        if queries is not None and queries.errors:
            raise RuntimeError("query threads failed:\n" + "\n".join(queries.errors))
        wall = max(r["ended"] for r in results) - min(r["started"] for r in results)
        return {
            "saves_per_s": procs * saves / wall,
            "per_process_saves_per_s": [r["saves"] / r["seconds"] for r in results],
            "latencies": queries.latencies if queries is not None else [],
        }


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        parser = argparse.ArgumentParser(prog="bench_registry_concurrency.py child")
        parser.add_argument("--output", required=True)
        parser.add_argument("--registry", required=True)
        parser.add_argument("--run", required=True)
        parser.add_argument("--saves", type=int, required=True)
        a = parser.parse_args(sys.argv[2:])
        child(a.output, a.registry, a.run, a.saves)
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--saves", type=int, default=500, help="saves per training process (default 500)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per scenario (median reported)")
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS), help="default: all")
    args = parser.parse_args()

    scenarios = {name: SCENARIOS[name] for name in args.scenarios}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in scenarios}
    for round_ in range(args.repeats):
        for name, (procs, threads) in scenarios.items():
            result = scenario(procs, threads, args.saves)
            runs[name].append(result)
            print(f"  round {round_ + 1}  {name:<20} {result['saves_per_s']:8.1f} saves/s", file=sys.stderr)

    report: dict[str, Any] = {"saves_per_process": args.saves, "repeats": args.repeats, "cpus": os.cpu_count()}
    report["scenarios"] = {}
    print(
        f"{'scenario':<22}{'saves/s (all)':>15}{'min-max (all)':>15}{'saves/s (each)':>16}"
        f"{'query p50 ms':>14}{'query p95 ms':>14}"
    )
    for name, results in runs.items():
        total = statistics.median(r["saves_per_s"] for r in results)
        each = statistics.median(x for r in results for x in r["per_process_saves_per_s"])
        latencies = [x for r in results for x in r["latencies"]]
        p50, p95 = _percentile(latencies, 0.5) * 1e3, _percentile(latencies, 0.95) * 1e3
        shown = (f"{p50:>14.1f}{p95:>14.1f}") if latencies else f"{'-':>14}{'-':>14}"
        spread = f"{min(r['saves_per_s'] for r in results):.0f}-{max(r['saves_per_s'] for r in results):.0f}"
        print(f"{name:<22}{total:>15.1f}{spread:>15}{each:>16.1f}{shown}")
        report["scenarios"][name] = {
            "saves_per_s": round(total, 1),
            "per_process_saves_per_s": round(each, 1),
            "runs_saves_per_s": [round(r["saves_per_s"], 1) for r in results],
            "queries": len(latencies),
            "query_p50_ms": round(p50, 2) if latencies else None,
            "query_p95_ms": round(p95, 2) if latencies else None,
        }
    print(json.dumps(report, separators=(",", ":")))


if __name__ == "__main__":
    main()
