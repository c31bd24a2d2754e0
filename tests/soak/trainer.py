"""The soak's training process: two real Ignite streams through a ``TrackerSaver``, crash points installed.

Usage: ``python -m tests.soak.trainer CONFIG_JSON`` with ``TRACKER_SAVER_SOAK_CRASH=<point>:<n>``
(see ``tests.soak.plan``), or forked by ``python -m tests.soak.trainer --zygote SOCKET [MODULE…]``
(see :func:`zygote`), which is how the driver starts them. CONFIG has ``output_uri``,
``registry`` (a SQLite path, ``clearml:<project root>`` or ``mlflow:<tracking URI>``), ``storage_options``, ``project``,
``run``, ``restore``, ``seed``, ``pad_bytes`` (the size of the last stream's checkpoints),
``step_s`` (compute per iteration) and ``mutant`` (a deliberate bug, see ``MUTANTS``).

The crash points wrap the real seams, in this process only: a ``Registry`` subclass around
``create_pending``/``supersede``/``make_live``, the storage's ``writer`` (a tap on the staged write, and
the moment its commit returned), an object that dies while ``torch.save`` pickles it, and botocore
events of the S3 client. The library has no test hook.

Protocol: JSON lines on stdout, commands on stdin.

* ``{"ev": "loaded"}``: imports done, registry opened; waits for the line ``start``;
* ``{"ev": "ready", "epoch", "iteration", "loaded"}``: saver built (start-up recovery done) and
  restored as ``restore`` says; waits for ``go``, then trains until killed, each epoch one
  iteration, both streams saved at every ``EPOCH_COMPLETED``;
* per epoch ``{"ev": "epoch", "epoch", "iteration"}``, then per save ``remove`` (Ignite's),
  ``save`` (handler called), ``superseded`` (the registry's supersede returned: the storage commit point is
  next), ``committed`` (post-upload callback: the commit point passed), ``done`` (handler returned);
* ``{"ev": "error", "f", "error"}``: the save raised, then ``{"ev": "exit", "error"}``: the
  training raised, and the process exits with status 3;
* ``{"ev": "crash", "point", "n"}``: right before it SIGKILLs itself;
* ``{"ev": "hold"}``: (``gateway:<n>``) the ``n``-th S3 part upload waits for a ``resume`` line;
* the line ``stop`` (the race soak, ``tests.soak.race``): training ends after the epoch's saves, and the
  process exits with status 0.

A command whose config has ``"role": "racer"`` forks a process of the race soak instead
(:func:`tests.soak.racer.race`).
"""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any, BinaryIO

import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

from tests.soak.plan import N_SAVED, parse_crash, score_of
from tracker_saver import TrackerSaver, resume
from tracker_saver.core.records import Record, RecordState, UploadInfo
from tracker_saver.registry.base import Registry
from tracker_saver.save import pipeline, recovery, slots
from tracker_saver.storage.base import StagedWrite, Storage

__all__ = ["MUTANTS", "Crash", "Net", "Pad", "main", "zygote"]

_emit_lock = threading.Lock()


def emit(ev: str, **fields: Any) -> None:
    """Write one event line to stdout at once (a SIGKILL can cut no line but the one being written)."""
    line = (json.dumps({"ev": ev, **fields}) + "\n").encode()
    with _emit_lock:
        os.write(1, line)


class Crash:
    """The crash point this process dies at: ``point`` the ``count``-th time it is passed, once armed."""

    def __init__(self, spec: str | None) -> None:
        parsed = parse_crash(spec)
        self.point, self.count = parsed if parsed is not None else ("", 0)
        self.armed = False
        self.passed = 0
        self._lock = threading.Lock()

    def passes(self, point: str) -> bool:
        """Count a pass of ``point``; ``True`` exactly when it is the ``count``-th."""
        if not self.armed or point != self.point:
            return False
        with self._lock:
            self.passed += 1
            return self.passed == self.count

    def at(self, point: str) -> None:
        """Die here if this is the pass the crash point names."""
        if self.passes(point):
            self.die()

    def die(self) -> None:
        """Report the crash point, then SIGKILL this process."""
        emit("crash", point=self.point, n=self.count)
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # SIGKILL is on its way; never go on


class _Tripwire:
    """Put into a checkpoint: ``torch.save`` calls ``__reduce__`` while it pickles (``pickle:mid``)."""

    def __init__(self, crash: Crash) -> None:
        self.crash = crash

    def __reduce__(self) -> tuple[type, tuple[()]]:
        self.crash.at("pickle:mid")
        return (collections.OrderedDict, ())  # an empty OrderedDict: torch.load(weights_only=True) takes it


