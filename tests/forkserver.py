"""A fork server for the tests' training subprocesses: ``python -m MODULE ARGS`` (or a script) without paying for imports.

Many tests restart training in a new process (``tests.worker``, ``tests.resume_run``): DESIGN asks
for a subprocess, not a re-import. Each such process spent about 3 s (more on a busy machine)
importing torch and ignite before it did anything. This server imports them once, then forks one
process per request, like ``multiprocessing``'s forkserver and the soak's zygote: the child is a new
process (its own pid, files, SQLite connections, threads, atexit handlers and exit status) that
has only ever imported modules, which is what a fresh interpreter is a few seconds later.

The child gets the caller's stdin, stdout and stderr (passed over a Unix socket), environment,
working directory and argv, then runs the module as ``__main__`` and exits through the normal
interpreter shutdown's visible part (threads joined, atexit, flushing). What it cannot share with a fresh interpreter, it resets:
``tempfile``'s cached folder and the ``random`` seed.

Examples:
    ``proc = spawn("tests.worker", [config], stdin=PIPE, stdout=PIPE)``: a :class:`Forked`, which
    answers ``poll``, ``wait``, ``kill`` and ``returncode`` as a ``subprocess.Popen`` does.
"""

from __future__ import annotations

import atexit
import faulthandler
import gc
import json
import os
import random
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
PRELOAD = ["torch", "ignite.engine", "ignite.handlers", "tracker_saver", "tracker_saver.registry.sqlite",
           "tracker_saver.storage.local", "tracker_saver.models", "tests.helpers"]  # fmt: skip
OPTIONAL = [
    "boto3",
    "tracker_saver.storage.s3",
    "mlflow",
    "tracker_saver.integrations.mlflow.registry",
    "tests.tcp_gate",
]


#: What a child that talks to ClearML imports (1.1 to 1.4 s of CPU a child measured): not in OPTIONAL,
#: because clearml reads CLEARML_OFFLINE_MODE and its like at import, so the plain server's
#: children, which set their own environment, import it themselves.
CLEARML = ("clearml", "clearml.backend_api.services", "tracker_saver.integrations.clearml.registry")


class Forked:
    """A process the server forked: the ``subprocess.Popen`` calls the tests make on it."""

    def __init__(self, conn: socket.socket, pid: int, stdin: IO[str] | None, stdout: IO[str] | None) -> None:
        self._conn, self.pid, self.stdin, self.stdout = conn, pid, stdin, stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._conn], [], [], 0)[0]:
            self._read_exit()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._conn], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(f"forked {self.pid}", timeout or 0)
            self._read_exit()
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _read_exit(self) -> None:
        line = _line(self._conn)
        self._conn.close()
        # No line: the server itself died; the child went with it (see _serve's parent check).
        exit = json.loads(line) if line else {"code": -9}
        self.returncode = int(exit["code"])
        with _lock:
            _forked_cpu[0] += float(exit.get("cpu", 0.0))


class _Server:
    def __init__(self, preload: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
        self.folder = tempfile.mkdtemp(prefix="fs-")  # under the session's TMPDIR: short enough for AF_UNIX
        self.path = os.path.join(self.folder, "s")
        self._err = tempfile.TemporaryFile(mode="w+")
        self.popen: subprocess.Popen[str] | Forked
        if preload:
            # A server that imports more (clearml) is forked from the plain one, which has imported
            # torch already: it starts in the environment of its first caller, which those modules
            # may read at their import.
            self.popen = spawn(
                "tests.forkserver",
                [self.path, *preload],
                env=env or dict(os.environ),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._err,
            )
        else:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "tests.forkserver", self.path], cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, text=True,
            )  # fmt: skip
        assert self.popen.stdout is not None
        if self.popen.stdout.readline().strip() != "ready":
            self._err.seek(0)
            raise RuntimeError(f"the fork server did not start:\n{self._err.read()[-3000:]}")

    def close(self) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.close()  # its end of file: it stops (its children stay theirs to finish)
        self.popen.wait(30)
        shutil.rmtree(self.folder, ignore_errors=True)  # pytest's TMPDIR clean-up may have come first


