"""How long the CLI takes to list and filter 10k records kept in a real MLflow tracking server.

A fresh ``mlflow server`` (SQLite backend store, in a temp folder) is started, and ``--records``
records are written into its store as tracker_saver writes them (one LoggedModel each, with its
``tracker_saver.*`` tags, params and metrics; 40 runs, two streams, ``n_saved=2`` live per stream,
the rest evicted) through MLflow's own store API in this process (thousands of HTTP round trips
would only time the filling). Then each command runs ``--repeats`` times as a fresh
``python -m tracker_saver --registry mlflow:URI`` process, interleaved, and is timed from start
to exit:

* ``models list --project P --json``: every record;
* ``models list --project P --live --json``: the live ones (the state is pushed down);
* ``models list --project P --run r7 --where 'score>0.5' --json``: one run, filtered;

next to ``python -c 'import mlflow'`` (what any MLflow client pays to start), and the same three
queries as ``find_models`` calls in this process (the registry's own time).

::

    python benchmarks/bench_mlflow.py --records 10000 --repeats 5

Prints a table of median and best seconds, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest_mlflow import start_mlflow_server, stop_server  # noqa: E402
from tracker_saver.core.records import RecordState, UploadInfo  # noqa: E402
from tracker_saver.integrations.mlflow.codec import PREFIX, encode, model_name, record_tags, status_of  # noqa: E402

RUNS = 40
STREAMS = ("best_model", "checkpoint")
N_SAVED = 2
PROJECT = "bench"


def fill(db: Path, artifacts: Path, records: int) -> int:
    """Write ``records`` records into the MLflow store at ``db``; return how many."""
    from mlflow.entities import LoggedModelParameter, LoggedModelStatus, LoggedModelTag, Metric
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    store = SqlAlchemyStore(f"sqlite:///{db}", str(artifacts))
    exp = store.create_experiment(PROJECT)
    per_stream = max(1, records // (RUNS * len(STREAMS)))
    written = 0
    for r in range(RUNS):
        run = store.create_run(exp, user_id="bench", start_time=0, tags=[], run_name=f"r{r}")
        run_id = run.info.run_id
        for stream in STREAMS:
            for step in range(1, per_stream + 1):
                score = round(step / per_stream, 4)
                filename = f"{stream}_{step}_score={score}.pt"
                meta = {"global_step": step, "score": score, "priority": score}
                info = UploadInfo(filename=filename, project=PROJECT, run=f"r{r}", stream=stream, slot=step % N_SAVED,
                                  key=f"{PROJECT}/r{r}/{stream}.slot{step % N_SAVED}.pt", metadata=meta,
                                  output_uri="file:///bench")  # fmt: skip
                state = RecordState.LIVE if step > per_stream - N_SAVED else RecordState.EVICTED
                tags = record_tags(info, uri=f"file:///bench/{info.key}", created_at=float(step))
                tags.update({PREFIX + "state": encode(state.value), PREFIX + "sha256": encode("0" * 64),
                             PREFIX + "size": encode(10)})  # fmt: skip
                model = store.create_logged_model(
                    exp, name=model_name(filename), source_run_id=run_id,
                    tags=[LoggedModelTag(k, v) for k, v in tags.items()],
                    params=[LoggedModelParameter(k, str(v)) for k, v in meta.items()],
                )  # fmt: skip
                store.log_batch(run_id, [Metric(k, float(v), 0, 0, model_id=model.model_id) for k, v in meta.items()],
                                [], [])  # fmt: skip
                store.finalize_logged_model(model.model_id, LoggedModelStatus(status_of(state)))
                written += 1
    return written


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Seconds from start to exit of ``python -m tracker_saver ARGV``, and how many records it printed."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tracker_saver", *argv], capture_output=True, text=True, env=env,
                          check=True)  # fmt: skip
    return time.perf_counter() - started, len(json.loads(done.stdout))


def in_process(uri: str, query: dict[str, object]) -> tuple[float, int]:
    """Seconds for ``find_models(**query)`` in this process (mlflow imported, registry opened)."""
    from tracker_saver import find_models

    started = time.perf_counter()
    found = find_models(**query, registry=f"mlflow:{uri}")  # type: ignore[arg-type]
    return time.perf_counter() - started, len(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-mlflow-") as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        written = fill(root / "mlflow.db", root / "artifacts", args.records)
        fill_s = time.perf_counter() - started
        proc, uri = start_mlflow_server(root, backend_store_uri=f"sqlite:///{root / 'mlflow.db'}")
        try:
            env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": ""}
            base = ["--registry", f"mlflow:{uri}", "models", "list", "--project", PROJECT]
            commands = {
                "models list --json (all)": [*base, "--json"],
                "models list --live --json": [*base, "--live", "--json"],
                "models list --run r7 --where 'score>0.5' --json": [
                    *base,
                    "--run",
                    "r7",
                    "--where",
                    "score>0.5",
                    "--json",
                ],  # fmt: skip
            }
            queries = {
                "in process: find_models (all)": {"project": PROJECT},
                "in process: find_models(live=True)": {"project": PROJECT, "live": True},
                "in process: find_models(run='r7', where='score>0.5')": {
                    "project": PROJECT,
                    "run": "r7",
                    "where": "score>0.5",
                },  # fmt: skip
            }
            floor = "python -c 'import mlflow' (any MLflow client's start)"
            seconds: dict[str, list[float]] = {name: [] for name in [floor, *commands, *queries]}
            found: dict[str, int] = {floor: 0}
            for _ in range(args.repeats):
                started = time.perf_counter()
                subprocess.run([sys.executable, "-c", "import mlflow"], check=True, env=env)
                seconds[floor].append(time.perf_counter() - started)
                for name, argv in commands.items():
                    took, found[name] = timed(argv, env)
                    seconds[name].append(took)
                for name, query in queries.items():
                    took, found[name] = in_process(uri, query)
                    seconds[name].append(took)
        finally:
            stop_server(proc)
    print(f"{written} records in a real mlflow server (filled in {fill_s:.1f} s), {args.repeats} repeats")
    print(f"| {'command':<55} | records | median s | best s |")
    print(f"| {'-' * 55} | ------- | -------- | ------ |")
    for name, times in seconds.items():
        print(f"| {name:<55} | {found[name]:>7} | {statistics.median(times):>8.2f} | {min(times):>6.2f} |")
    print(json.dumps({"bench": "mlflow", "records": written, "repeats": args.repeats,
                      "median_s": {k: round(statistics.median(v), 3) for k, v in seconds.items()},
                      "best_s": {k: round(min(v), 3) for k, v in seconds.items()}, "found": found}))  # fmt: skip


if __name__ == "__main__":
    main()