class _Tap:
    """The staged write, with ``write:mid`` at half the expected size. No ``name`` (see HashingWriter)."""

    def __init__(self, target: BinaryIO, crash: Crash, half: int) -> None:
        self.target, self.crash, self.half = target, crash, half
        self.written = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if self.written < self.half <= self.written + view.nbytes and self.crash.passes("write:mid"):
            self.target.write(view[: self.half - self.written])
            self.target.flush()
            self.crash.die()
        self.target.write(view)
        self.written += view.nbytes
        return view.nbytes

    def flush(self) -> None:
        self.target.flush()


def soak_registry(base: type[Registry], crash: Crash, mutant: str = "") -> type[Registry]:
    """``base``, a real registry class, with the crash points of create, stage and commit."""
    early = mutant == "live-before-commit"

    class SoakRegistry(base):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            records = self.records
            create_pending, supersede, make_live = records.create_pending, records.supersede, records.make_live

            def crashing_create_pending(info: UploadInfo, *, uri: str) -> Record:
                crash.at("create:before")
                record = create_pending(info, uri=uri)
                crash.at("create:after")
                return record

            def crashing_supersede(record_id: str, **kwargs: Any) -> None:
                crash.at("supersede:before")
                supersede(record_id, **kwargs)
                if early:
                    records.set_state(record_id, RecordState.LIVE, expected=(RecordState.PENDING,))
                emit("superseded", id=record_id)
                crash.at("supersede:after")

            def crashing_make_live(record_id: str, **kwargs: Any) -> Record:
                if early and records.get(record_id).state is RecordState.LIVE:
                    return records.get(record_id)
                crash.at("register:before")
                record = make_live(record_id, **kwargs)
                crash.at("register:after")
                return record

            # The registry's records part, wrapped in place: every caller names registry.records.
            records.create_pending = crashing_create_pending
            records.supersede = crashing_supersede
            records.make_live = crashing_make_live

    return SoakRegistry


def tap_storage(storage: Storage, crash: Crash, pad_bytes: int) -> None:
    """Wrap this storage's ``stage``: ``write:mid`` inside the staged write, ``commit:after`` after its commit."""
    inner = storage.stage

    def stage(key: str, **kwargs: Any) -> StagedWrite:
        # about half of the checkpoint: ~2 KiB of model and trainer state, plus the last stream's pad
        half = (pad_bytes + 2000) // 2 if key.rsplit("/", 1)[-1].startswith("checkpoint.") else 1000
        staged = inner(key, **kwargs)
        staged.file = _Tap(staged.file, crash, half)  # type: ignore[assignment]
        commit = staged.commit

        def commit_then_crash() -> None:
            commit()
            crash.at("commit:after")  # the rename / PUT / CompleteMultipartUpload returned

        staged.commit = commit_then_crash  # type: ignore[method-assign]
        return staged

    storage.stage = stage  # type: ignore[method-assign]


def watch_s3(storage: Storage, crash: Crash, resumed: threading.Event) -> None:
    """``upload:mid`` after a stored part; ``gateway:<n>``: hold the ``n``-th part until ``resume``."""
    events = storage._client.meta.events  # type: ignore[attr-defined]

    def after_part(http_response: Any = None, **_: Any) -> None:
        if http_response is not None and http_response.status_code < 300:
            crash.at("upload:mid")

    def before_part(**_: Any) -> None:
        if crash.passes("gateway"):
            emit("hold")
            resumed.wait(120)

    events.register("after-call.s3.UploadPart", after_part)
    events.register("before-send.s3.UploadPart", before_part)


class SoakSaver(TrackerSaver):
    """A ``TrackerSaver`` that reports Ignite's calls and dies at ``remove:after`` / ``pickle:mid``."""

    crash: Crash

    def remove(self, filename: str) -> None:
        emit("remove", f=filename)
        super().remove(filename)
        self.crash.at("remove:after")

    def __call__(self, checkpoint: Any, filename: str, metadata: Any = None) -> None:
        stream = str((metadata or {}).get("basename"))
        if self.crash.point == "pickle:mid":
            checkpoint = {**checkpoint, "soak": _Tripwire(self.crash)}
        emit("save", stream=stream, f=filename)
        try:
            super().__call__(checkpoint, filename, metadata)
        except BaseException as exc:
            emit("error", f=filename, error=f"{type(exc).__name__}: {exc}")
            raise
        emit("done", f=filename)


