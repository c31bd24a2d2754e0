"""Outages, repeated: does any save hang, lie or leave an extra object when a back end goes away?

A tiny model trains with a real Ignite ``Engine``, two ``Checkpoint`` streams (``n_saved=2``:
``best_checkpoint``, scored, and ``checkpoint``, the last ones) and a ``TrackerSaver`` with a small
``--timeout``, once synchronously and once with ``async_upload=True`` + ``attach`` (``--modes``). It
repeats ``--outages`` outages, cycling through ``--kinds`` (and, per kind, through the modes):

* ``rgw-stopped``, ``rgw-frozen``: S3 on the Ceph RGW of ``scripts/ceph-s3.sh`` + SQLite registry;
  radosgw stopped (``stop-rgw``/``start-rgw``) or frozen (SIGSTOP/SIGCONT). Only when Ceph is up
  (``eval "$(bash scripts/ceph-s3.sh start)"``). The gateway is touched only while this process
  holds the gateway-use lock of ``tests/conftest_ceph.py`` exclusively (no test in another process
  is using it then); an outage that cannot get it within ``--lock-wait`` seconds is skipped. radosgw is always left running and unfrozen.
* ``clearml-stopped``, ``clearml-hanging``, ``clearml-500``, ``clearml-503``: the ClearML registry
  on the in-process stand-in (``tests/clearml_standin/``), a local output folder. The SDK talks to
  the stand-in through a small TCP proxy here: *stopped* closes its port and every connection (the
  stand-in keeps its data, as a server's database would), *hanging* accepts and reads but forwards
  nothing until the outage ends (then forwards what it held, as a SIGSTOPped server would);
  500/503 are the stand-in's injected answers to every request.

Each outage: ``--good`` epochs of good saves; the outage begins; ``--during`` epochs of saves
(synchronous ones must raise, within the bound; async ones return and the error surfaces on a
later save or flush); the service returns; a wait of half the timeout (after which the outage clock
tries the service again); ``--after`` epochs of saves, the last of which must succeed (async: and a flush).
Storage and registry are then read directly (``tests/soak/backends.py``; truth by
``tests/soak/check.py``): *lies* (a loadable record whose object is missing, has another size or
sha256, or is not the checkpoint it names; ClearML offering a non-loadable model) and *extra
objects* (a stream with more than ``n_saved`` slot objects, a slot beyond ``n_saved``, any other
object, a temp file or multipart upload left once the next save succeeded). They are also read
right after the service returned, before any later save (sync always; async after a flush, for
half the outages, seeded); staged writes that failed saves left then (temp files, multipart uploads)
are only counted (``staged when back``): the next save must clear them. A problem counts once, in
the outage that first showed it (later ones list it as ``persisting``), with the records and
objects of that moment on stderr.

Every ``Checkpoint`` call and flush is timed on the training thread (the table's max is over all of
them, its median over the calls made while the service was down); a *hang* is one that blocked
longer than ``--timeout`` + ``--margin``, or an outage whose later save did not succeed. An outage
in which no error reached the training thread is *silent* (DESIGN: nothing only logged).

    eval "$(bash scripts/ceph-s3.sh start)"   # optional: adds the rgw-* kinds
    python benchmarks/bench_outages.py --outages 24 --timeout 4

Prints a table per kind and mode, one JSON line, then the summary line
``outages=N hangs=H lies=L extra_objects=E max_block_s=X``; exits 1 unless hangs, lies, extra
objects and silent outages are all 0.
"""

from __future__ import annotations

import argparse
import atexit
import collections
import contextlib
import dataclasses
import faulthandler
import json
import os
import random
import re
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from ignite.engine import Engine, Events  # noqa: E402
from ignite.handlers import Checkpoint  # noqa: E402

from tests.soak import check  # noqa: E402
from tests.soak.backends import S3_OPTIONS, Backend, open_backend  # noqa: E402
from tests.soak.plan import score_of  # noqa: E402
from tests.soak.trainer import Net, Pad  # noqa: E402
from tracker_saver import TrackerSaver  # noqa: E402

