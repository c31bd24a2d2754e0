"""Drag of an async save on training: the steps a background save costs, side by side in one run.

A training loop on one torch thread (``torch.set_num_threads(1)``) steps a small MLP
continuously. Between steps it saves a state of ``SIZE`` MiB (16 float32 parameters) with one
of four savers, then keeps stepping until that save is durable:

* ``torch.save+fsync``: ``torch.save`` then fsync of file and folder, on the training thread
  (the reference: all of it is blocked time);
* ``thread``: a ``clone()`` of the state on the training thread, then a plain thread doing
  ``torch.save`` + fsync of the clone;
* ``fork``: ``os.fork()``; the child does ``torch.save`` + fsync and exits. It runs in a process
  of its own (its own trainer and state, driven in turn with the others): a fork write-protects
  every page of the forking process, so each later first write to a page there takes a fault,
  and ours' snapshot into its warm buffers would pay for the fork (0.10 s instead of 0.02-0.03 s
  at 256 MiB, measured);
* ``ours``: ``TrackerSaver(local_dir, async_upload=True)`` through a real
  ``ignite.handlers.Checkpoint``.

With ``AWS_ENDPOINT_URL`` set, two more write to a fresh bucket (deleted afterwards):
``thread-s3``, a plain thread doing ``torch.save`` of a ``clone()`` into memory and boto3's
``upload_fileobj``, and ``ours-s3``, ours with an ``s3://`` output_uri. For them the table adds
the CPU seconds the local gateway's daemons (radosgw, ceph-osd, ceph-mon) used per save: on a
2-core machine that runs the gateway too, that is CPU training would otherwise have.
``--server-nice N`` runs those daemons at nice ``N`` for the run (root), a little nearer to a
remote server, whose CPU is not the training machine's; ``--server-cpu N`` keeps them on CPU ``N``
(root), so the training thread has the other core to itself as it would with a remote server
(the background save shares CPU ``N`` with the gateway).

Per save: ``blocked`` = wall time of the save call on the training thread; ``window`` = from
its return until the save is durable; ``drag`` = 1 - (step rate inside the window) / (step rate
in the ``--before`` seconds just before the save); ``lost`` = ``blocked`` + the steps not taken
in the window, in seconds (``window - steps_in_window / rate_before``), also as a multiple of
the reference's blocked time in the same round. Rounds interleave the variants (order rotating);
medians of ``--rounds`` are reported. ``--busy`` runs a separate process spinning on the other
core for the whole run. The machine's load average is printed with every table. The goals
column checks ours against the issue's goals (:func:`misses`).

Run::

    python benchmarks/bench_drag.py --sizes 256 1024 --rounds 5
    python benchmarks/bench_drag.py --sizes 256 --rounds 5 --busy
    eval "$(bash scripts/ceph-s3.sh start)"; python benchmarks/bench_drag.py --server-nice 19
    python benchmarks/bench_drag.py --server-cpu 1   # with the gateway running: training keeps CPU 0
    python benchmarks/bench_drag.py --sizes 4 --rounds 1 --before 0.2   # smoke

Prints the table (stdout; progress to stderr), then one JSON line.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import io
import json
import multiprocessing
import multiprocessing.connection
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from bench_save import s3_bucket
from ignite.engine import Engine
from ignite.handlers import Checkpoint

from tracker_saver import TrackerSaver
from tracker_saver.save import background, pipeline

REFERENCE = "torch.save+fsync"
#: How the ``--prototypes`` hash: see :func:`saver_thread_sha`.
PROTOTYPES = ("fused", "chunked", "2 threads")
#: The issue's goals: lost <= 0.25x the reference, blocked <= 0.05x, drag <= the plain thread's.
GOAL_LOST, GOAL_BLOCKED = 0.25, 0.05


def fsync_file(path: Path) -> None:
    """fsync ``path`` and then its folder (a new name is durable only once its folder is)."""
    for target, flags in ((path, os.O_RDONLY), (path.parent, os.O_RDONLY)):
        fd = os.open(target, flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def make_state(size_mib: int) -> dict[str, torch.Tensor]:
    """A state dict of 16 float32 tensors totalling ``size_mib`` MiB."""
    per = max(1, size_mib * 2**20 // 16 // 4)
    gen = torch.Generator().manual_seed(0)
    return {f"layer{i}": torch.empty(per).normal_(generator=gen) for i in range(16)}


class Trainer:
    """A small MLP stepped by SGD on one thread; ``step()`` returns the time the step ended."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.x, self.y = torch.randn(64, 256), torch.randint(0, 10, (64,))

    def step(self) -> float:
        self.opt.zero_grad()
        torch.nn.functional.cross_entropy(self.model(self.x), self.y).backward()
        self.opt.step()
        return time.perf_counter()


