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

``--scale`` measures MLflow at scale instead, for this tree's code and, with ``--baseline TREE``
(e.g. a ``git worktree`` of main), for that tree's too, in the same run (each in its own process,
``PYTHONPATH`` set to the tree; ``--in-process``, for smoke runs, runs this tree's filter and saves
in the parent):

* ``models list --project P`` (a table) as a fresh process: seconds to its first page, and to
  its exit;
* a filter (``--where 'score>0.99'``) in one process, pushed down to MLflow's search
  (``MLflowRegistry.query``) and not (every record of the project, filtered here), checked equal;
* a steady save (a TrackerSaver with ``n_saved=2`` whose slots are full): the HTTP calls it makes,
  by endpoint, counted by a proxy in front of the server, and, in another child talking to the
  server itself (the proxy's forwarding would count), the registry's share of its seconds (the
  pipeline's ``pending``, ``supersede`` and ``live`` steps, median).

::

    git worktree add /tmp/main-tree main
    python benchmarks/bench_mlflow.py --scale --records 10000 --baseline /tmp/main-tree

``--uri URI`` uses a running server instead of starting one (its records are written through
the registry, so keep ``--records`` small: the smoke test passes 8).
"""

from __future__ import annotations

import argparse
import collections
import http.client
import http.server
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # appended: a child's PYTHONPATH (the tree it measures) comes first

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
                tags.update({PREFIX + "state": encode("state", state.value), PREFIX + "sha256": encode("sha256", "0" * 64),
                             PREFIX + "size": encode("size", 10)})  # fmt: skip
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


def fill_through_registry(uri: str, project: str, records: int) -> int:
    """Write ``records`` records of ``project`` into a running server as a saver does (two runs, two
    streams, two live a stream, the rest evicted); return how many."""
    from tracker_saver.integrations.mlflow.registry import MLflowRegistry

    reg = MLflowRegistry(uri, timeout=60)
    per_stream = max(1, records // (2 * len(STREAMS)))
    for r in range(2):
        for stream in STREAMS:
            for step in range(1, per_stream + 1):
                score = round(step / per_stream, 4)
                info = UploadInfo(filename=f"{stream}_{step}_score={score}.pt", project=project, run=f"r{r}",
                                  stream=stream, slot=step % N_SAVED, key=f"{project}/r{r}/{stream}.slot{step % N_SAVED}.pt",
                                  metadata={"global_step": step, "score": score, "priority": score},
                                  output_uri="file:///bench")  # fmt: skip
                record = reg.records.create_pending(info, uri=f"file:///bench/{info.key}")
                record = reg.records.make_live(record.id, sha256="0" * 64, size=10)
                if step <= per_stream - N_SAVED:
                    reg.records.evict(record.id)
    return 2 * len(STREAMS) * per_stream


#: A LoggedModel's id in a request's path: counted as ``{id}``, so the counts are by endpoint.
MODEL_ID = re.compile(r"/m-[0-9a-f]+")


class CountingProxy:
    """An HTTP proxy in front of the server at ``upstream`` that counts requests by ``METHOD /path`` (ids as ``{id}``).

    ``GET /__bench/reset`` zeroes the counts and ``GET /__bench/counts`` returns them (neither
    is forwarded nor counted), so a child marks its steady phase itself.
    """

    def __init__(self, upstream: str) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        host, port = urlsplit(upstream).hostname, urlsplit(upstream).port
        local = threading.local()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # A reply's headers and body go out in two writes: with Nagle's algorithm on, the body
            # waited for the client's delayed ACK, about 45 ms a call (measured), which the
            # registry's seconds a save then counted.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
                self.send_response(status)
                for k, v in headers:
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _forward(self) -> None:
                path = urlsplit(self.path).path
                if path in ("/__bench/reset", "/__bench/counts"):
                    body = json.dumps(dict(proxy.counts)).encode()
                    if path.endswith("reset"):
                        proxy.counts.clear()
                    self._reply(200, [("Content-Type", "application/json")], body)
                    return
                sent = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if getattr(local, "conn", None) is None:
                    local.conn = http.client.HTTPConnection(host, port, timeout=120)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                local.conn.request(self.command, self.path, sent, headers)
                reply = local.conn.getresponse()
                self._reply(reply.status, reply.getheaders(), reply.read())
                proxy.counts[f"{self.command} {MODEL_ID.sub('/{id}', path)}"] += 1

            do_GET = do_POST = do_PATCH = do_DELETE = _forward

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.uri = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def child_query(uri: str, project: str, where: str, repeats: int) -> dict[str, Any]:
    """In a child: the filter pushed down and not (seconds, medians), checked to find the same records."""
    from tracker_saver.core.query import parse_where
    from tracker_saver.integrations.mlflow.registry import MLflowRegistry
    from tracker_saver.registry.base import Query, select

    reg = MLflowRegistry(uri, timeout=600)
    query = Query(project=project, where=parse_where(where))
    reg.records.query(Query(project=project, run="none"))  # the experiment looked up, the connection open
    pushed, plain = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        found = reg.records.query(query)
        pushed.append(time.perf_counter() - started)
        started = time.perf_counter()
        everything = select(reg.records.query(Query(project=project)), query)
        plain.append(time.perf_counter() - started)
        if [r.id for r in found] != [r.id for r in everything]:
            raise SystemExit(f"pushed down, {where!r} found {len(found)} records, not the same {len(everything)}")
    return {"pushed_s": statistics.median(pushed), "plain_s": statistics.median(plain), "found": len(found)}


def child_save(uri: str, work: Path, saves: int, counted: bool) -> dict[str, Any]:
    """In a child: a saver's steady saves against ``uri``: when ``counted`` (``uri`` is the counting
    proxy), the HTTP calls a save by endpoint; else the registry's seconds a save and the save's."""
    import logging

    import torch
    from ignite.engine import Engine
    from ignite.handlers import Checkpoint

    from tracker_saver import TrackerSaver

    # Each save's laps from the pipeline's DEBUG line, read here as bench_save.py reads them: the
    # child runs with the measured tree's tracker_saver (--baseline: an older one), so it relies on
    # nothing newer than that line.
    laps: list[dict[str, float]] = []

    class Steps(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.msg.startswith("saved ") and isinstance(record.args, tuple) and len(record.args) == 2:
                laps.append(dict(record.args[1]))  # type: ignore[call-overload]

    logger, handler = logging.getLogger("tracker_saver.save.pipeline"), Steps()
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    saver = TrackerSaver(str(work / "out"), project=f"save-{uuid.uuid4().hex[:8]}", run="r",
                         registry=f"mlflow:{uri}")  # fmt: skip
    engine = Engine(lambda engine, batch: None)
    checkpoint = Checkpoint({"model": torch.nn.Linear(4, 4)}, saver, n_saved=N_SAVED)
    try:
        for i in range(N_SAVED + 1 + saves):
            if i == N_SAVED + 1:  # start-up done, the slots full, one eviction behind: steady from here
                if counted:
                    urllib.request.urlopen(f"{uri}/__bench/reset").read()
                laps.clear()
            engine.state.iteration += 1
            checkpoint(engine)
    finally:
        logger.removeHandler(handler)  # --in-process: the next child's saves are its own
    if counted:
        counts = json.loads(urllib.request.urlopen(f"{uri}/__bench/counts").read())
        saver.close()
        return {"calls": sum(counts.values()) / saves, "by_endpoint": {k: v / saves for k, v in sorted(counts.items())}}
    saver.close()
    registry = [lap.get("pending", 0) + lap.get("supersede", 0) + lap.get("live", 0) for lap in laps]
    return {"registry_s": statistics.median(registry), "save_s": statistics.median(sum(lap.values()) for lap in laps)}


def child(argv: list[str]) -> dict[str, Any]:
    """What ``--child ARGV`` prints: ``query URI PROJECT WHERE REPEATS`` or ``save URI WORK SAVES count|time``."""
    kind, *rest = argv
    if kind == "query":
        return child_query(rest[0], rest[1], rest[2], int(rest[3]))
    return child_save(rest[0], Path(rest[1]), int(rest[2]), counted=rest[3] == "count")


def run_child(tree: Path, argv: list[str], *, here: bool = False) -> dict[str, Any]:
    """``bench_mlflow.py --child ARGV`` with ``tree``'s tracker_saver; its JSON line. ``here``
    (``--in-process``, this tree only): :func:`child` in this process instead."""
    if here:
        return child(argv)
    env = {**os.environ, "PYTHONPATH": str(tree), "MLFLOW_TRACKING_URI": ""}
    done = subprocess.run([sys.executable, __file__, "--child", *argv], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"child {argv[0]} with {tree} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def first_page(tree: Path, uri: str, project: str) -> tuple[float, float]:
    """``models list --project P`` (a table) with ``tree``'s code: seconds to its first table, and to its exit."""
    env = {**os.environ, "PYTHONPATH": str(tree), "MLFLOW_TRACKING_URI": ""}
    argv = [
        sys.executable,
        "-m",
        "tracker_saver",
        "--registry",
        f"mlflow:{uri}",
        "models",
        "list",
        "--project",
        project,
    ]
    started = time.perf_counter()
    # Run in the tree: ``python -m`` imports from the working folder before PYTHONPATH.
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                          cwd=tree) as proc:  # fmt: skip
        assert proc.stdout is not None
        first = None
        for line in proc.stdout:
            if first is None and line.startswith("┌"):
                first = time.perf_counter() - started
        proc.wait()
    total = time.perf_counter() - started
    if proc.returncode != 0 or first is None:
        raise SystemExit(f"models list with {tree} failed (exit status {proc.returncode})")
    return first, total