KINDS = {
    "rgw-stopped": "s3",
    "rgw-frozen": "s3",
    "clearml-stopped": "clearml",
    "clearml-hanging": "clearml",
    "clearml-500": "clearml",
    "clearml-503": "clearml",
}
MODES = ("sync", "async")
PHASES = ("good", "during", "flush", "after")
N_SAVED = 2
STREAMS = ("best_checkpoint", "checkpoint")
PROJECT = "bench"
#: S3 options: the last stream's 11 MiB checkpoints go up as 3 parts; the timeouts are the saver's.
S3_UPLOAD = {k: v for k, v in S3_OPTIONS.items() if k.startswith(("multipart", "max_concurrency", "writer_"))}


def log(message: str) -> None:
    print(f"bench_outages: {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- the faults


class Proxy:
    """A TCP proxy in front of the ClearML stand-in that can stop (port closed) and hang (no answer)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = 0
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Proxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="proxy-accept", daemon=True).start()
        return self

    def stop(self) -> None:
        """Close the port and every connection: the server process is gone."""
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = list(self._conns), set()
        for sock in ([listener] if listener is not None else []) + conns:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def hang(self) -> None:
        """Accept and read, answer nothing (what is read is held, and forwarded by :meth:`thaw`)."""
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), name="proxy-conn", daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream, timeout=10)
            upstream.settimeout(None)
            for sock in (client, upstream):  # relay each write at once (no 40 ms delayed-ACK stalls)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            client.close()
            return
        with self._lock:
            if self._listener is None:  # stopped meanwhile
                client.close()
                upstream.close()
                return
            self._conns |= {client, upstream}
        for src, dst in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(src, dst), name="proxy-pump", daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                self._flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with self._lock:
            self._conns -= {src, dst}


class Faults:
    """Begins and ends each kind of outage; :meth:`restore` leaves every service running."""

    def __init__(self, *, ceph: Any = None, standin: Any = None, proxy: Proxy | None = None, lock_wait: float) -> None:
        self.ceph, self.standin, self.proxy, self.lock_wait = ceph, standin, proxy, lock_wait
        self.active: str | None = None
        self._frozen_pid: int | None = None
        self._guard = threading.Lock()

    def begin(self, kind: str) -> bool:
        """Start the outage; ``False`` (nothing done) when the gateway may not be touched now."""
        with self._guard:
            if KINDS[kind] == "s3" and not self._hold_gateway():
                return False
            self.active = kind
            try:
                if kind == "rgw-stopped":
                    self.ceph.stop_rgw()
                elif kind == "rgw-frozen":
                    self._frozen_pid = rgw_pid()
                    os.kill(self._frozen_pid, signal.SIGSTOP)
                elif kind == "clearml-stopped":
                    self.proxy.stop()  # type: ignore[union-attr]
                elif kind == "clearml-hanging":
                    self.proxy.hang()  # type: ignore[union-attr]
                else:
                    self.standin.fail(".", code=int(kind.rsplit("-", 1)[1]), msg="bench: injected outage", times=None)
            except BaseException:
                self._end()
                raise
            return True

    def end(self) -> None:
        with self._guard:
            self._end()

    def restore(self) -> None:
        """End whatever outage is on (at exit, on a signal, from the watchdog); never raises."""
        try:
            self.end()
        except BaseException as exc:  # a cleanup path: say it, go on
            log(f"restoring after {self.active}: {type(exc).__name__}: {exc}")

    def _end(self) -> None:
        kind, self.active = self.active, None
        if kind is None:
            return
        try:
            if kind == "rgw-stopped":
                try:
                    self.ceph.start_rgw()
                except Exception as exc:  # try once more: it must be left running
                    log(f"start-rgw failed ({exc}); trying again")
                    time.sleep(2)
                    self.ceph.ensure_up()
            elif kind == "rgw-frozen":
                pid, self._frozen_pid = self._frozen_pid, None
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)
                self.ceph.ensure_up()  # it answers at once; restarted if it died meanwhile
            elif kind == "clearml-stopped":
                self.proxy.start()  # type: ignore[union-attr]
            elif kind == "clearml-hanging":
                self.proxy.thaw()  # type: ignore[union-attr]
            else:
                self.standin.clear_faults()
        finally:
            if KINDS[kind] == "s3" and self.ceph.lock is not None:
                self.ceph.lock.shared()

    def _hold_gateway(self) -> bool:
        """Hold the sessions' lock alone (other pytest sessions may use the gateway), retrying."""
        if self.ceph is None or not self.ceph.can_restart:
            return False
        if self.ceph.lock is None:
            return True
        if self.ceph.lock.exclusive(timeout=self.lock_wait):
            return True
        log(f"the Ceph gateway is in use by another session for {self.lock_wait:.0f} s: outage skipped")
        return False


def rgw_pid() -> int:
    """The pid of the script's radosgw (its pid file), checked to be radosgw with the script's conf."""
    from tests.conftest_ceph import _state_dir

    state = _state_dir()
    pid = int((state / "run" / "client.rgw.a.pid").read_text().strip())
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    if Path(argv[0].decode()).name != "radosgw" or str(state / "ceph.conf").encode() not in argv:
        raise RuntimeError(f"pid {pid} of {state}/run/client.rgw.a.pid is not the script's radosgw")
    return pid


# ----------------------------------------------------------------------------- what one outage showed


@dataclasses.dataclass
class Call:
    phase: str  # good, during, after, flush
    epoch: int  # 0 for a flush
    what: str
    seconds: float
    error: str | None


@dataclasses.dataclass
class Outcome:
    index: int
    kind: str
    mode: str
    skipped: bool = False
    calls: list[Call] = dataclasses.field(default_factory=list)
    recovered: bool = False
    lies: list[str] = dataclasses.field(default_factory=list)
    extra: list[str] = dataclasses.field(default_factory=list)
    mid_check: bool = False
    staged_when_back: list[str] = dataclasses.field(default_factory=list)
    persisting: set[str] = dataclasses.field(default_factory=set)  # problems an earlier outage counted

    def hangs(self, bound: float) -> list[str]:
        found = [f"{c.what} ({c.phase}) blocked {c.seconds:.1f} s" for c in self.calls if c.seconds > bound]
        if not self.recovered:
            last = [c for c in self.calls if c.phase in ("after", "flush")][-3:]
            found.append("the later save did not succeed: " + "; ".join(f"{c.what}: {c.error}" for c in last))
        return found

    def errors(self) -> int:
        return sum(c.error is not None for c in self.calls if c.phase != "good")

    def to_json(self, bound: float) -> dict[str, Any]:
        return {
            "index": self.index, "kind": self.kind, "mode": self.mode, "skipped": self.skipped,
            "recovered": self.recovered, "errors": self.errors(), "hangs": self.hangs(bound), "lies": self.lies,
            "extra_objects": self.extra, "mid_check": self.mid_check, "staged_when_back": self.staged_when_back,
            "persisting": sorted(self.persisting),
            "max_block_s": round(max((c.seconds for c in self.calls), default=0.0), 3),
            "blocks_s": {p: [round(c.seconds, 2) for c in self.calls if c.phase == p] for p in PHASES},
            "raised": sorted({c.error.split(":")[0] for c in self.calls if c.error}),
        }  # fmt: skip


def footprint(backend: Backend, runs: list[str], objects: list[Any], staged: list[str], *, final: bool) -> list[str]:
    """Extra objects at output_uri: over n_saved per stream, beyond the slots, not slots, or left staged."""
    problems = []
    key = re.compile(
        rf"{re.escape(backend.project)}/(?P<run>{'|'.join(map(re.escape, runs))})/"
        rf"(?P<stream>{'|'.join(STREAMS)})\.slot(?P<slot>\d+)\.pt"
    )
    per_stream: collections.Counter[tuple[str, str]] = collections.Counter()
    for obj in objects:
        found = key.fullmatch(obj.key)
        if found is None:
            problems.append(f"{obj.key!r} is not a slot key")
        elif int(found["slot"]) >= N_SAVED:
            problems.append(f"{obj.key!r} is beyond the stream's {N_SAVED} slots")
        else:
            per_stream[found["run"], found["stream"]] += 1
    for (run, stream), count in per_stream.items():
        problems += [f"{run}/{stream} has {count} objects, n_saved={N_SAVED}"] * max(0, count - N_SAVED)
    if final:  # before the next save, a failed one may have left its staged write (the next one clears it)
        problems += [f"{item} left staged after the next save succeeded" for item in staged]
    return problems


def inspect(backend: Backend, runs: list[str], seen: set[str], outcome: Outcome, *, final: bool) -> None:
    """Read registry then storage directly; add what is wrong to ``outcome``.

    Each problem counts once: in the outage that first showed it (``seen`` holds those of earlier
    outages at this back end; one still there later is only counted as ``persisting``).
    """
    snap = check.snapshot(backend)
    when = "after the later save" if final else "when the service returned"
    if not final:
        outcome.staged_when_back = list(snap.staged)
        if snap.staged:
            log(f"outage {outcome.index} ({outcome.kind}, {outcome.mode}) {when}: staged {snap.staged}")
    found = [("LIE", lie, outcome.lies) for lie in check._truth(backend, snap)]
    found += [
        ("EXTRA OBJECT", extra, outcome.extra)
        for extra in footprint(backend, runs, snap.objects, snap.staged, final=final)
    ]
    new = False
    for label, problem, into in found:
        if problem in seen and problem not in into:
            outcome.persisting.add(problem)
        elif problem not in into:
            into.append(problem)
            new = True
            log(f"outage {outcome.index} ({outcome.kind}, {outcome.mode}) {label} {when}: {problem}")
    if new:  # what the registry and storage hold, for the report
        for row in snap.rows:
            log(f"  record {row.id[:12]} {row.stream} {row.filename!r} {row.state} slot={row.slot} key={row.key}")
        log(f"  objects: {', '.join(f'{o.key} ({o.size} B)' for o in snap.objects)}")
    if final:
        seen.update(outcome.lies + outcome.extra)


# ----------------------------------------------------------------------------- the training


class Watchdog:
    """Ends the outage (and dumps the stacks) when one call blocks far past the bound; never lets the
    benchmark itself hang: after a further ``grace`` it exits with status 2."""

    def __init__(self, faults: Faults, limit: float, grace: float = 120.0) -> None:
        self.faults, self.limit, self.grace = faults, limit, grace
        self.started: float | None = None
        self.what = ""
        self._stop = threading.Event()
        threading.Thread(target=self._watch, name="bench-watchdog", daemon=True).start()

    @contextlib.contextmanager
    def timing(self, what: str) -> Iterator[None]:
        self.what, self.started = what, time.monotonic()
        try:
            yield
        finally:
            self.started = None

    def close(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        fired = False
        while not self._stop.wait(0.5):
            started = self.started
            if started is None:
                fired = False
                continue
            blocked = time.monotonic() - started
            if blocked > self.limit and not fired:
                fired = True
                log(f"HANG: {self.what} blocked {blocked:.0f} s; stacks follow; ending the outage")
                faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
                self.faults.restore()
            elif blocked > self.limit + self.grace:
                log(f"HANG: {self.what} still blocked {blocked:.0f} s after the service returned: giving up")
                self.faults.restore()
                os._exit(2)


def run_group(
    backend: Backend, mode: str, plan: list[tuple[int, str]], args: argparse.Namespace, faults: Faults,
    runs: list[str], seen: set[str], watchdog: Watchdog,
) -> list[Outcome]:  # fmt: skip
    """Train one saver (``mode``) on ``backend`` through the outages of ``plan``; their outcomes."""
    options = {**backend.gateway.ceph.storage_options(), **S3_UPLOAD} if backend.s3 is not None else {}
    saver = TrackerSaver(
        backend.output_uri, project=backend.project, run=backend.run, registry=backend.registry,
        storage_options=options, async_upload=mode == "async", timeout=args.timeout,
    )  # fmt: skip
    outcomes = [Outcome(index, kind, mode) for index, kind in plan]
    schedule = [
        (outcome, phase, k)
        for outcome in outcomes
        for phase, count in (("good", args.good), ("during", args.during), ("after", args.after))
        for k in range(count)
    ]
    net = Net()

    def step(engine: Engine, batch: Any) -> None:
        with torch.no_grad():
            for p in net.linear.parameters():
                p.fill_(float(engine.state.iteration))  # a checkpoint's weights say its iteration

    trainer = Engine(step)
    to_save = {"model": net, "trainer": trainer}
    best = Checkpoint(
        to_save, saver, filename_prefix="best", n_saved=N_SAVED, score_name="acc",
        score_function=lambda e: score_of(args.seed, e.state.epoch), global_step_transform=lambda e, _: e.state.epoch,
    )  # fmt: skip
    last = Checkpoint({**to_save, "pad": Pad(backend.pad_bytes)}, saver, n_saved=N_SAVED)

    def timed(outcome: Outcome, phase: str, epoch: int, what: str, fn: Callable[[], object]) -> None:
        with watchdog.timing(f"{what} in outage {outcome.index} ({outcome.kind}, {mode})"):
            start = time.monotonic()
            error = None
            try:
                fn()
            except Exception as exc:  # every error is recorded, and counted
                error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
            outcome.calls.append(Call(phase, epoch, what, time.monotonic() - start, error))
        if error is not None:
            up = ": a save with the service up failed" if phase == "good" else ""
            log(f"outage {outcome.index} ({outcome.kind}, {mode}) {what} ({phase}) raised{up}: {error[:400]}")

    def save(handler: Checkpoint, what: str) -> Callable[[Engine], None]:
        def call(engine: Engine) -> None:
            outcome, phase, _ = schedule[engine.state.epoch - 1]
            epoch = engine.state.epoch
            timed(outcome, phase, epoch, f"{what} epoch {epoch}", lambda: handler(engine))

        return call

    def flush(outcome: Outcome) -> None:
        timed(outcome, "flush", 0, "flush", lambda: saver.flush(args.timeout + args.margin + 1))

    def epoch_started(engine: Engine) -> None:
        outcome, phase, k = schedule[engine.state.epoch - 1]
        rng = random.Random(f"{args.seed}:{outcome.index}:{phase}")
        if phase == "during" and k == 0:
            if mode == "async":  # the outage meets the last good save in flight, at a seeded moment
                time.sleep(rng.uniform(0.0, 0.3))
            outcome.skipped = not faults.begin(outcome.kind)
            log(f"outage {outcome.index}: {outcome.kind}, {mode}" + (" SKIPPED" if outcome.skipped else " begins"))
        elif phase == "after" and k == 0:
            if not outcome.skipped:
                faults.end()
            time.sleep(args.timeout / 2 + 0.2)  # training goes on; by then the outage clock tries again
            if mode == "sync" or rng.random() < 0.5:
                if mode == "async":
                    flush(outcome)
                outcome.mid_check = True
                inspect(backend, runs, seen, outcome, final=False)

    def epoch_completed(engine: Engine) -> None:
        outcome, phase, k = schedule[engine.state.epoch - 1]
        if phase != "after" or k != args.after - 1:
            return
        epoch = engine.state.epoch
        if mode == "async":
            flush(outcome)
        saves = [c for c in outcome.calls if c.epoch == epoch]
        flushed = mode == "sync" or outcome.calls[-1].error is None
        outcome.recovered = bool(saves) and all(c.error is None for c in saves) and flushed
        inspect(backend, runs, seen, outcome, final=True)
        bound = args.timeout + args.margin
        log(
            f"outage {outcome.index} ({outcome.kind}, {mode}) done: recovered={outcome.recovered} "
            f"errors={outcome.errors()} hangs={len(outcome.hangs(bound))} lies={len(outcome.lies)} "
            f"extra={len(outcome.extra)} max_block={max(c.seconds for c in outcome.calls):.1f}s"
        )

    trainer.add_event_handler(Events.EPOCH_STARTED, epoch_started)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, save(best, "best"))
    trainer.add_event_handler(Events.EPOCH_COMPLETED, save(last, "last"))
    trainer.add_event_handler(Events.EPOCH_COMPLETED, epoch_completed)
    if mode == "async":
        saver.attach(trainer)
    try:
        trainer.run([0], max_epochs=len(schedule))
    finally:
        faults.restore()
        saver.close(timeout=args.timeout + args.margin + 1)
    return outcomes


# ----------------------------------------------------------------------------- the run


@contextlib.contextmanager
def clearml_env(backend: Backend, proxy: Proxy) -> Iterator[None]:
    """This process's environment pointed at the stand-in (through ``proxy``); restored after."""
    saved = dict(os.environ)
    try:
        for name in backend.drop_env:
            os.environ.pop(name, None)
        for name, value in backend.env.items():
            if name.startswith("CLEARML_"):
                os.environ[name] = proxy.host if name.endswith("_HOST") else value
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def plan_outages(count: int, kinds: list[str], modes: list[str]) -> list[tuple[int, str, str]]:
    """``(index, kind, mode)``: kinds cycle; modes alternate, shifted every cycle (so each kind has each).

    Examples:
        >>> plan_outages(4, ["a", "b"], ["sync", "async"])
        [(0, 'a', 'sync'), (1, 'b', 'async'), (2, 'a', 'async'), (3, 'b', 'sync')]
        >>> [mode for _, _, mode in plan_outages(3, ["a"], ["sync", "async"])]
        ['sync', 'async', 'sync']
    """
    n = len(kinds)
    return [(i, kinds[i % n], modes[(i % n + i // n) % len(modes)]) for i in range(count)]


def summarize(outcomes: list[Outcome], args: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    bound = args.timeout + args.margin
    rows = []
    groups: dict[tuple[str, str], list[Outcome]] = collections.defaultdict(list)
    for o in sorted(outcomes, key=lambda o: (list(KINDS).index(o.kind), MODES.index(o.mode))):
        groups[o.kind, o.mode].append(o)
    for (kind, mode), group in [*groups.items(), (("all", ""), outcomes)]:
        done = [o for o in group if not o.skipped]
        blocks = [c.seconds for o in done for c in o.calls]
        down = [c.seconds for o in done for c in o.calls if c.phase == "during"]
        rows.append({
            "kind": kind, "mode": mode, "count": len(done), "skipped": len(group) - len(done),
            "hangs": sum(len(o.hangs(bound)) for o in done), "lies": sum(len(o.lies) for o in done),
            "extra_objects": sum(len(o.extra) for o in done), "silent": sum(o.errors() == 0 for o in done),
            "errors": sum(o.errors() for o in done), "staged_when_back": sum(len(o.staged_when_back) for o in done),
            "max_block_s": round(max(blocks, default=0.0), 3),
            "median_block_s": round(statistics.median(down), 3) if down else 0.0,
        })  # fmt: skip
    return rows[-1], rows


def main(argv: list[str] | None = None, *, ceph: Any = None) -> int:
    """Run the outages, print the table, the JSON line and the summary line; the exit status.

    ``ceph``: the gateway (``tests.conftest_ceph.CephS3``) to use for the rgw-* kinds, as a pytest
    session holds it; else the environment's (``eval "$(bash scripts/ceph-s3.sh start)"``).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outages", type=int, default=24, help="how many outages in all")
    parser.add_argument("--timeout", type=float, default=4.0, help="TrackerSaver(timeout=...), seconds")
    parser.add_argument("--margin", type=float, default=5.0, help="a call blocked over timeout+margin is a hang")
    parser.add_argument("--kinds", default="", help=f"comma list of {', '.join(KINDS)} (default: all available)")
    parser.add_argument("--modes", default="sync,async", help="comma list of sync, async (default: both)")
    parser.add_argument("--seed", type=int, default=0, help="scores, and when the outage meets a save in flight")
    parser.add_argument("--good", type=int, default=2, help="epochs of good saves before each outage")
    parser.add_argument("--during", type=int, default=2, help="epochs of saves during each outage")
    parser.add_argument("--after", type=int, default=2, help="epochs of saves after it (the last must succeed)")
    parser.add_argument("--lock-wait", type=float, default=120.0, help="seconds to wait for the Ceph lock")
    parser.add_argument("--workdir", default=None, help="keep output and registries here (default: a temp dir)")
    args = parser.parse_args(argv)
    ceph_up = ceph is not None or bool(os.environ.get("AWS_ENDPOINT_URL"))
    if args.kinds:
        kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
        unknown = [k for k in kinds if k not in KINDS]
        if unknown:
            parser.error(f"unknown kinds {unknown}: choose from {', '.join(KINDS)}")
        if not ceph_up and any(KINDS[k] == "s3" for k in kinds):
            parser.error('the rgw-* kinds need Ceph: eval "$(bash scripts/ceph-s3.sh start)"')
    else:
        kinds = [k for k in KINDS if ceph_up or KINDS[k] != "s3"]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes {args.modes!r}: a comma list of {', '.join(MODES)}")
    if args.outages < 1 or args.after < 1 or args.during < 1:
        parser.error("--outages, --during and --after must be >= 1")
    torch.set_num_threads(1)
    plan = plan_outages(args.outages, kinds, modes)
    outcomes: list[Outcome] = []
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        workdir = Path(args.workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-outages-")))
        backends: dict[str, Backend] = {}
        for name in dict.fromkeys(KINDS[k] for k in kinds):
            backends[name] = stack.enter_context(open_backend(name, ceph=ceph, workdir=str(workdir / name)))
        proxy = None
        if "clearml" in backends:
            standin = backends["clearml"].standin
            assert standin is not None
            proxy = Proxy((standin.host, standin._httpd.server_address[1])).start()  # type: ignore[union-attr]
            stack.callback(proxy.stop)
            stack.enter_context(clearml_env(backends["clearml"], proxy))
        faults = Faults(
            ceph=backends["s3"].gateway.ceph if "s3" in backends else None,  # type: ignore[union-attr]
            standin=backends["clearml"].standin if "clearml" in backends else None,
            proxy=proxy,
            lock_wait=args.lock_wait,
        )
        stack.callback(faults.restore)
        atexit.register(faults.restore)
        watchdog = Watchdog(faults, limit=max(60.0, 4 * (args.timeout + args.margin)))
        stack.callback(watchdog.close)
        runs: dict[str, list[str]] = {name: [] for name in backends}
        seen: dict[str, set[str]] = {name: set() for name in backends}
        groups: dict[tuple[str, str], list[tuple[int, str]]] = collections.defaultdict(list)
        for index, kind, mode in plan:
            groups[KINDS[kind], mode].append((index, kind))
        for (name, mode), group_plan in groups.items():
            view = dataclasses.replace(backends[name], project=PROJECT, run=f"outages-{mode}-{uuid.uuid4().hex[:6]}")
            runs[name].append(view.run)
            try:
                outcomes += run_group(view, mode, group_plan, args, faults, runs[name], seen[name], watchdog)
            except Exception:
                log(f"the {name} {mode} training failed outside any save:\n{traceback.format_exc()}")
                raise
    seconds = time.monotonic() - started
    total, rows = summarize(outcomes, args)
    print(
        f"{'kind':16} {'mode':5} {'count':>5} {'skipped':>7} {'hangs':>5} {'lies':>4} {'extra objects':>13} "
        f"{'silent':>6} {'errors':>6} {'staged when back':>16} {'max block s':>11} {'median block s':>14}"
    )
    for r in rows:
        print(
            f"{r['kind']:16} {r['mode']:5} {r['count']:5d} {r['skipped']:7d} {r['hangs']:5d} {r['lies']:4d} "
            f"{r['extra_objects']:13d} {r['silent']:6d} {r['errors']:6d} {r['staged_when_back']:16d} {r['max_block_s']:11.1f} "
            f"{r['median_block_s']:14.2f}"
        )
    bound = args.timeout + args.margin
    report = {
        "benchmark": "outages", **vars(args), "kinds": kinds, "seconds": round(seconds, 1), "totals": total,
        "rows": rows[:-1], "outages_detail": [o.to_json(bound) for o in outcomes],
    }  # fmt: skip
    print(json.dumps(report), flush=True)
    print(
        f"outages={total['count']} hangs={total['hangs']} lies={total['lies']} "
        f"extra_objects={total['extra_objects']} max_block_s={total['max_block_s']:.1f}",
        flush=True,
    )
    failed = total["hangs"] or total["lies"] or total["extra_objects"] or total["silent"]
    return 1 if failed else 0


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # the finally blocks restore the services


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    sys.exit(main())
