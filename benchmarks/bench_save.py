"""Cost of one checkpoint save to the training loop, per saver, side by side in one run.

Each variant saves the same state dict (a ``torch.nn.Module`` of float32 CPU parameters
totalling ``SIZE`` MiB) through a real ``ignite.handlers.Checkpoint`` (``n_saved=1``), or with a
plain call for the two baselines:

* ``torch.save``: ``torch.save(model.state_dict(), path)``, a new local file: the reference (1);
* ``torch.save+fsync``: the same, then ``fsync`` of the file and of its folder (durable);
* ``torch.save+fsync overwrite``: the same over one file each time (a reused slot's like: the
  old file's blocks are freed too), in place, so a crash mid-save loses the previous checkpoint;
* ``torch.save+fsync replace``: ``torch.save`` to a temp file, its fsync, ``os.replace`` over one
  file, the folder's fsync: the least a save must do to never lose the previous checkpoint
  (DESIGN's invariants 2 and 6), so a reused slot's like for like;
* ``DiskSaver``: ignite's ``DiskSaver`` (atomic: temp file + ``os.replace``, no fsync);
* ``ClearMLSaver``: ignite's ``ClearMLSaver`` with the real clearml SDK, a task whose output_uri
  is a local folder, against the in-repo API stand-in (``tests/clearml_standin/``);
* ``sync-local`` / ``sync-s3``: ``TrackerSaver`` to a local folder / to ``s3://`` (needs
  ``AWS_ENDPOINT_URL``; skipped with a note otherwise), SQLite registry;
* ``async-local`` / ``async-s3``: the same with ``TrackerSaver(..., async_upload=True)``;
  reported as ``n/a (not built)`` while ``TrackerSaver`` has no ``async_upload`` argument.

Measured per save, on the calling (training) thread:

* ``first``: the first save of the process: a new file, or a run's first save (a new slot);
* ``blocked``: wall time of ``Checkpoint.__call__`` (or of the ``torch.save`` call), the median
  of the later saves (a reused slot);
* seconds by step of the pipeline, for the ``TrackerSaver`` variants (its DEBUG line after each
  save: open, pending, serialize, finish, hash, supersede, commit, live, view);
* ``sys``: the CPU the save's process spent in the kernel during a later save (the median):
  copying the bytes into the page cache and the file system's work. On a VM whose guest hands
  freed memory back to its host (virtio-balloon free page reporting, as on the test machines),
  pages freed seconds before cost a fault in the host when the page cache takes them again,
  which shows here, for every saver;
* ``durable``: time until the checkpoint is durable and registered: ``blocked`` plus the time of
  ``saver.flush()`` (async) or ``task.flush(wait_for_uploads=True)`` (ClearML uploads in the
  background); for the other sync variants, ``blocked``;
* ``extra RSS``: peak RSS during the save (until durable) minus RSS before it, over the state size.

Each (variant, size, round) runs in a fresh subprocess (``--one VARIANT SIZE``, one JSON line),
so one save's peak RSS is not hidden by another's high-water mark. In it: the saver is set up
and the model built; the heap is trimmed, the peak-RSS mark reset to the current RSS
(``/proc/self/clear_refs``) and ``ru_maxrss`` read; then ``--warmup`` saves (default none) are
made and settled, then the first measured save and ``--measure`` more (default 3), each after
``os.sync()`` and a pause (``--pause``, 0.5 s by default: an epoch apart, the previous checkpoint
is long written back); the first is reported apart, the median of the others is the run's
figure, and ``ru_maxrss`` is read again at the end. The warm-up counts towards the peak on
purpose: a buffer a saver keeps between saves is memory training cannot use. Before every
subprocess the parent runs ``os.sync()``, so no variant pays for the previous one's dirty pages.
Rounds are interleaved, the order rotating each round; medians are reported. ``--in-process``
(for smoke runs) measures every variant but ``ClearMLSaver`` in the parent instead: no fresh
interpreter each, so the peak-RSS figures then start from what the earlier ones left.

``--e2e`` adds the end-to-end overhead: a small MLP on synthetic data (``torch.randn``) trained
for ``--e2e-epochs`` epochs with a ``TrackerSaver`` save of model + optimizer every epoch
(``sync-local``, ``async-local``) against the same run without checkpointing (``none``), each
run in a fresh subprocess, interleaved; the async run's time includes its final ``flush()``.
``in saves %`` is the share of the run the training thread spent inside the saves (and the final
flush): the overhead measured directly, which the difference of two noisy runs cannot resolve.

Goals checked (from the async/speed issue; ``MISS`` marks a missed one):

* ``async-*``: blocked <= 0.35x ``torch.save``, blocked <= 0.3x ``ClearMLSaver``;
* ``sync-local``: later saves (a reused slot) <= 1.1x ``torch.save+fsync overwrite`` (the issue's
  goal) and <= 1.1x ``torch.save+fsync replace`` (the same goal against a save as crash-safe as
  ours), the first (a new slot) <= 1.3x ``torch.save+fsync``'s first; after every save its record
  is live, and the slot file and its folder were fsynced before ``Checkpoint.__call__`` returned
  (checked);
* every ``TrackerSaver`` variant: extra peak RSS <= 1.1x the state size;
* e2e ``async-local``: overhead <= 3.5 % (when each upload finishes within an epoch);
* S3 throughput (saver path >= 0.95x raw ``upload_file``) is ``benchmarks/bench_s3_upload.py``'s.

Run (S3 variants only with a gateway, e.g.
``eval "$(scripts/ceph-s3.sh start)"``)::

    python benchmarks/bench_save.py --sizes 64 256 1024 --rounds 3 --e2e
    python benchmarks/bench_save.py --sizes 8 --rounds 1          # smoke: every variant runs once
    python benchmarks/bench_save.py --sizes --e2e                 # the end-to-end part only

Prints a table of medians (to stdout; progress goes to stderr), then one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import inspect
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from ignite.engine import Engine, Events  # noqa: E402
from ignite.handlers import Checkpoint, DiskSaver  # noqa: E402
from ignite.handlers.checkpoint import BaseSaveHandler  # noqa: E402

from tracker_saver import TrackerSaver  # noqa: E402

MiB = 1024 * 1024
BASELINE, FSYNC, OVERWRITE, CLEARML = "torch.save", "torch.save+fsync", "torch.save+fsync overwrite", "ClearMLSaver"
REPLACE = "torch.save+fsync replace"
TORCH_SAVES = (BASELINE, FSYNC, OVERWRITE, REPLACE)
VARIANTS = (*TORCH_SAVES, "DiskSaver", CLEARML, "sync-local", "sync-s3", "async-local", "async-s3")
E2E_VARIANTS = ("none", "sync-local", "async-local")
#: Seconds between the sync before a measured save and the save (``--pause``).
PAUSE_S = 0.5
NOT_BUILT = "n/a (not built)"
#: The issues' goals: ratios of blocked time, extra RSS over state size, e2e overhead in %. A synchronous
#: local save compares like with like: a reused slot with an fsynced overwrite, a run's first save
#: (a new slot) with an fsynced new file.
GOAL_ASYNC_VS_SAVE, GOAL_ASYNC_VS_CLEARML, GOAL_RSS, GOAL_E2E = 0.35, 0.3, 1.1, 3.5
GOAL_REUSED_VS_OVERWRITE, GOAL_FIRST_VS_FSYNC = 1.1, 1.3


def async_built() -> bool:
    """Whether ``TrackerSaver`` takes ``async_upload`` yet (the async variants need it)."""
    return "async_upload" in inspect.signature(TrackerSaver).parameters


# ---------------------------------------------------------------------------------------------
# One measurement (runs in a fresh subprocess)
# ---------------------------------------------------------------------------------------------


class Blob(torch.nn.Module):
    """A model whose 16 float32 parameters total ``size`` bytes, filled in place (no temporaries)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        per = size // 16 // 4
        gen = torch.Generator().manual_seed(0)
        self.layers = torch.nn.ParameterList(
            torch.nn.Parameter(torch.empty(per).normal_(generator=gen)) for _ in range(16)
        )


