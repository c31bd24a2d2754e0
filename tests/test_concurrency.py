"""Two training processes save into one SQLite registry while eight threads query it: nothing is lost or locked."""

from __future__ import annotations

import collections
import importlib.util
import json
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from types import ModuleType
from typing import IO

import pytest

from tests import forkserver
from tests.helpers import ROOT, process_env
from tracker_saver import find_models
from tracker_saver.core.records import LOADABLE, RecordState
from tracker_saver.registry import Query
from tracker_saver.registry.sqlite import SQLiteRegistry

#: The training processes are the benchmark's own (``child`` mode): the test checks what it measures.
BENCH = ROOT / "benchmarks" / "bench_registry_concurrency.py"

#: Enough for the two trainings to overlap with each other and the queries many times over (issue 55:
#: 200 cost 22.7 s of CPU here, mostly the 8 query threads spinning while the saves went on).
SAVES = 60
RUNS = ["run-0", "run-1"]


def _load_bench() -> ModuleType:
    """The benchmark script as a module (benchmarks/ is no package)."""
    spec = importlib.util.spec_from_file_location("bench_registry_concurrency", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _forked(args: list[str], env: dict[str, str] | None, stderr: IO[str]) -> forkserver.Forked:
    """A training process forked from the tests' fork server, which has imported torch (2 s of CPU less each)."""
    pipe = subprocess.PIPE
    env = process_env() if env is None else env
    return forkserver.spawn(str(BENCH), args, env=env, cwd=ROOT, stdin=pipe, stdout=pipe, stderr=stderr)


class Watchers:
    """Eight threads querying in a loop, checking what every answer shows while saves go on."""

    def __init__(self, registry: str) -> None:
        self.registry = registry
        self.errors: list[str] = []
        self.queries = collections.Counter[int]()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, args=(i,)) for i in range(8)]
        for thread in self._threads:
            thread.start()

    def _loop(self, i: int) -> None:
        # Half through find_models' shared connection, half on a connection of their own.
        own = SQLiteRegistry(self.registry) if i % 2 else None
        seen = dict.fromkeys(RUNS, 0)
        try:
            while not self._stop.is_set():
                live = (own.records.query(Query(project="bench", states=LOADABLE)) if own else
                        find_models(project="bench", live=True, registry=self.registry))  # fmt: skip
                per_run = collections.Counter(r.run for r in live)
                assert all(n <= 1 for n in per_run.values()), f"more than n_saved=1 live records: {per_run}"
                run = RUNS[self.queries[i] % 2]
                newest = find_models(
                    project="bench", run=run, where={"global_step": (">", 0)}, order_by="-global_step", limit=3,
                    registry=own or self.registry,
                )  # fmt: skip
                steps = [r.metadata["global_step"] for r in newest]
                assert steps == sorted(steps, reverse=True), steps
                assert not steps or steps[0] >= seen[run], f"{run}: saw step {seen[run]}, then only {steps}"
                seen[run] = steps[0] if steps else seen[run]
                self.queries[i] += 1
        except BaseException:
            self.errors.append(f"query thread {i}:\n{traceback.format_exc()}")
        finally:
            if own is not None:
                own.close()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
            assert not thread.is_alive(), "a query thread hangs"


def test_two_processes_saving_60_each_into_one_sqlite_registry_lose_nothing_while_8_threads_query(
    tmp_path: Path,
) -> None:
    bench = _load_bench()
    registry, output = str(tmp_path / "registry.db"), str(tmp_path / "output")
    trainers = bench.Trainers(output, registry, RUNS, SAVES, env=process_env(), start=_forked)
    watchers = Watchers(registry)  # the savers have opened the registry: it exists
    try:
        trainers.go()
        results = trainers.wait()
    finally:
        trainers.kill()
        watchers.stop()
    stderr = [trainers.stderr(i) for i in range(len(RUNS))]
    assert not [e for e in stderr if "locked" in e or "Traceback" in e], stderr
    assert watchers.errors == []
    assert all(watchers.queries[i] > 0 for i in range(8)), watchers.queries
    assert [r["saves"] for r in results] == [SAVES, SAVES]

    reg = SQLiteRegistry(registry)
    try:
        for run in RUNS:
            records = reg.records.query(Query(project="bench", run=run))
            states = collections.Counter(r.state for r in records)
            assert len(records) == SAVES and states == {RecordState.EVICTED: SAVES - 1, RecordState.LIVE: 1}
            assert sorted(r.metadata["global_step"] for r in records) == list(range(1, SAVES + 1))
            live = next(r for r in records if r.state is RecordState.LIVE)
            assert live.metadata["global_step"] == SAVES and live.key == f"bench/{run}/model.slot0.pt"
    finally:
        reg.close()
    objects = (p for p in Path(output).rglob("*") if p.is_file() and ".tracker_saver" not in p.parts)
    assert sorted(p.relative_to(output).as_posix() for p in objects) == [f"bench/{run}/model.slot0.pt" for run in RUNS]


def test_the_concurrency_benchmark_reports_its_table_and_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # One training process: the test above runs two of the benchmark's own with the 8 query threads; a
    # second here cost 3 s of CPU (torch imported again) for the same table and JSON. The benchmark's
    # main runs in this process, its training process forked from the tests' fork server.
    bench = _load_bench()
    monkeypatch.setattr(bench, "start_child", _forked)
    args = ["--saves", "3", "--repeats", "1", "--scenarios", "1 proc + 8 threads"]
    monkeypatch.setattr(sys, "argv", [str(BENCH), *args])
    bench.main()
    out = capsys.readouterr().out.strip().splitlines()
    table, report = out[:-1], json.loads(out[-1])
    assert table[0].startswith("scenario") and table[1].startswith("1 proc + 8 threads")
    scenario = report["scenarios"]["1 proc + 8 threads"]
    assert scenario["saves_per_s"] > 0 and {"queries", "query_p50_ms", "query_p95_ms"} <= set(scenario)
