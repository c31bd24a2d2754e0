"""What ``tracker-saver fsck`` costs, with and without ``--deep``, on a local folder and on S3.

A run of ``--streams`` streams, each holding ``--n-saved`` live checkpoints of ``--size-mib``
MiB, is written through the real saver once; then each variant is timed ``--repeats`` times,
interleaved:

* ``list``: the baseline, one paginated listing of the run's objects (what any check must read);
* ``fsck``: ``tracker_saver.fsck.check`` (sizes compared, nothing hashed);
* ``fsck --deep``: the same, re-hashing every live object (reads every byte).

S3 runs only when ``AWS_ENDPOINT_URL`` is set (``eval "$(scripts/ceph-s3.sh start)"``)::

    python benchmarks/bench_fsck.py --size-mib 64 --streams 4 --n-saved 2

Prints a table of median seconds and MB/s of checkpoint bytes covered, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from ignite.engine import Engine, Events  # noqa: E402
from ignite.handlers import Checkpoint  # noqa: E402

from tracker_saver import TrackerSaver  # noqa: E402
from tracker_saver.fsck import check  # noqa: E402
from tracker_saver.registry import open_registry  # noqa: E402
from tracker_saver.storage import open_storage  # noqa: E402


def fill(output_uri: str, registry: str, *, streams: int, n_saved: int, size_mib: int) -> int:
    """Train long enough that every stream holds ``n_saved`` checkpoints; return the live bytes."""
    state = {"w": torch.nn.Parameter(torch.zeros(size_mib * 1024 * 1024 // 4))}
    model = torch.nn.ParameterDict(state)
    saver = TrackerSaver(output_uri, project="bench", run="fsck", registry=registry)
    trainer = Engine(lambda engine, batch: None)
    for i in range(streams):
        trainer.add_event_handler(
            Events.EPOCH_COMPLETED, Checkpoint({"model": model}, saver, filename_prefix=f"s{i}", n_saved=n_saved)
        )
    trainer.run([0], max_epochs=n_saved)
    live = sum(r.size or 0 for r in saver.records(live=True))
    saver.close()
    return live


def timed(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=64)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--n-saved", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-fsck-")
    targets = {"local": os.path.join(work, "out")}
    if os.environ.get("AWS_ENDPOINT_URL"):
        import boto3

        bucket = f"bench-fsck-{uuid.uuid4().hex[:8]}"
        boto3.client("s3").create_bucket(Bucket=bucket)
        targets["s3"] = f"s3://{bucket}/ckpt"
    rows = []
    for backend, output_uri in targets.items():
        registry = os.path.join(work, f"{backend}.db")
        live = fill(output_uri, registry, streams=args.streams, n_saved=args.n_saved, size_mib=args.size_mib)
        storage, reg = open_storage(output_uri), open_registry(registry)
        assert check(reg, deep=True).problems == []
        variants = {
            "list": lambda storage=storage: storage.list("bench/fsck/"),
            "fsck": lambda reg=reg: check(reg),
            "fsck --deep": lambda reg=reg: check(reg, deep=True),
        }
        for name, fn in variants.items():
            seconds = timed(fn, args.repeats)
            rows.append({"backend": backend, "variant": name, "live_mb": live / 1e6, "seconds": seconds,
                         "mb_per_s": live / 1e6 / seconds})  # fmt: skip
        reg.close()
    print(f"{'backend':8} {'variant':12} {'live MB':>9} {'median s':>9} {'MB/s':>9}")
    for r in rows:
        print(f"{r['backend']:8} {r['variant']:12} {r['live_mb']:9.0f} {r['seconds']:9.3f} {r['mb_per_s']:9.0f}")
    print(json.dumps({"benchmark": "fsck", **vars(args), "rows": rows}))


if __name__ == "__main__":
    main()