def scale(args: argparse.Namespace, uri: str, project: str, written: int, fill_s: float) -> None:
    """Measure each tree's code against the server at ``uri``; print the table and one JSON line."""
    trees = {"this": ROOT, **({"baseline": Path(args.baseline).resolve()} if args.baseline else {})}
    proxy = CountingProxy(uri)
    rows: dict[str, dict[str, Any]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-mlflow-save-") as work:
            for name, tree in trees.items():
                here = args.in_process and tree == ROOT
                firsts = [first_page(tree, uri, project) for _ in range(args.repeats)]
                row = {"first_page_s": statistics.median(f for f, _ in firsts),
                       "list_s": statistics.median(t for _, t in firsts)}  # fmt: skip
                counting = ["save", proxy.uri, str(Path(work) / name), str(args.saves), "count"]
                timing = ["save", uri, str(Path(work) / f"{name}-timed"), str(args.saves), "time"]
                for argv in (["query", uri, project, WHERE, str(args.repeats)], counting, timing):
                    row.update(run_child(tree, argv, here=here))
                rows[name] = row
    finally:
        proxy.close()
    print(f"MLflow at scale: {written} records (filled in {fill_s:.1f} s), medians of {args.repeats} runs, "
          f"{args.saves} steady saves")  # fmt: skip
    print(
        "| code | first page s | whole list s | filter pushed s | filter not pushed s | found | calls a save | registry s a save | save s |"
    )  # noqa: E501
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, r in rows.items():
        print(f"| {name} | {r['first_page_s']:.2f} | {r['list_s']:.2f} | {r['pushed_s']:.3f} | {r['plain_s']:.3f} | "
              f"{r['found']} | {r['calls']:.1f} | {r['registry_s']:.3f} | {r['save_s']:.3f} |")  # fmt: skip
    for name, r in rows.items():
        print(f"calls a steady save, {name}: " + ", ".join(f"{k} {v:g}" for k, v in r["by_endpoint"].items()))
    print(json.dumps({"bench": "mlflow-scale", "records": written, "where": WHERE, "repeats": args.repeats,
                      "saves": args.saves, "results": rows}))  # fmt: skip


#: The filter of ``--scale``: about two records a stream at any size.
WHERE = "score>0.99"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scale", action="store_true", help="first page, pushed-down filter, calls a save")
    parser.add_argument("--baseline", help="--scale: also measure the tracker_saver of this source tree")
    parser.add_argument("--saves", type=int, default=6, help="--scale: steady saves counted")
    parser.add_argument("--uri", help="a running mlflow server to use (records written through the registry)")
    parser.add_argument(
        "--in-process", action="store_true", help="--scale smoke runs: this tree's query and saves in this process"
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    if args.uri:
        project = f"bench-{uuid.uuid4().hex[:8]}"
        started = time.perf_counter()
        written = fill_through_registry(args.uri, project, args.records)
        scale(args, args.uri, project, written, time.perf_counter() - started)
        return
    with tempfile.TemporaryDirectory(prefix="bench-mlflow-") as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        written = fill(root / "mlflow.db", root / "artifacts", args.records)
        fill_s = time.perf_counter() - started
        proc, uri = start_mlflow_server(root, backend_store_uri=f"sqlite:///{root / 'mlflow.db'}")
        if args.scale:
            try:
                scale(args, uri, PROJECT, written, fill_s)
            finally:
                stop_server(proc)
            return
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