#: A save: starts it (the blocked part) and returns a poll that is True once it is durable.
Saver = Callable[[int], Callable[[], bool]]


def saver_reference(state: dict[str, torch.Tensor], work: Path) -> Saver:
    def save(n: int) -> Callable[[], bool]:
        path = work / f"ref_{n}.pt"
        torch.save(state, path)
        fsync_file(path)
        return lambda: True

    return save


def saver_thread(state: dict[str, torch.Tensor], work: Path) -> Saver:
    def save(n: int) -> Callable[[], bool]:
        copy = {k: v.clone() for k, v in state.items()}
        path = work / f"thread_{n}.pt"

        def write() -> None:
            torch.save(copy, path)
            fsync_file(path)

        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        return lambda: not thread.is_alive()

    return save


#: The prototype's piece size when it hashes and writes a piece at a time (``chunked``).
CHUNK = 1 << 20


class _ShaFile:
    """A file that sha256-hashes what ``torch.save`` writes: inline (fused), piece by piece while
    the piece is in cache (``chunked``), or on a second thread."""

    def __init__(self, path: Path, hasher: concurrent.futures.ThreadPoolExecutor | None, chunked: bool) -> None:
        self.file = open(path, "wb")  # noqa: SIM115 - closed by close()
        self.sha = hashlib.sha256()
        self.hasher = hasher
        self.chunked = chunked

    def write(self, data: bytes) -> int:
        view = memoryview(data).cast("B")
        if self.chunked:
            for start in range(0, view.nbytes, CHUNK):
                self.sha.update(view[start : start + CHUNK])
                self.file.write(view[start : start + CHUNK])
            return view.nbytes
        if self.hasher is None:
            self.sha.update(view)
            return self.file.write(view)
        future = self.hasher.submit(self.sha.update, view)
        written = self.file.write(view)
        future.result()
        return written

    def close(self) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()


def saver_thread_sha(state: dict[str, torch.Tensor], work: Path, *, mode: str) -> Saver:
    """Prototype: the plain thread plus sha256 of the bytes: ``fused`` into the write pass,
    ``chunked`` (a piece hashed then written), or on a ``2 threads``."""
    hasher = concurrent.futures.ThreadPoolExecutor(max_workers=1) if mode == "2 threads" else None

    def save(n: int) -> Callable[[], bool]:
        copy = {k: v.clone() for k, v in state.items()}
        path = work / f"sha_{mode.replace(' ', '_')}_{n}.pt"

        def write() -> None:
            out = _ShaFile(path, hasher, chunked=mode == "chunked")
            torch.save(copy, out)  # type: ignore[arg-type]  # a write-only file-like object
            out.close()
            fsync_file(path)

        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        return lambda: not thread.is_alive()

    return save


def saver_fork(state: dict[str, torch.Tensor], work: Path) -> Saver:
    def save(n: int) -> Callable[[], bool]:
        path = work / f"fork_{n}.pt"
        pid = os.fork()
        if pid == 0:  # the child: write, fsync, leave without running the parent's atexit hooks
            code = 1
            try:
                torch.save(state, path)
                fsync_file(path)
                code = 0
            finally:
                os._exit(code)

        def done() -> bool:
            finished, status = os.waitpid(pid, os.WNOHANG)
            if finished and os.waitstatus_to_exitcode(status) != 0:
                raise RuntimeError(f"the forked writer of {path} failed")
            return bool(finished)

        return done

    return save