@dataclass
class Run:
    """A variant set up for one process: ``save`` is timed as blocked, ``settle`` until durable."""

    save: Callable[[], None]
    settle: Callable[[], None]
    check: Callable[[], None]  # the last save really landed (no variant may silently skip)
    close: Callable[[], None]


def _nothing() -> None:
    pass


def checkpoint_caller(model: torch.nn.Module, handler: BaseSaveHandler) -> tuple[Callable[[], None], Checkpoint]:
    """A function that runs ``Checkpoint.__call__`` for the next iteration, as a trainer would."""
    engine = Engine(lambda engine, batch: None)
    checkpoint = Checkpoint({"model": model}, handler, n_saved=1)

    def save() -> None:
        engine.state.iteration += 1  # Checkpoint's default priority and global step
        checkpoint(engine)

    return save, checkpoint


def last_filename(checkpoint: Checkpoint) -> str:
    """The filename of ``checkpoint``'s latest save (``last_checkpoint`` is ``dirname / filename``)."""
    return Path(str(checkpoint.last_checkpoint)).name


def variant_torch_save(model: torch.nn.Module, work: Path, variant: str) -> Run:
    """``torch.save`` to a new local file per save, or over one file (in place, or through a temp file
    and ``os.replace``); every variant but ``torch.save`` made durable with fsync."""
    paths: list[Path] = []
    fsync = variant != BASELINE

    def save() -> None:
        path = work / ("model.pt" if variant in (OVERWRITE, REPLACE) else f"model_{len(paths) + 1}.pt")
        written = path.with_name(path.name + ".tmp") if variant == REPLACE else path
        torch.save(model.state_dict(), written)
        if fsync:
            fd = os.open(written, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            if written != path:
                os.replace(written, path)
            folder = os.open(work, os.O_RDONLY)
            try:
                os.fsync(folder)  # the new name is durable only once its folder is
            finally:
                os.close(folder)
        paths.append(path)

    def check() -> None:
        assert paths[-1].stat().st_size > 0, paths[-1]

    return Run(save, _nothing, check, _nothing)


def variant_disk_saver(model: torch.nn.Module, work: Path) -> Run:
    """ignite's ``DiskSaver`` with its defaults (atomic)."""
    out = work / "disk"
    save, checkpoint = checkpoint_caller(model, DiskSaver(str(out), require_empty=False))

    def check() -> None:
        assert (out / last_filename(checkpoint)).stat().st_size > 0

    return Run(save, _nothing, check, _nothing)


def variant_clearml(model: torch.nn.Module, work: Path, name: str) -> Run:
    """ignite's ``ClearMLSaver`` in a task whose output_uri is a local folder (the SDK uploads there)."""
    from ignite.handlers.clearml_logger import ClearMLSaver

    from tests.conftest_clearml import init_task

    out = work / "clearml-output"
    out.mkdir()
    # ClearMLSaver uploads nothing unless ClearML's torch binding is on (auto_connect_frameworks).
    task = init_task("tracker_saver-bench", name, output_uri=str(out), auto_connect_frameworks=True)
    save, _ = checkpoint_caller(model, ClearMLSaver(dirname=str(work / "clearml-tmp")))

    def settle() -> None:
        task.flush(wait_for_uploads=True)

    def check() -> None:
        assert any(p.is_file() and p.stat().st_size > 0 for p in out.rglob("*.pt")), f"nothing uploaded to {out}"

    return Run(save, settle, check, task.close)


def variant_tracker(model: torch.nn.Module, work: Path, uri: str, name: str, *, async_upload: bool) -> Run:
    """``TrackerSaver`` to ``uri`` with a SQLite registry in ``work``; async mode when asked."""
    extra: dict[str, Any] = {"async_upload": True} if async_upload else {}
    saver = TrackerSaver(uri, project="bench", run=name, registry=str(work / "registry.db"), **extra)
    save, checkpoint = checkpoint_caller(model, saver)

    def check() -> None:
        live = [r.name for r in saver.records(live=True)]
        assert live == [last_filename(checkpoint)], live
        if not async_upload and saver.storage.local_root is not None:  # returned: the file and its folder synced
            folder = str((saver.storage.local_root / "bench" / name).resolve())
            assert folder in FSYNCED and any(p.startswith(folder + "/") for p in FSYNCED), (folder, FSYNCED)
        FSYNCED.clear()

    return Run(save, saver.flush if async_upload else _nothing, check, saver.close)


def make_run(variant: str, model: torch.nn.Module, work: Path, bucket: str | None) -> Run:
    """Set up ``variant`` in ``work`` (S3 variants write to ``bucket``)."""
    name = f"{variant}-{uuid.uuid4().hex[:8]}"
    if variant in TORCH_SAVES:
        return variant_torch_save(model, work, variant)
    if variant == "DiskSaver":
        return variant_disk_saver(model, work)
    if variant == CLEARML:
        return variant_clearml(model, work, name)
    mode, _, where = variant.partition("-")
    if where == "s3":
        if not bucket:
            raise SystemExit(f"{variant} needs --bucket (and AWS_ENDPOINT_URL)")
        uri = f"s3://{bucket}/bench"
    else:
        uri = str(work / "out")
    return variant_tracker(model, work, uri, name, async_upload=mode == "async")


#: Real paths the child fsynced since the last check (sync-local checks its save was durable).
FSYNCED: list[str] = []
#: Each TrackerSaver save's seconds by pipeline step, from its DEBUG line (``SaveClock.laps``).
steps: list[dict[str, float]] = []


def watch_durability_and_steps() -> None:
    """In the child: note every fsync's path, and each save's steps from the pipeline's DEBUG line."""
    import logging

    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        with contextlib.suppress(OSError):
            FSYNCED.append(os.path.realpath(f"/proc/self/fd/{fd}"))

    os.fsync = fsync  # type: ignore[assignment]

    class Steps(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.msg.startswith("saved ") and isinstance(record.args, tuple) and len(record.args) == 2:
                steps.append(dict(record.args[1]))  # type: ignore[call-overload]

    logger = logging.getLogger("tracker_saver.save.pipeline")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Steps())


def peak_rss_bytes() -> int:
    """The process's peak RSS so far (``ru_maxrss`` is in KiB on Linux)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss() -> bool:
    """Lower the peak-RSS mark to the current RSS (Linux >= 4.0); False where not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def trim_heap() -> None:
    """Give freed heap memory back to the OS, so no save can reuse what set-up freed unseen."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def measure_one(
    variant: str, size_mib: int, work: Path, bucket: str | None, warmup: int, measure: int, pause: float = PAUSE_S
) -> dict[str, Any]:
    """``measure`` saves of ``variant`` at ``size_mib``: median blocked and durable seconds, the kernel's
    CPU during them, extra peak RSS."""
    import gc
    import resource

    model = Blob(size_mib * MiB)
    state_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    run = make_run(variant, model, work, bucket)
    try:
        gc.collect()
        trim_heap()
        # Set-up (imports, Task.init, clients) may have peaked above today's RSS: start the mark
        # here. The warm-up counts: a buffer a saver keeps between saves is part of its cost.
        reset = reset_peak_rss()
        before = peak_rss_bytes()
        for _ in range(warmup):
            run.save()
            run.settle()
        # In training the previous checkpoint was written back long before the next save (an
        # epoch apart); without this, savers that keep it (torch.save to a new file) would pay for
        # its writeback and savers that delete it first (DiskSaver's remove) would not.
        blocked, durable, kernel = [], [], []
        steps.clear()
        for _ in range(measure + 1):  # the first: a new file, or a run's first save (a new slot)
            os.sync()
            time.sleep(pause)  # a moment for writeback the sync started (an epoch apart in training)
            sys0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
            t0 = time.perf_counter()
            run.save()
            t1 = time.perf_counter()
            kernel.append(resource.getrusage(resource.RUSAGE_SELF).ru_stime - sys0)  # every thread's, in the kernel
            run.settle()
            blocked.append(t1 - t0)
            durable.append(time.perf_counter() - t0)
            run.check()  # every save: its record is live (and, synchronous and local, durable) when it returns
        after = peak_rss_bytes()
    finally:
        run.close()
    return {
        "variant": variant,
        "size_mib": size_mib,
        "state_bytes": state_bytes,
        "first_s": blocked[0],
        "blocked_s": statistics.median(blocked[1:]),
        "durable_s": statistics.median(durable[1:]),
        "sys_s": statistics.median(kernel[1:]),
        "blocked_all_s": blocked,
        "sys_all_s": kernel,
        "first_steps_s": steps[0] if steps else None,
        "steps_s": {k: statistics.median(s[k] for s in steps[1:]) for k in steps[-1]} if len(steps) > 1 else None,
        "extra_rss_x": (after - before) / state_bytes,
        "rss_before_mib": before / MiB,
        "peak_reset": reset,  # False: "before" is a high-water mark that may include set-up's peak
    }


# ---------------------------------------------------------------------------------------------
# End to end (runs in a fresh subprocess)
# ---------------------------------------------------------------------------------------------


def e2e_one(variant: str, work: Path, epochs: int, samples: int, hidden: int) -> dict[str, Any]:
    """Train a small MLP for ``epochs``; with a TrackerSaver save of model + optimizer every epoch."""
    from ignite.engine import create_supervised_trainer
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    features, classes = 256, 10
    data = TensorDataset(torch.randn(samples, features), torch.randint(0, classes, (samples,)))
    loader = DataLoader(data, batch_size=256, shuffle=True)
    net = torch.nn.Sequential(
        torch.nn.Linear(features, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, classes),
    )
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    trainer = create_supervised_trainer(net, opt, torch.nn.CrossEntropyLoss())
    saver: TrackerSaver | None = None
    in_saves: list[float] = []  # seconds the training thread spent in each save
    if variant != "none":
        extra: dict[str, Any] = {"async_upload": True} if variant.startswith("async") else {}
        saver = TrackerSaver(
            str(work / "out"), project="bench", run=f"e2e-{variant}", registry=str(work / "registry.db"), **extra
        )
        checkpoint = Checkpoint({"model": net, "optimizer": opt}, saver)

        @trainer.on(Events.EPOCH_COMPLETED)
        def save(engine: Engine) -> None:
            start = time.perf_counter()
            checkpoint(engine)
            in_saves.append(time.perf_counter() - start)

    t0 = time.perf_counter()
    trainer.run(loader, max_epochs=epochs)
    t1 = time.perf_counter()
    if saver is not None:
        saver.flush()  # the run is over only once its last checkpoint is durable
    t2 = time.perf_counter()
    ckpt_bytes = 0
    if saver is not None:
        live = saver.records(live=True)
        assert len(live) == 1 and live[0].name.endswith(f"_{trainer.state.iteration}.pt"), live
        ckpt_bytes = live[0].size or 0
        saver.close()
    return {
        "variant": variant,
        "seconds": t2 - t0,
        "final_flush_s": t2 - t1,
        "ckpt_bytes": ckpt_bytes,
        # The part of the run the training thread spent saving: the overhead measured directly,
        # free of the run-to-run noise that the difference of two runs carries.
        "in_saves_pct": (sum(in_saves) + t2 - t1) / (t2 - t0) * 100,
    }


# ---------------------------------------------------------------------------------------------
# The parent: set-up, interleaved rounds, table, JSON
# ---------------------------------------------------------------------------------------------


def machine(folder: Path) -> dict[str, Any]:
    """What the numbers were taken on: CPUs, RAM, and the filesystem under the local variants."""
    cpu = next((line.split(":", 1)[1].strip() for line in _lines("/proc/cpuinfo") if line.startswith("model name")), "")
    mem_kib = next((int(line.split()[1]) for line in _lines("/proc/meminfo") if line.startswith("MemTotal:")), 0)
    mounts = [line.split() for line in _lines("/proc/self/mounts")]
    resolved = str(folder.resolve())
    best = max(
        (m for m in mounts if resolved == m[1] or resolved.startswith(m[1].rstrip("/") + "/")),
        key=lambda m: len(m[1]),
        default=["?", "?", "?"],
    )
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu or platform.processor(),
        "mem_gib": round(mem_kib / MiB, 1),
        "local_folder": resolved,
        "local_fs": f"{best[2]} ({best[0]} on {best[1]})",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "s3_endpoint": os.environ.get("AWS_ENDPOINT_URL"),
    }


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


@contextlib.contextmanager
def clearml_env(work: Path) -> Iterator[dict[str, str]]:
    """The ClearML stand-in on 127.0.0.1, and the env that points the SDK at it (config in ``work``)."""
    from tests.clearml_standin import ACCESS_KEY, SECRET_KEY, ClearMLStandIn
    from tests.conftest_clearml import clearml_config_text

    home, cache = work / "home", work / "cache"
    home.mkdir(parents=True)
    cache.mkdir()
    config = work / "clearml.conf"
    config.write_text(clearml_config_text(cache))  # no reporter subprocess, short retries
    server = ClearMLStandIn().start()
    env = {
        "CLEARML_API_HOST": server.api_host,
        "CLEARML_WEB_HOST": server.api_host,
        "CLEARML_FILES_HOST": server.api_host,
        "CLEARML_API_ACCESS_KEY": ACCESS_KEY,
        "CLEARML_API_SECRET_KEY": SECRET_KEY,
        "CLEARML_CONFIG_FILE": str(config),
        "CLEARML_CACHE_DIR": str(cache),
        "CLEARML_SUPPRESS_UPDATE_MESSAGE": "1",
        "CLEARML_DISABLE_VAULT_SUPPORT": "1",
        "CLEARML_LOG_ENVIRONMENT": "",
        "HOME": str(home),  # the SDK never touches the user's ~
    }
    try:
        yield env
    finally:
        server.stop()


@contextlib.contextmanager
def s3_bucket() -> Iterator[str]:
    """A fresh bucket at ``AWS_ENDPOINT_URL``, emptied and deleted afterwards."""
    import boto3
    from botocore.config import Config

    client = boto3.client("s3", config=Config(s3={"addressing_style": "path"}))
    bucket = f"ts-bench-save-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=bucket)
    try:
        yield bucket
    finally:
        try:
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                for obj in page.get("Contents", []):
                    client.delete_object(Bucket=bucket, Key=obj["Key"])
            for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket):
                for up in page.get("Uploads", []):
                    client.abort_multipart_upload(Bucket=bucket, Key=up["Key"], UploadId=up["UploadId"])
            client.delete_bucket(Bucket=bucket)
        except Exception as exc:  # the gateway may be down by now: keep the results, name the leftover
            print(f"note: could not delete bucket {bucket!r}: {exc}", file=sys.stderr)


def child(args: list[str], work: Path, env: dict[str, str] | None, timeout: float) -> dict[str, Any]:
    """Run this script with ``args`` in a fresh process; its last JSON line, or ``{"error": ...}``."""
    work.mkdir(parents=True)
    os.sync()  # the previous variant's dirty pages are written back before this one starts
    cmd = [sys.executable, str(Path(__file__).resolve()), *args, "--workdir", str(work)]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}, check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for line in reversed(proc.stdout.splitlines()):  # ClearML may print to stdout too
        if line.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):
                return dict(json.loads(line))
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
    return {"error": f"exit {proc.returncode}: " + "\n".join(tail)}


def measure_here(variant: str, size: int, work: Path, bucket: str | None, args: argparse.Namespace) -> dict[str, Any]:
    """``measure_one`` in this process (``--in-process``); a failure as ``{"error": ...}``, as :func:`child`'s."""
    work.mkdir(parents=True)
    os.sync()
    try:
        return measure_one(variant, size, work, bucket, args.warmup, args.measure, args.pause)
    except Exception as exc:  # shown in the table like a failed child's, the other variants still run
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def rotated(items: list[str], shift: int) -> list[str]:
    """``items`` rotated by ``shift``, so no variant always follows the same one."""
    shift %= max(len(items), 1)
    return items[shift:] + items[:shift]


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def goals(variant: str, row: dict[str, Any], refs: dict[str, float | None]) -> dict[str, bool | None]:
    """The issue's goals that apply to ``variant``: name -> met (None: the reference is missing)."""
    checks: dict[str, tuple[float | None, float]] = {}
    if variant.startswith("async"):
        checks[f"blocked<={GOAL_ASYNC_VS_SAVE}x {BASELINE}"] = (
            ratio(row["blocked_s"], refs[BASELINE]),
            GOAL_ASYNC_VS_SAVE,
        )
        checks[f"blocked<={GOAL_ASYNC_VS_CLEARML}x {CLEARML}"] = (
            ratio(row["blocked_s"], refs[CLEARML]),
            GOAL_ASYNC_VS_CLEARML,
        )
    if variant == "sync-local":
        checks[f"reused<={GOAL_REUSED_VS_OVERWRITE}x {OVERWRITE}"] = (
            ratio(row["blocked_s"], refs[OVERWRITE]),
            GOAL_REUSED_VS_OVERWRITE,
        )
        checks[f"reused<={GOAL_REUSED_VS_OVERWRITE}x {REPLACE}"] = (
            ratio(row["blocked_s"], refs[REPLACE]),
            GOAL_REUSED_VS_OVERWRITE,
        )
        checks[f"first<={GOAL_FIRST_VS_FSYNC}x {FSYNC}"] = (ratio(row["first_s"], refs["first"]), GOAL_FIRST_VS_FSYNC)
    if variant.startswith(("sync", "async")):
        checks[f"RSS<={GOAL_RSS}x"] = (row["extra_rss_x"], GOAL_RSS)
    return {name: (None if value is None else value <= limit) for name, (value, limit) in checks.items()}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of one (variant, size)'s runs that succeeded; the failures are kept and shown."""
    ok = [r for r in runs if "error" not in r]
    failed = [r["error"] for r in runs if "error" in r]
    if not ok:
        return {"error": failed[0], "failed": failed}
    rss = [r["extra_rss_x"] for r in ok if r["extra_rss_x"] is not None]
    steady = [r["steps_s"] for r in ok if r.get("steps_s")]
    first = [r["first_steps_s"] for r in ok if r.get("first_steps_s")]
    return {
        "first_s": statistics.median(r["first_s"] for r in ok),
        "blocked_s": statistics.median(r["blocked_s"] for r in ok),
        "durable_s": statistics.median(r["durable_s"] for r in ok),
        "sys_s": statistics.median(r["sys_s"] for r in ok),
        "steps_s": {k: statistics.median(s[k] for s in steady) for k in steady[0]} if steady else None,
        "first_steps_s": {k: statistics.median(s[k] for s in first) for k in first[0]} if first else None,
        "extra_rss_x": statistics.median(rss) if rss else None,
        "state_bytes": ok[0]["state_bytes"],
        "runs": [
            {
                k: r[k]
                for k in ("first_s", "blocked_s", "durable_s", "sys_s", "extra_rss_x", "rss_before_mib", "peak_reset")
            }
            for r in ok
        ],
        "failed": failed,  # e.g. the gateway was restarted mid-run: one line each, never hidden
    }


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _goal_text(met: dict[str, bool | None], failed: list[str], n_ok: int) -> str:
    """``name ok|MISS|?`` per goal, and how many runs failed if any did."""
    parts = [f"{name} {'?' if ok is None else 'ok' if ok else 'MISS'}" for name, ok in met.items()]
    text = "; ".join(parts)
    return f"{text} ({len(failed)} of {len(failed) + n_ok} runs failed)".strip() if failed else text


def print_table(results: dict[int, dict[str, dict[str, Any]]]) -> None:
    """One line per (size, variant): medians of the first and later saves, the ratio to torch.save, the goals;
    then each TrackerSaver variant's seconds by pipeline step (first save, later saves)."""
    print(
        f"{'variant':<27} {'MiB':>5} {'first s':>8} {'blocked s':>10} {'/torch.save':>12} {'durable s':>10} "
        f"{'sys s':>6} {'RSS/state':>10}  goals"
    )
    for size, per in results.items():
        for variant, row in per.items():
            if "status" in row or "error" in row:
                text = row.get("status") or "error: " + row["error"].splitlines()[-1]
                print(f"{variant:<27} {size:>5} {text}")
                continue
            goals_text = _goal_text(row["goals"], row["failed"], len(row["runs"]))
            print(
                f"{variant:<27} {size:>5} {row['first_s']:>8.3f} {row['blocked_s']:>10.3f} "
                f"{_fmt(row['blocked_vs_torch_save'], '.2f'):>12} {row['durable_s']:>10.3f} "
                f"{row['sys_s']:>6.3f} {_fmt(row['extra_rss_x'], '.2f'):>10}  {goals_text}"
            )
    print("\nseconds by step of the pipeline (first save | median of later saves):")
    for size, per in results.items():
        for variant, row in per.items():
            if row.get("steps_s") and row.get("first_steps_s"):
                cells = [f"{k} {row['first_steps_s'].get(k, 0):.3f}|{v:.3f}" for k, v in row["steps_s"].items()]
                print(f"  {variant:<13} {size:>5}  {'  '.join(cells)}")


def run_saves(args: argparse.Namespace, variants: list[str], work: Path) -> dict[int, dict[str, dict[str, Any]]]:
    """Every (round, size, variant) in a fresh process, interleaved; medians per (size, variant)."""
    runnable = [v for v in variants if not (v.startswith("async") and not async_built())]
    raw: dict[int, dict[str, list[dict[str, Any]]]] = {s: {v: [] for v in runnable} for s in args.sizes}
    with contextlib.ExitStack() as stack:
        env = stack.enter_context(clearml_env(work / "clearml")) if CLEARML in runnable else {}
        bucket = stack.enter_context(s3_bucket()) if any(v.endswith("-s3") for v in runnable) else None
        for round_ in range(args.rounds):
            for size in args.sizes:
                for variant in rotated(runnable, round_):
                    one = ["--one", variant, str(size), "--warmup", str(args.warmup), "--measure", str(args.measure)]
                    one += ["--pause", str(args.pause)]
                    if bucket and variant.endswith("-s3"):
                        one += ["--bucket", bucket]
                    tag = f"r{round_}-{size}-{variant.replace('+', '_').replace('.', '_')}"
                    if args.in_process and variant != CLEARML:  # its Task is the child's: always a fresh process
                        result = measure_here(variant, size, work / tag, bucket, args)
                    else:
                        result = child(one, work / tag, env if variant == CLEARML else None, args.timeout)
                    raw[size][variant].append(result)
                    shown = result.get("error", "").splitlines()[-1:] or [
                        f"blocked {result['blocked_s']:.3f} s (sys {result['sys_s']:.3f}), durable {result['durable_s']:.3f} s, "
                        f"RSS {_fmt(result['extra_rss_x'], '.2f')}x"
                    ]
                    print(f"  round {round_} {size:>5} MiB {variant:<17} {shown[0]}", file=sys.stderr)
    results: dict[int, dict[str, dict[str, Any]]] = {}
    for size in args.sizes:
        per: dict[str, dict[str, Any]] = {}
        for variant in variants:
            per[variant] = summarize(raw[size][variant]) if variant in runnable else {"status": NOT_BUILT}
        refs = {
            ref: per[ref]["blocked_s"] if ref in per and "blocked_s" in per[ref] else None
            for ref in (*TORCH_SAVES, CLEARML)
        }
        refs["first"] = per[FSYNC]["first_s"] if FSYNC in per and "first_s" in per[FSYNC] else None
        for variant, row in per.items():
            if "blocked_s" in row:
                row["blocked_vs_torch_save"] = ratio(row["blocked_s"], refs[BASELINE])
                row["goals"] = goals(variant, row, refs)
        results[size] = per
    return results


def run_e2e(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The e2e runs, interleaved; median seconds and overhead over ``none`` per variant."""
    runnable = [v for v in E2E_VARIANTS if not (v.startswith("async") and not async_built())]
    raw: dict[str, list[dict[str, Any]]] = {v: [] for v in runnable}
    for round_ in range(args.rounds):
        for variant in rotated(runnable, round_):
            one = ["--one-e2e", variant, "--e2e-epochs", str(args.e2e_epochs)]
            one += ["--e2e-samples", str(args.e2e_samples), "--e2e-hidden", str(args.e2e_hidden)]
            result = child(one, work / f"e2e-r{round_}-{variant}", None, args.timeout)
            raw[variant].append(result)
            shown = result.get("error", "").splitlines()[-1:] or [f"{result['seconds']:.2f} s"]
            print(f"  e2e round {round_} {variant:<12} {shown[0]}", file=sys.stderr)
    ok = {v: [r for r in runs if "error" not in r] for v, runs in raw.items()}
    base = statistics.median(r["seconds"] for r in ok["none"]) if ok.get("none") else None
    report: dict[str, Any] = {
        "epochs": args.e2e_epochs,
        "samples": args.e2e_samples,
        "hidden": args.e2e_hidden,
        "epoch_s": base / args.e2e_epochs if base else None,  # without checkpointing: what an upload must fit in
        "variants": {},
    }
    for variant in E2E_VARIANTS:
        failed = [r["error"] for r in raw.get(variant, []) if "error" in r]
        if variant not in raw:
            report["variants"][variant] = {"status": NOT_BUILT}
            continue
        if not ok[variant]:
            report["variants"][variant] = {"error": failed[0], "failed": failed}
            continue
        runs = ok[variant]
        seconds = statistics.median(r["seconds"] for r in runs)
        overhead = (seconds / base - 1) * 100 if base else None
        row: dict[str, Any] = {
            "seconds": seconds,
            "overhead_pct": overhead,
            "final_flush_s": statistics.median(r["final_flush_s"] for r in runs),
            "in_saves_pct": statistics.median(r["in_saves_pct"] for r in runs),
            "ckpt_bytes": runs[0]["ckpt_bytes"],
            "runs_s": [r["seconds"] for r in runs],
            "failed": failed,
            "goals": {},
        }
        if variant.startswith("async"):
            row["goals"] = {
                f"overhead<={GOAL_E2E}%": None if overhead is None else overhead <= GOAL_E2E,
                f"in saves<={GOAL_E2E}%": row["in_saves_pct"] <= GOAL_E2E,
            }
        report["variants"][variant] = row
    print_e2e(report)
    return report


def print_e2e(report: dict[str, Any]) -> None:
    """The e2e table: median run time, overhead over ``none``, and the goal."""
    print(f"\nend to end: {report['epochs']} epochs of {_fmt(report['epoch_s'], '.2f')} s, a save every epoch")
    print(
        f"{'variant':<12} {'median s':>9} {'overhead %':>11} {'in saves %':>11} {'ckpt MiB':>9} "
        f"{'final flush s':>14}  goals"
    )
    for variant, row in report["variants"].items():
        if "seconds" not in row:
            print(f"{variant:<12} {row.get('status') or 'error: ' + row['error'].splitlines()[-1]}")
            continue
        goals_text = _goal_text(row["goals"], row["failed"], len(row["runs_s"]))
        print(
            f"{variant:<12} {row['seconds']:>9.2f} {_fmt(row['overhead_pct'], '.1f'):>11} "
            f"{_fmt(row.get('in_saves_pct'), '.2f'):>11} {row['ckpt_bytes'] / MiB:>9.1f} "
            f"{row['final_flush_s']:>14.3f}  {goals_text}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[64, 256, 1024], help="state sizes in MiB")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median reported)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--warmup", type=int, default=0, help="saves made and settled before the measured ones")
    parser.add_argument(
        "--measure", type=int, default=3, help="saves after the first, per process (their median: the steady cost)"
    )
    parser.add_argument(
        "--pause", type=float, default=PAUSE_S, help="seconds between the sync before each measured save and the save"
    )
    parser.add_argument("--tmpdir", default=None, help="folder for the local variants (default: system temp)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one subprocess may take")
    parser.add_argument(
        "--in-process", action="store_true", help="smoke runs: measure in this process, not a fresh one each"
    )
    parser.add_argument("--e2e", action="store_true", help="also measure the end-to-end training overhead")
    parser.add_argument("--e2e-epochs", type=int, default=5)
    parser.add_argument("--e2e-samples", type=int, default=32768, help="synthetic samples per epoch (batch 256)")
    parser.add_argument("--e2e-hidden", type=int, default=1024, help="hidden width of the MLP (2 hidden layers)")
    # The subprocess modes (internal).
    parser.add_argument("--one", nargs=2, metavar=("VARIANT", "SIZE"), help=argparse.SUPPRESS)
    parser.add_argument("--one-e2e", metavar="VARIANT", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--bucket", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.one:
        watch_durability_and_steps()
        one = args.one
        result = measure_one(
            one[0], int(one[1]), Path(args.workdir), args.bucket, args.warmup, args.measure, args.pause
        )
        print(json.dumps(result))
        return
    if args.one_e2e:
        work = Path(args.workdir)
        print(json.dumps(e2e_one(args.one_e2e, work, args.e2e_epochs, args.e2e_samples, args.e2e_hidden)))
        return

    variants = list(dict.fromkeys(args.variants))
    skipped: dict[str, str] = {}
    if not os.environ.get("AWS_ENDPOINT_URL"):
        for v in [v for v in variants if v.endswith("-s3")]:
            skipped[v] = "no AWS_ENDPOINT_URL"
            variants.remove(v)
    if skipped:
        print(f"note: skipping {', '.join(skipped)}: AWS_ENDPOINT_URL is not set", file=sys.stderr)
    if not async_built():
        print(f"note: TrackerSaver has no async_upload yet: async variants are {NOT_BUILT}", file=sys.stderr)

    if args.in_process:
        watch_durability_and_steps()
    work = Path(tempfile.mkdtemp(prefix="bench-save-", dir=args.tmpdir))
    try:
        report: dict[str, Any] = {
            "benchmark": "save",
            "command": " ".join(["python", "benchmarks/bench_save.py", *sys.argv[1:]]),
            "rounds": args.rounds,
            "warmup": args.warmup,
            "measure": args.measure,
            "pause_s": args.pause,
            "in_process": args.in_process,
            "machine": machine(work),
            "skipped": skipped,
            "results": {},
        }
        if args.sizes:
            results = run_saves(args, variants, work)
            print_table(results)
            report["results"] = {str(size): per for size, per in results.items()}
        if args.e2e:
            report["e2e"] = run_e2e(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report, separators=(",", ":")))


if __name__ == "__main__":
    main()