_servers: dict[tuple[str, ...], _Server] = {}  # by what each imported beyond PRELOAD and OPTIONAL
_lock = threading.Lock()
_preload_lock = threading.Lock()
_forked_cpu = [0.0]  # CPU seconds of the forked processes this process has seen exit


def forked_cpu() -> float:
    """CPU seconds (user + system) of the forked processes that exited so far, children included.

    The server reaps them, so neither ``RUSAGE_CHILDREN`` of this process nor its tests see it
    until the server exits; ``tests/conftest_cpu.py`` adds this to each test's figure.
    """
    with _lock:
        return _forked_cpu[0]


def spawn(
    module: str,
    args: list[str],
    *,
    env: dict[str, str],
    cwd: Path = ROOT,
    stdin: int | None = None,
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
    preload: tuple[str, ...] = (),
) -> Forked:
    """Run ``python -m module *args`` as a process forked from the server (started on first use).

    A ``module`` that ends in ``.py`` is a script's path (``python path/to/script.py *args``), and
    ``"-c"`` runs ``args[0]`` as code (``python -c CODE *args[1:]``).

    ``stdin``/``stdout`` may be ``subprocess.PIPE`` (then the :class:`Forked` has text pipes) or
    ``None`` (inherit this process's); ``stdout``/``stderr`` may also be an open file.
    ``preload`` names modules the child's server has imported too (:data:`CLEARML`): one more
    server, started by the first call that names them, in that call's ``env``.
    """
    with _lock:
        known = _servers.get(())
        if known is None:
            known = _servers[()] = _Server()
            atexit.register(known.close)
    if preload:
        with _preload_lock:  # not _lock: starting this server spawns from the plain one
            known = _servers.get(preload)
            if known is None:
                known = _servers[preload] = _Server(preload, env)
                atexit.register(known.close)  # runs before the plain server's close (registered first)
    path = known.path
    ours: list[int] = []  # the child's ends: sent, then closed here
    mine: dict[str, IO[str]] = {}
    fds = []
    for name, spec, default in (("stdin", stdin, 0), ("stdout", stdout, 1), ("stderr", stderr, 2)):
        if spec == subprocess.PIPE:
            read, write = os.pipe()
            child, parent = (read, write) if name == "stdin" else (write, read)
            mine[name] = open(parent, "w" if name == "stdin" else "r", encoding="utf-8")  # noqa: SIM115
            ours.append(child)
            fds.append(child)
        elif spec is None:
            fds.append(default)
        else:
            fds.append(spec if isinstance(spec, int) else spec.fileno())
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    request = {"module": module, "args": args, "env": env, "cwd": str(cwd)}
    socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], fds)
    for fd in ours:
        os.close(fd)
    pid = int(json.loads(_line(conn))["pid"])
    return Forked(conn, pid, mine.get("stdin"), mine.get("stdout"))


def _line(conn: socket.socket) -> str:
    """One JSON line, read unbuffered: the exit line may follow the pid line at once."""
    data = b""
    while not data.endswith(b"\n"):
        byte = conn.recv(1)
        if not byte:
            break
        data += byte
    return data.decode()


