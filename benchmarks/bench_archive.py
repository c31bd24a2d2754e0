"""What an archival keep (``keep_every``) costs per kept checkpoint, locally and on S3, sync and async.

For each backend (a local folder; S3 when ``AWS_ENDPOINT_URL`` is set) and each mode (sync,
``async_upload=True``), ``--saves`` epochs of a ``--size-mib`` MiB model go through a real Ignite
``Engine`` and ``Checkpoint`` (``n_saved=1``), once without an archive and once with
``keep_every="1 epoch"`` (every save kept). Timed, best of ``--repeats``:

* ``blocked``: seconds the training thread spent in the ``Checkpoint`` handler, per save;
* ``done``: seconds from the first save to every save (and keep) durable, per save.

The archive's cost per kept checkpoint is ``done`` with it minus ``done`` without it (on the
training thread, ``blocked`` minus ``blocked``). On S3 it also times what a keep does, a
server-side copy of the slot object (CopyObject), against what it avoids, uploading the same
bytes a second time, as medians. Prints a table, then one JSON line::

    python benchmarks/bench_archive.py --size-mib 16 --saves 6 --repeats 3
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from ignite.engine import Engine, Events  # noqa: E402
from ignite.handlers import Checkpoint  # noqa: E402

from tracker_saver import TrackerSaver, find_models  # noqa: E402
from tracker_saver.storage import open_storage  # noqa: E402


def run_once(
    output_uri: str, registry: str, *, size_mib: int, saves: int, archive: bool, async_upload: bool
) -> dict[str, float]:
    """One training of ``saves`` epochs; seconds per save blocked and until durable, and what was kept."""
    net = torch.nn.Linear(size_mib * 1024 * 1024 // 4 // 64, 64, bias=False)
    keep = {"keep_every": "1 epoch"} if archive else {}
    saver = TrackerSaver(output_uri, project="bench", run=uuid.uuid4().hex[:8], registry=registry,
                         async_upload=async_upload, lineage=False, **keep)  # fmt: skip
    trainer = Engine(lambda engine, batch: net.weight.data.add_(1.0))
    handler = Checkpoint({"model": net}, saver, n_saved=1)
    blocked: list[float] = []

    def timed(engine: Engine) -> None:
        start = time.perf_counter()
        handler(engine)
        blocked.append(time.perf_counter() - start)

    trainer.add_event_handler(Events.EPOCH_COMPLETED, timed)
    saver.attach(trainer)
    start = time.perf_counter()
    trainer.run([0], max_epochs=saves)
    saver.flush()
    done = time.perf_counter() - start
    kept = [r for r in find_models(project="bench", run=saver.run, states=["pinned"], registry=registry)]
    saver.close()
    if len(kept) != (saves if archive else 0):
        raise SystemExit(f"expected {saves if archive else 0} archive entries, found {len(kept)}")
    return {"blocked_s": sum(blocked) / saves, "done_s": done / saves}


def copy_vs_upload(output_uri: str, *, size_mib: int, repeats: int) -> dict[str, float]:
    """Seconds for a server-side copy of a ``size_mib`` object, and for uploading its bytes again (medians)."""
    storage = open_storage(output_uri)
    data = os.urandom(size_mib * 1024 * 1024)
    storage.put_stream("bench/src.bin", io.BytesIO(data))
    copies, uploads = [], []
    for i in range(repeats):
        start = time.perf_counter()
        storage.copy("bench/src.bin", f"bench/copy{i}.bin")
        copies.append(time.perf_counter() - start)
        start = time.perf_counter()
        storage.put_stream(f"bench/upload{i}.bin", io.BytesIO(data))
        uploads.append(time.perf_counter() - start)
    return {"server_copy_s": statistics.median(copies), "second_upload_s": statistics.median(uploads)}


def measure(output_uri: str, registry: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """One backend's rows: ``sync`` and ``async``, each without and with the archive (best of the repeats)."""
    rows: dict[str, dict[str, float]] = {}
    for mode in ("sync", "async"):
        best: dict[bool, dict[str, float]] = {}
        for _ in range(args.repeats):
            for archive in (False, True):
                got = run_once(output_uri, registry, size_mib=args.size_mib, saves=args.saves, archive=archive,
                               async_upload=mode == "async")  # fmt: skip
                if archive not in best or got["done_s"] < best[archive]["done_s"]:
                    best[archive] = got
        rows[mode] = {
            "blocked_s": best[False]["blocked_s"], "blocked_archive_s": best[True]["blocked_s"],
            "done_s": best[False]["done_s"], "done_archive_s": best[True]["done_s"],
            "cost_per_keep_s": best[True]["done_s"] - best[False]["done_s"],
        }  # fmt: skip
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=16)
    parser.add_argument("--saves", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tmpdir", help="where the local output and the registry go (default: a temp folder)")
    parser.add_argument("--s3-bucket", default=f"bench-archive-{uuid.uuid4().hex[:8]}")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, dict[str, float]]] = {}
    copies: dict[str, float] = {}
    with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp:
        work = Path(tmp)
        results["local"] = measure(str(work / "out"), str(work / "registry.db"), args)
        if os.environ.get("AWS_ENDPOINT_URL"):
            import boto3

            boto3.client("s3").create_bucket(Bucket=args.s3_bucket)
            results["s3"] = measure(f"s3://{args.s3_bucket}/bench", str(work / "registry.db"), args)
            copies = copy_vs_upload(f"s3://{args.s3_bucket}/raw", size_mib=args.size_mib, repeats=args.repeats)
    print(f"{args.size_mib} MiB, {args.saves} saves, every save kept; seconds per save, best of {args.repeats}")
    print(f"{'backend':8} {'mode':6} {'blocked':>9} {'+archive':>9} {'done':>9} {'+archive':>9} {'cost/keep':>10}")
    for backend, modes in results.items():
        for mode, r in modes.items():
            print(f"{backend:8} {mode:6} {r['blocked_s']:9.3f} {r['blocked_archive_s']:9.3f} {r['done_s']:9.3f} "
                  f"{r['done_archive_s']:9.3f} {r['cost_per_keep_s']:10.3f}")  # fmt: skip
    if copies:
        print(
            f"s3: server-side copy {copies['server_copy_s']:.3f} s, a second upload {copies['second_upload_s']:.3f} s"
        )
    print(json.dumps({"bench": "archive", **vars(args), "results": results, "s3_copy": copies}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
