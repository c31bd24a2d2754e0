"""What sharing a bucket costs: a stream's owner claim, and plain fsck per object, locally and on S3.

Issue 41 records each stream's owner at output_uri and each object's fingerprint at commit.
Per backend (a local folder; S3 when ``AWS_ENDPOINT_URL`` is set), timed as medians:

* ``claim, new stream``: :func:`~tracker_saver.save.ownership.ensure_owner` on a stream nobody
  owns yet (read the owner object, list the stream's objects, the atomic create, read it back),
  paid once per stream, at its first save;
* ``check, owned stream``: :func:`~tracker_saver.save.ownership.owned` (one read), paid once per
  stream by each saver that opens it;
* ``fsck``, ``fsck --deep``: :func:`tracker_saver.fsck.check` over ``--streams`` streams of
  ``--n-saved`` objects of ``--size-mib`` MiB, per object (plain fsck compares fingerprints from
  the listing and hashes nothing; ``--deep`` reads every byte).

Prints a table, then one JSON line::

    python benchmarks/bench_sharing.py --streams 20 --n-saved 2 --size-mib 4
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
from tracker_saver.core.records import StreamId  # noqa: E402
from tracker_saver.fsck import check  # noqa: E402
from tracker_saver.registry import open_registry  # noqa: E402
from tracker_saver.save.ownership import ensure_owner, owned  # noqa: E402
from tracker_saver.storage import open_storage  # noqa: E402


def _median_ms(fn: Callable[[int], object], n: int) -> float:
    times = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def measure(
    output_uri: str, workdir: Path, *, streams: int, n_saved: int, size_mib: int, repeats: int
) -> dict[str, float]:
    """One backend's figures (milliseconds)."""
    path = str(workdir / f"{uuid.uuid4().hex[:8]}.db")
    registry = open_registry(path)
    storage = open_storage(output_uri)
    storage.check()
    ids = [StreamId(storage.uri, "bench", "claims", f"s{i}") for i in range(streams)]
    claim = _median_ms(lambda i: ensure_owner(storage, registry, ids[i]), streams)
    known = _median_ms(lambda i: owned(storage, registry, ids[i % streams]), streams)
    state = {"w": torch.nn.Parameter(torch.zeros(size_mib * 1024 * 1024 // 4))}
    saver = TrackerSaver(output_uri, project="bench", run="fsck", registry=path)
    trainer = Engine(lambda engine, batch: None)
    for i in range(streams):
        trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint(
            {"model": torch.nn.ParameterDict(state)}, saver, filename_prefix=f"s{i}", n_saved=n_saved))  # fmt: skip
    trainer.run([0], max_epochs=n_saved)
    saver.close()
    objects = streams * n_saved
    plain = min(_median_ms(lambda _: check(registry, run="fsck"), 1) for _ in range(repeats))
    deep = min(_median_ms(lambda _: check(registry, run="fsck", deep=True), 1) for _ in range(repeats))
    assert not check(registry, run="fsck").problems
    return {"claim_new_ms": claim, "check_owned_ms": known, "fsck_per_object_ms": plain / objects,
            "fsck_deep_per_object_ms": deep / objects, "objects": objects}  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=20)
    parser.add_argument("--n-saved", type=int, default=2)
    parser.add_argument("--size-mib", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--s3-bucket", default=f"bench-sharing-{uuid.uuid4().hex[:8]}")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        options = {"streams": args.streams, "n_saved": args.n_saved, "size_mib": args.size_mib, "repeats": args.repeats}
        results["local"] = measure(str(work / "out"), work, **options)
        if os.environ.get("AWS_ENDPOINT_URL"):
            import boto3

            boto3.client("s3").create_bucket(Bucket=args.s3_bucket)
            results["s3"] = measure(f"s3://{args.s3_bucket}/bench", work, **options)
    print(f"{'backend':8} {'claim, new stream':>18} {'check, owned':>13} {'fsck/object':>12} {'deep/object':>12}")
    for name, r in results.items():
        print(f"{name:8} {r['claim_new_ms']:15.2f} ms {r['check_owned_ms']:10.2f} ms "
              f"{r['fsck_per_object_ms']:9.2f} ms {r['fsck_deep_per_object_ms']:9.2f} ms")  # fmt: skip
    print(json.dumps({"bench": "sharing", **vars(args), "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