def run(
    module: str,
    args: list[str],
    *,
    env: dict[str, str],
    timeout: float,
    cwd: Path = ROOT,
    preload: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([python, -m, module, *args], capture_output=True, text=True, timeout=...)``, forked."""
    with tempfile.TemporaryFile(mode="w+") as out, tempfile.TemporaryFile(mode="w+") as err:
        proc = spawn(module, args, env=env, cwd=cwd, stdout=out, stderr=err, preload=preload)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess([module, *args], code, out.read(), err.read())


# -- the server ------------------------------------------------------------------------------
def _warm_up() -> None:
    """Import what a training's first optimizer step and ``torch.save`` import lazily.

    The first ``step()`` imports torch._dynamo (about 200 modules): 0.45 s of CPU that each forked
    training paid again. Its own tensors, no random numbers: a child's RNG is a fresh interpreter's.
    """
    import io

    import torch

    weight = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    (weight * 2).sum().backward()
    optimizer.step()
    torch.save({"weight": weight, "optimizer": optimizer.state_dict()}, io.BytesIO())


def _serve(path: str, preload: list[str]) -> None:
    for name in PRELOAD:
        __import__(name)
    for name in OPTIONAL:
        try:
            __import__(name)
        except ImportError:
            pass
    for name in preload:  # a server for one kind of child: its caller asked for these
        __import__(name)
    if not preload:  # a server forked from this one has it already
        _warm_up()
    gc.freeze()  # a child's collections skip what was imported here (and so never copy its pages)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    lock = threading.Lock()  # held while forking, so no child inherits it held by the reaper
    waiting: dict[int, socket.socket] = {}
    forked = threading.Semaphore(0)  # one release per fork: the reaper waits for a child to exist

    def reap() -> None:
        while True:
            forked.acquire()
            pid, status, usage = os.wait4(-1, 0)
            with lock:
                conn = waiting.pop(pid, None)
            if conn is not None:
                exit = {"code": os.waitstatus_to_exitcode(status), "cpu": usage.ru_utime + usage.ru_stime}
                try:
                    conn.sendall(json.dumps(exit).encode() + b"\n")
                except OSError:
                    pass  # the caller went away
                conn.close()

    threading.Thread(target=reap, daemon=True).start()
    print("ready", flush=True)
    stop = os.fdopen(os.dup(0))  # the tests' end of our stdin: closed (or its process died) -> stop
    while True:
        ready = select.select([listener, stop], [], [])[0]
        if stop in ready:
            return
        conn, _ = listener.accept()
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        request = json.loads(message)
        with lock:
            pid = os.fork()
            if pid == 0:
                listener.close()
                stop.close()
                _become(request, fds)  # never returns
            waiting[pid] = conn
        forked.release()
        for fd in fds:
            os.close(fd)
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """In the child: take the caller's files, environment, folder and argv; run the module; exit."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        if fd > 2:
            os.close(fd)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    target, args = request["module"], request["args"]
    # `python -c CODE`, `python path/to/script.py` or `python -m module`: what each puts first on sys.path
    script = target.endswith(".py")
    sys.path[0] = "" if target == "-c" else os.path.dirname(os.path.abspath(target)) if script else request["cwd"]
    tempfile.tempdir = None
    random.seed()
    if os.environ.get("PYTHONFAULTHANDLER"):  # what the interpreter's start would have done
        faulthandler.enable()
    sys.argv = ["-c", *args[1:]] if target == "-c" else [target, *args]
    code: Any = 0
    try:
        if target == "-c":
            exec(compile(args[0], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        elif script:
            runpy.run_path(target, run_name="__main__")
        else:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    os._exit(_shutdown(code))


def _shutdown(code: Any) -> int:
    """What the interpreter's exit does that anyone can see: non-daemon threads joined, atexit
    handlers run, what the run made freed (a SQLite connection closes, so its WAL files go, as at a
    fresh interpreter's exit), stdio flushed; the exit status as ``sys.exit(code)`` makes it.

    Not the rest of finalization: tearing down every module touches each of torch's objects, so
    a forked child would copy most of the server's memory page by page (2 s measured, against
    20 ms for everything before it). The collection sees only what the child made: the server
    froze everything it imported (``gc.freeze``) before it forked.
    """
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    gc.collect()  # the run's module is gone from sys.modules: its globals are garbage now
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            status = status or 120  # as the interpreter exits when it cannot flush stdout
    return status


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2:])
