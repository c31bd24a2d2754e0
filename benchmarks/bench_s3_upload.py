"""Upload throughput of S3Storage against raw boto3, side by side in one run (Ceph RGW or any S3).

Variants, interleaved round by round (in a rotating order) so that the gateway's noise hits
all of them alike:

* ``boto3``: raw ``client.upload_file`` of a file with boto3's default TransferConfig, the baseline;
* ``put_file``: ``S3Storage.put_file`` of the same file (the saver's path for a file);
* ``streamed``: the saver's path for a checkpoint: ``torch.save(state_dict)`` into
  ``HashingWriter(storage.writer(key))`` with the state's ``StableMemory``, as the pipeline
  does, i.e. serialize + sha256 + upload until the commit (tensor storages sent uncopied);
* ``save+boto3``: what a user does with raw boto3 for a checkpoint: ``torch.save`` to a file,
  then ``upload_file``; the end-to-end baseline for ``streamed``;
* ``spooled``: the same through the base class's spooling writer (``stream_writes=False``),
  which serializes the whole checkpoint first and uploads it afterwards.

The file uploaded by ``boto3`` and ``put_file`` holds exactly the bytes ``torch.save`` writes
for that state dict, so every variant moves the same bytes.

Run against the gateway in the environment (``eval "$(scripts/ceph-s3.sh start)"``), or let it
start one with the script (needs root and radosgw; stopped again at the end)::

    python benchmarks/bench_s3_upload.py --sizes 64 512 --repeats 3

Prints a table of median MB/s (1 MB = 10^6 bytes) and ratios to ``boto3``, then one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import boto3  # noqa: E402
import torch  # noqa: E402
from botocore.config import Config  # noqa: E402

from tracker_saver.save.hashing import HashingWriter  # noqa: E402
from tracker_saver.save.memory import StableMemory  # noqa: E402
from tracker_saver.storage.s3 import S3Storage  # noqa: E402

MiB = 1024 * 1024
VARIANTS = ("boto3", "put_file", "save+boto3", "streamed", "spooled")


@contextlib.contextmanager
def gateway() -> Iterator[str]:
    """The endpoint from the environment, else one started with scripts/ceph-s3.sh (and stopped)."""
    if os.environ.get("AWS_ENDPOINT_URL"):
        yield os.environ["AWS_ENDPOINT_URL"]
        return
    script = ROOT / "scripts" / "ceph-s3.sh"
    result = subprocess.run(["bash", str(script), "start"], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"no AWS_ENDPOINT_URL and scripts/ceph-s3.sh start failed:\n{result.stderr}")
    started = "already running" not in result.stderr
    for line in result.stdout.splitlines():
        if line.startswith("export "):
            name, _, value = line[len("export ") :].partition("=")
            os.environ[name] = value
    try:
        yield os.environ["AWS_ENDPOINT_URL"]
    finally:
        if started:
            subprocess.run(["bash", str(script), "stop"], capture_output=True, check=False)


def state_dict_of(size: int) -> dict[str, torch.Tensor]:
    """A model-like state dict of about ``size`` bytes: 16 float32 tensors."""
    per = size // 16 // 4
    gen = torch.Generator().manual_seed(0)
    return {f"layer{i}.weight": torch.randn(per, generator=gen) for i in range(16)}


def timed(fn: Callable[[], int | None], default_bytes: int) -> tuple[float, int]:
    """Seconds ``fn`` took, and the bytes it moved (``default_bytes`` if it does not say)."""
    t0 = time.perf_counter()
    moved = fn()
    return time.perf_counter() - t0, moved or default_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 512], help="checkpoint sizes in MiB")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per size (median reported)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an S3Storage option, e.g. multipart_chunksize=8388608 (repeatable)",
    )
    parser.add_argument("--tmpdir", default=None, help="where the source file is written (default: system temp)")
    args = parser.parse_args()
    options: dict[str, Any] = {}
    for item in args.option:
        name, _, value = item.partition("=")
        options[name] = int(value) if value.isdigit() else value

    with gateway() as endpoint:
        client = boto3.client("s3", config=Config(s3={"addressing_style": "path"}))
        bucket = f"ts-bench-{uuid.uuid4().hex[:10]}"
        client.create_bucket(Bucket=bucket)
        streamed = S3Storage(f"s3://{bucket}/bench", progress=False, **options)
        spooled = S3Storage(f"s3://{bucket}/bench", progress=False, stream_writes=False, **options)
        streamed.check()
        results: dict[int, dict[str, list[float]]] = {}
        nbytes: dict[int, int] = {}
        try:
            with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp:
                for size_mib in args.sizes:
                    state = state_dict_of(size_mib * MiB)
                    src = Path(tmp) / f"ckpt-{size_mib}.pt"
                    torch.save(state, src)
                    n = nbytes[size_mib] = src.stat().st_size
                    runs: dict[str, Callable[[], int | None]] = {
                        "boto3": lambda src=src: client.upload_file(str(src), bucket, "raw/ckpt.pt"),
                        "put_file": lambda src=src: streamed.put_file("p/r/file.slot0.pt", src),
                        "save+boto3": lambda state=state, tmp=tmp: _save_then_upload(client, bucket, state, tmp),
                        "streamed": lambda state=state: _save(streamed, "p/r/streamed.slot0.pt", state),
                        "spooled": lambda state=state: _save(spooled, "p/r/spooled.slot0.pt", state),
                    }
                    results[size_mib] = {v: [] for v in args.variants}
                    for round_ in range(args.repeats):
                        # Rotate the order each round, so no variant always follows the same one
                        # (the gateway's garbage collection of overwritten objects runs in bursts).
                        shift = round_ % len(args.variants)
                        for variant in args.variants[shift:] + args.variants[:shift]:
                            seconds, moved = timed(runs[variant], n)
                            results[size_mib][variant].append(moved / seconds / 1e6)
                            print(
                                f"  {size_mib:>5} MiB  {variant:<9} {moved / seconds / 1e6:8.1f} MB/s", file=sys.stderr
                            )
                    src.unlink()
        finally:
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                for obj in page.get("Contents", []):
                    client.delete_object(Bucket=bucket, Key=obj["Key"])
            client.delete_bucket(Bucket=bucket)

    report: dict[str, Any] = {
        "endpoint": endpoint,
        "repeats": args.repeats,
        "cpus": os.cpu_count(),
        "settings": {
            "multipart_threshold": streamed.multipart_threshold,
            "multipart_chunksize": streamed.multipart_chunksize,
            "max_concurrency": streamed.max_concurrency,
            "writer_part_size": streamed.writer_part_size,
            "writer_concurrency": streamed.writer_concurrency,
            **options,
        },
        "sizes": {},
    }
    header = f"{'size':>8} " + "".join(f"{v + ' MB/s':>17}" for v in args.variants)
    header += "".join(f"{v + '/boto3':>18}" for v in args.variants if v != "boto3")
    print(header)
    for size_mib, per in results.items():
        medians = {v: statistics.median(per[v]) for v in args.variants}
        ratios = {v: medians[v] / medians["boto3"] for v in args.variants if v != "boto3" and "boto3" in medians}
        line = f"{size_mib:>5} MiB " + "".join(f"{medians[v]:>17.1f}" for v in args.variants)
        line += "".join(f"{ratios[v]:>18.2f}" for v in ratios)
        print(line)
        report["sizes"][str(size_mib)] = {
            "bytes": nbytes[size_mib],
            "median_MBps": {v: round(m, 1) for v, m in medians.items()},
            "runs_MBps": {v: [round(x, 1) for x in per[v]] for v in args.variants},
            "ratio_to_boto3": {v: round(r, 3) for v, r in ratios.items()},
        }
    print(json.dumps(report, separators=(",", ":")))


def _save_then_upload(client: Any, bucket: str, state: dict[str, torch.Tensor], tmp: str) -> int:
    """Raw boto3 for a checkpoint: serialize to a local file, then upload it."""
    path = Path(tmp) / "save-then-upload.pt"
    torch.save(state, path)
    client.upload_file(str(path), bucket, "raw/saved.pt")
    size = path.stat().st_size
    path.unlink()
    return size


def _save(storage: S3Storage, key: str, state: dict[str, torch.Tensor]) -> int:
    """What the pipeline does for one checkpoint: serialize, hash, write to the slot, stat.

    Returns the bytes written: torch.save into a stream that cannot seek (HashingWriter has no
    ``seek``) lays the zip out slightly differently than into a file (a few hundred bytes).
    """
    stable = StableMemory.of(state)
    with storage.writer(key, stable=stable) as target:
        hashing = HashingWriter(target, stable=stable)
        torch.save(state, hashing)  # type: ignore[arg-type]
    _ = hashing.sha256
    stat = storage.stat(key)
    assert stat is not None and stat.size == hashing.size
    return hashing.size


if __name__ == "__main__":
    main()