#: Deliberate bugs, to prove the checks catch them (``tests/test_soak.py``); never used otherwise.
MUTANTS = {
    "live-before-commit": "a record becomes live at the stage, before its bytes are committed",
    "no-startup-recovery": "start-up settles nothing (pending records and staged leftovers stay)",
    "forget-kept": "the slot allocator forgets what Ignite keeps, so it reuses a kept record's slot",
}


def _mutate(mutant: str) -> None:
    if mutant == "no-startup-recovery":
        pipeline.Pipeline.recover = lambda self, project, run: []  # type: ignore[method-assign]
        pipeline.settle_stream = lambda *args, **kwargs: recovery.Settled([], [])  # type: ignore[assignment]
    elif mutant == "forget-kept":
        slots.SlotAllocator.adopt = lambda self, stream, filenames: None  # type: ignore[method-assign]
        slots.SlotAllocator.committed = _committed_forgetting  # type: ignore[method-assign]


_real_committed = slots.SlotAllocator.committed


def _committed_forgetting(self: slots.SlotAllocator, stream: Any, choice: Any, record: Record) -> None:
    _real_committed(self, stream, choice, record)
    self._get(stream).kept.discard(record.filename)


class Net(torch.nn.Module):
    """A tiny model: its weights are the iteration they were trained to (so a checkpoint says which it is)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)


class Pad:
    """Bytes only the last stream carries: its checkpoints are big (S3: a multipart upload), the best
    stream's small (S3: one PUT), so both of S3's commit points are exercised."""

    def __init__(self, size: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.data = torch.randint(0, 256, (size,), dtype=torch.uint8, generator=generator)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"data": self.data}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.data = state["data"]


def _open_registry(spec: str, crash: Crash, mutant: str) -> Registry:
    if spec.startswith("clearml:"):
        from tracker_saver.integrations.clearml.registry import ClearMLRegistry

        cls = soak_registry(ClearMLRegistry, crash, mutant)
        return cls(project_root=spec.partition(":")[2])  # type: ignore[call-arg]
    if spec.startswith("mlflow:"):
        from tracker_saver.integrations.mlflow.registry import MLflowRegistry

        return soak_registry(MLflowRegistry, crash, mutant)(spec.partition(":")[2])  # type: ignore[call-arg]
    from tracker_saver.registry.sqlite import SQLiteRegistry

    return soak_registry(SQLiteRegistry, crash, mutant)(spec)  # type: ignore[call-arg]


def _line() -> str:
    return sys.stdin.readline().strip()


def main(config: dict[str, Any]) -> None:
    """Train as the module docstring says; never returns (killed, or exits 3 after a failed save)."""
    torch.set_num_threads(1)
    crash = Crash(os.environ.get("TRACKER_SAVER_SOAK_CRASH"))
    mutant = str(config.get("mutant") or "")
    _mutate(mutant)
    registry = _open_registry(config["registry"], crash, mutant)
    emit("loaded")
    if _line() != "start":
        os._exit(0)  # the driver is done with this process
    saver = SoakSaver(
        config["output_uri"], project=config["project"], run=config["run"], registry=registry,
        storage_options=config.get("storage_options") or {},
        post_upload=[lambda info: emit("committed", f=info.filename)],
    )  # fmt: skip
    saver.crash = crash
    net = Net()
    tap_storage(saver.storage, crash, int(config["pad_bytes"]))
    resumed = threading.Event()
    if saver.storage.uri.startswith("s3://"):
        watch_s3(saver.storage, crash, resumed)
    step_s, seed = float(config["step_s"]), int(config["seed"])

    def step(engine: Engine, batch: Any) -> None:
        with torch.no_grad():
            for p in net.linear.parameters():
                p.fill_(float(engine.state.iteration))  # a checkpoint's weights say its iteration
        time.sleep(step_s)

    trainer = Engine(step)
    to_save = {"model": net, "trainer": trainer}
    best = Checkpoint(
        to_save, saver, filename_prefix="best", n_saved=N_SAVED["best_checkpoint"], score_name="acc",
        score_function=lambda e: score_of(seed, e.state.epoch), include_self=True,
        global_step_transform=lambda e, _: e.state.epoch,
    )  # fmt: skip
    pad = Pad(int(config["pad_bytes"]))
    last = Checkpoint({**to_save, "pad": pad}, saver, n_saved=N_SAVED["checkpoint"], include_self=True)
    loaded = None
    if config["restore"] == "resume":
        loaded = resume(saver, to_save, [best, last])
    elif config["restore"] == "fresh":  # fresh Checkpoints: only the model and trainer come back
        loaded = resume(saver, to_save)
    trainer.add_event_handler(
        Events.EPOCH_COMPLETED, lambda e: emit("epoch", epoch=e.state.epoch, iteration=e.state.iteration)
    )
    trainer.add_event_handler(Events.EPOCH_COMPLETED, best)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, last)
    stopping = threading.Event()  # the race soak's ``stop``: end cleanly after this epoch's saves
    trainer.add_event_handler(Events.EPOCH_COMPLETED, lambda e: e.terminate() if stopping.is_set() else None)
    emit(
        "ready",
        epoch=trainer.state.epoch,
        iteration=trainer.state.iteration,
        loaded=loaded.filename if loaded is not None else None,
    )
    if _line() != "go":
        os._exit(0)

    def listen() -> None:
        for line in sys.stdin:
            if line.strip() == "resume":
                resumed.set()
            elif line.strip() == "stop":
                stopping.set()

    threading.Thread(target=listen, daemon=True).start()
    crash.armed = True
    try:
        trainer.run([0], max_epochs=10**9)
    except BaseException as exc:
        emit("exit", error=f"{type(exc).__name__}: {exc}")
        os._exit(3)  # like a script whose training raised; no clean-up that could hang
    os._exit(0)


def zygote(socket_path: str, preload: list[str]) -> None:
    """A fork server: import once, then fork one training process per command line on stdin.

    Each command is ``{"id", "config", "crash", "stderr"}``. The child connects to the driver's
    Unix socket at ``socket_path`` and uses it as stdin and stdout (see the protocol above);
    this process answers ``{"ev": "forked", "id", "pid"}`` and, once it reaped the child,
    ``{"ev": "exited", "pid", "code"}`` (``-9`` after a SIGKILL).

    Forking from a process that has only imported modules (no saver, registry, storage or
    thread) gives the same process as a fresh interpreter, in milliseconds instead of the
    seconds ``import torch`` takes: like ``multiprocessing``'s forkserver. With ClearML, it has
    also read the SDK's configuration, which a fresh interpreter of the same environment reads alike.
    """
    for name in preload:
        __import__(name)
    if "clearml" in preload:
        # The SDK reads clearml.conf (a HOCON parse) once per process, at its first session: a
        # third of each ClearML child's CPU. This process has the children's environment (the
        # driver's ``process_env``), so it reads the same configuration once for all of them.
        from tracker_saver.integrations.clearml.internals import sdk_config

        sdk_config()
    lock = threading.Lock()
    children = threading.Condition()
    running = [0]

    def say(**fields: Any) -> None:
        with lock:
            os.write(1, (json.dumps(fields) + "\n").encode())

    def reap() -> None:
        while True:
            with children:
                while running[0] == 0:
                    children.wait()
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                continue
            with children:
                running[0] -= 1
            say(ev="exited", pid=pid, code=os.waitstatus_to_exitcode(status))

    threading.Thread(target=reap, daemon=True).start()
    say(ev="zygote", pid=os.getpid())
    for line in sys.stdin:
        command = json.loads(line)
        with lock, children:  # the child must not inherit a lock held by the reaper
            pid = os.fork()
            if pid == 0:
                _child(command, socket_path)
            running[0] += 1
            children.notify()
        say(ev="forked", id=command["id"], pid=pid)


def _child(command: dict[str, Any], socket_path: str) -> None:
    global _emit_lock
    try:
        _emit_lock = threading.Lock()
        os.environ["TRACKER_SAVER_SOAK_CRASH"] = command["crash"]
        err = os.open(command["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(err, 2)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(socket_path)
        os.dup2(sock.fileno(), 0)
        os.dup2(sock.fileno(), 1)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 (the process's stdin)
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        emit("hello", id=command["id"], pid=os.getpid())
        if command["config"].get("role") == "racer":
            from tests.soak.racer import race

            race(command["config"])
        else:
            main(command["config"])
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(1)


if __name__ == "__main__":
    if sys.argv[1] == "--zygote":
        zygote(sys.argv[2], sys.argv[3:])
    else:
        main(json.loads(sys.argv[1]))