def saver_thread_s3(state: dict[str, torch.Tensor], bucket: str) -> Saver:
    """The plain thread's S3 twin: ``torch.save`` of a ``clone()`` into memory, then boto3's ``upload_fileobj``."""
    import boto3
    from botocore.config import Config

    client = boto3.client("s3", config=Config(s3={"addressing_style": "path"}))

    def save(n: int) -> Callable[[], bool]:
        copy = {k: v.clone() for k, v in state.items()}

        def write() -> None:
            buffer = io.BytesIO()
            torch.save(copy, buffer)
            buffer.seek(0)
            client.upload_fileobj(buffer, bucket, f"thread/{uuid.uuid4().hex[:8]}_{n}.pt")

        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        return lambda: not thread.is_alive()

    return save


#: The local S3 gateway's daemons (scripts/ceph-s3.sh): on this machine their CPU is training's too.
SERVER = ("radosgw", "ceph-osd", "ceph-mon")


def server_processes() -> list[Path]:
    """The ``/proc`` folders of the gateway's daemons."""
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):  # one that ended meanwhile
            if proc.name.isdigit() and (proc / "comm").read_text().strip() in SERVER:
                found.append(proc)
    return found


def server_cpu() -> float:
    """CPU seconds the gateway's daemons have used so far (user + system)."""
    total = 0
    for proc in server_processes():
        with contextlib.suppress(OSError):
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def server_threads() -> list[int]:
    """The thread ids of the gateway's daemons (a thread's nice value and CPUs are its own on Linux)."""
    found = []
    for proc in server_processes():
        with contextlib.suppress(OSError):  # one that ended meanwhile
            found += [int(task.name) for task in (proc / "task").iterdir()]
    return found


@contextlib.contextmanager
def server_placement(nice: int | None, cpu: int | None) -> Iterator[None]:
    """Run the gateway's daemons at nice ``nice`` and on CPU ``cpu`` only (``None``: as they are);
    as they were afterwards."""
    before = {}
    if nice is not None or cpu is not None:
        before = {tid: (os.getpriority(os.PRIO_PROCESS, tid), os.sched_getaffinity(tid)) for tid in server_threads()}
    for tid in before:
        if nice is not None:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        if cpu is not None:
            os.sched_setaffinity(tid, {cpu})
    try:
        yield
    finally:
        for tid, (was_nice, was_cpus) in before.items():
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                os.setpriority(os.PRIO_PROCESS, tid, was_nice)
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, was_cpus)


class ForkLane:
    """The ``fork`` variant, measured in a process of its own (see the module's docstring)."""

    def __init__(self, size: int, work: Path) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_fork_lane, args=(child, size, str(work)), daemon=True)
        self.process.start()

    def measure(self, n: int, before: float) -> Measure:
        self.conn.send((n, before))
        return Measure(*self.conn.recv())

    def close(self) -> None:
        self.conn.send(None)
        self.process.join(60)


def _fork_lane(conn: multiprocessing.connection.Connection, size: int, work: str) -> None:
    torch.set_num_threads(1)
    trainer, save = Trainer(), saver_fork(make_state(size), Path(work))
    while (job := conn.recv()) is not None:
        n, before = job
        conn.send(dataclasses.astuple(measure(trainer, save, n, before)))


def saver_ours(
    state: dict[str, torch.Tensor], work: Path, uri: str, *, anywhere: bool = False
) -> tuple[Saver, TrackerSaver]:
    """Ours through a real Checkpoint; ``anywhere``: its saves may run on the training thread's CPU (A/B)."""
    saver = TrackerSaver(
        uri, project="drag", run=uuid.uuid4().hex[:8], registry=str(work / "registry.db"), async_upload=True
    )
    if anywhere:
        assert saver._background is not None
        saver._background.cpus = set()  # nothing to keep off: background.keep_off leaves the thread as it is
    model = torch.nn.ParameterDict({k: torch.nn.Parameter(v, requires_grad=False) for k, v in state.items()})
    engine = Engine(lambda engine, batch: None)
    checkpoint = Checkpoint({"model": model}, saver, n_saved=1)

    def save(n: int) -> Callable[[], bool]:
        engine.state.iteration = n
        checkpoint(engine)
        # Background.pending is internal; the benchmark polls it rather than block in flush().
        background = saver._background
        assert background is not None
        return lambda: not background.pending()

    return save, saver


@dataclass
class Measure:
    blocked: float
    window: float
    drag: float
    lost: float
    server_cpu: float = 0.0  # S3 variants: the gateway's CPU seconds from the save's start until durable


def measure(trainer: Trainer, save: Saver, n: int, before: float, *, server: bool = False) -> Measure:
    """Step for ``before`` s, save, step until durable; the save's blocked, window, drag and lost."""
    start = time.perf_counter()
    steps_before = 0
    while time.perf_counter() - start < before:
        trainer.step()
        steps_before += 1
    rate = steps_before / (time.perf_counter() - start)
    cpu = server_cpu() if server else 0.0
    t0 = time.perf_counter()
    durable = save(n)
    t1 = time.perf_counter()
    steps = 0
    while not durable():
        trainer.step()
        steps += 1
    window = time.perf_counter() - t1
    drag = 1 - (steps / window) / rate if window * rate >= 1 else 0.0  # a window shorter than a step: none
    lost = (t1 - t0) + max(0.0, window - steps / rate)
    return Measure(t1 - t0, window, drag, lost, server_cpu() - cpu if server else 0.0)


def run_size(
    size: int, rounds: int, before: float, root: Path, bucket: str | None, prototypes: bool, keep_off_ab: bool
) -> dict[str, dict[str, float]]:
    """Interleaved rounds of every variant at ``size`` MiB; medians, lost as x of the reference."""
    work = Path(tempfile.mkdtemp(prefix=f"drag-{size}-", dir=root))
    state = make_state(size)
    trainer = Trainer()
    lane = ForkLane(size, work)
    ours, ours_saver = saver_ours(state, work, str(work / "ours"))
    savers: dict[str, Saver | None] = {
        REFERENCE: saver_reference(state, work),
        "thread": saver_thread(state, work),
        "fork": None,  # the lane's
        "ours": ours,
    }
    if prototypes:
        for mode in PROTOTYPES:
            savers[f"thread+sha {mode}"] = saver_thread_sha(state, work, mode=mode)
    closers = [ours_saver]
    if keep_off_ab:
        savers["ours anywhere"], anywhere_saver = saver_ours(state, work, str(work / "anywhere"), anywhere=True)
        closers.append(anywhere_saver)
    if bucket:
        ours_s3, s3_saver = saver_ours(state, work, f"s3://{bucket}/{uuid.uuid4().hex[:8]}")
        savers["thread-s3"] = saver_thread_s3(state, bucket)
        savers["ours-s3"], closers = ours_s3, [*closers, s3_saver]
    names = list(savers)

    def one(name: str, n: int, seconds: float) -> Measure:
        save = savers[name]
        if save is None:
            return lane.measure(n, seconds)
        return measure(trainer, save, n, seconds, server=name.endswith("-s3"))

    for name in names:  # warm-up: connections, slot, buffer pool, page cache
        one(name, 0, before / 2)
    rows: dict[str, list[Measure]] = {name: [] for name in names}
    ratios: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        got: dict[str, Measure] = {}
        for name in order:
            os.sync()
            got[name] = one(name, r + 1, before)
            print(f"  {size} MiB round {r + 1} {name}: {got[name]}", file=sys.stderr)
        for name in names:
            rows[name].append(got[name])
            ratios[name].append(got[name].lost / got[REFERENCE].blocked)
    lane.close()
    for closer in closers:
        closer.close()
    return {
        name: {
            "blocked_s": statistics.median(m.blocked for m in rows[name]),
            "window_s": statistics.median(m.window for m in rows[name]),
            "drag_pct": 100 * statistics.median(m.drag for m in rows[name]),
            "lost_s": statistics.median(m.lost for m in rows[name]),
            "lost_x": statistics.median(ratios[name]),
            "server_cpu_s": statistics.median(m.server_cpu for m in rows[name]),
            "blocked_x": statistics.median(
                m.blocked / got_ref.blocked for m, got_ref in zip(rows[name], rows[REFERENCE], strict=True)
            ),
        }
        for name in names
    }


def misses(name: str, rows: dict[str, dict[str, float]], busy: bool) -> list[str]:
    """The goals ``name`` (one of ours) misses: against its plain thread (``thread``, or ``thread-s3``
    for ``ours-s3``), with lost <= 0.25x on a quiet machine and <= the thread's with the other core busy."""
    thread = rows["thread-s3" if name.endswith("-s3") else "thread"]
    found = []
    if busy and rows[name]["lost_s"] > thread["lost_s"]:
        found.append("lost>thread")
    if not busy and rows[name]["lost_x"] > GOAL_LOST:
        found.append(f"lost>{GOAL_LOST}x")
    if rows[name]["blocked_x"] > GOAL_BLOCKED:
        found.append(f"blocked>{GOAL_BLOCKED}x")
    if rows[name]["drag_pct"] > thread["drag_pct"]:
        found.append("drag>thread")
    return found


def table(
    results: dict[str, dict[str, dict[str, float]]], busy: bool, server_nice: int | None, server_cpu: int | None
) -> str:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    server = "" if server_nice is None else f"; S3 gateway at nice {server_nice}"
    server += "" if server_cpu is None else f"; S3 gateway on CPU {server_cpu} only"
    lines = [f"drag of one save (medians; loadavg {load}; other core {'busy' if busy else 'idle'}{server})", ""]
    lines.append(
        f"{'MiB':>5} {'variant':<20} {'blocked s':>9} {'window s':>8} {'drag %':>7} {'lost s':>7} {'lost x':>7} "
        f"{'server cpu s':>12}  goals"
    )
    for size, rows in results.items():
        for name, row in rows.items():
            goals = ""
            if name.startswith("ours"):
                missed = misses(name, rows, busy)
                goals = ("MISS " + ",".join(missed)) if missed else "ok"
            cpu = f"{row['server_cpu_s']:>12.2f}" if name.endswith("-s3") else f"{'':>12}"
            lines.append(
                f"{size:>5} {name:<20} {row['blocked_s']:>9.3f} {row['window_s']:>8.3f} {row['drag_pct']:>7.1f} "
                f"{row['lost_s']:>7.3f} {row['lost_x']:>7.2f} {cpu}  {goals}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024], help="state sizes in MiB")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", type=float, default=1.0, help="seconds of stepping measured before each save")
    parser.add_argument("--busy", action="store_true", help="keep the other core busy with a separate process")
    parser.add_argument(
        "--prototypes",
        action="store_true",
        help="add the plain thread + sha256 (fused, chunked, or on a second thread)",
    )
    parser.add_argument("--niceness", type=int, default=None, help="ours: the worker thread's nice value (A/B)")
    parser.add_argument(
        "--keep-off-ab",
        action="store_true",
        help="add 'ours anywhere': ours whose saves may run on the training thread's CPU (A/B of keep_off)",
    )
    parser.add_argument(
        "--hash-thread", action="store_true", help="ours: hash on a second thread beside the write, as before (A/B)"
    )
    parser.add_argument(
        "--server-nice",
        type=int,
        default=None,
        help="run the local S3 gateway's daemons at this nice value (root), as a remote server's CPU would not be "
        "training's",
    )
    parser.add_argument(
        "--server-cpu",
        type=int,
        default=None,
        help="run the local S3 gateway's daemons on this CPU only (root): training keeps the other, as with a "
        "remote server",
    )
    parser.add_argument("--tmpdir", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.niceness is not None:
        background.WORKER_NICENESS = args.niceness
    if args.hash_thread:
        pipeline.hash_alongside = lambda *, background: True
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    try:
        with contextlib.ExitStack() as stack:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=args.tmpdir)))
            bucket = stack.enter_context(s3_bucket()) if os.environ.get("AWS_ENDPOINT_URL") else None
            stack.enter_context(server_placement(args.server_nice, args.server_cpu))
            results = {
                str(size): run_size(size, args.rounds, args.before, root, bucket, args.prototypes, args.keep_off_ab)
                for size in args.sizes
            }
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    print(table(results, args.busy, args.server_nice, args.server_cpu))
    print(
        json.dumps(
            {
                "loadavg": os.getloadavg(),
                "busy": args.busy,
                "server_nice": args.server_nice,
                "server_cpu": args.server_cpu,
                "hash_thread": args.hash_thread,
                "rounds": args.rounds,
                "results": results,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
