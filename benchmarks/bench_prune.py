"""What ``tracker-saver prune`` costs on a large SQLite registry, and what it gives back on disk.

A registry of ``--records`` saves is written through the registry's own calls (a pending
record, the commit that evicts the record two saves back, the record made live, four metadata
values: what each save of a two-slot stream writes, with its event), in transactions of 10,000
so the build takes seconds; the saves are spread one a minute back from now over
``--streams`` streams. Then ``prune --older-than 30d --keep-last 1000`` runs once as a dry run
and once for real, and the file is measured before, after, and after ``VACUUM``::

    python benchmarks/bench_prune.py --records 100000

Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracker_saver.core.records import UploadInfo  # noqa: E402
from tracker_saver.lifecycle.retention import Retention  # noqa: E402
from tracker_saver.registry import Query, open_registry  # noqa: E402
from tracker_saver.registry.events import history_of  # noqa: E402
from tracker_saver.registry.sqlite import SQLiteRegistry  # noqa: E402


def build(path: Path, records: int, streams: int) -> SQLiteRegistry:
    """A registry of ``records`` saves in two-slot streams, one a minute, the newest now."""
    registry = open_registry(str(path))
    assert isinstance(registry, SQLiteRegistry)
    live: dict[str, list[str]] = {f"s{i}": [] for i in range(streams)}
    for start in range(0, records, 10_000):
        with registry.atomic():
            for n in range(start, min(records, start + 10_000)):
                stream = f"s{n % streams}"
                slot = len(live[stream]) % 2
                info = UploadInfo(
                    "bench", "r", stream, f"{stream}_{n}.pt", slot=slot, key=f"bench/r/{stream}.slot{slot}.pt",
                    output_uri="file:///bench", metadata={"score": n / records, "epoch": n, "global_step": n, "lr": 1e-3},
                )  # fmt: skip
                record = registry.records.create_pending(info, uri=f"file:///bench/{info.key}")
                replaces = live[stream][-2] if len(live[stream]) >= 2 else None
                registry.records.supersede(record.id, sha256="0" * 64, size=1 << 20, replaces=replaces)
                registry.records.make_live(record.id, sha256="0" * 64, size=1 << 20)
                live[stream].append(record.id)
    now = time.time()
    with registry.atomic() as conn:  # spread the saves back in time, one a minute
        conn.execute("UPDATE records SET created_at = ? - (? - id) * 60", (now, records))
    return registry


def vacuumed_size(path: str) -> int:
    """The file's size after ``VACUUM`` (and its WAL folded in), through a connection of its own."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return os.path.getsize(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000, help="saves in the registry (default: 100000)")
    parser.add_argument("--streams", type=int, default=4, help="streams they are spread over (default: 4)")
    parser.add_argument("--keep-last", type=int, default=1000, help="prune's --keep-last (default: 1000)")
    parser.add_argument("--older-than-days", type=float, default=30, help="prune's --older-than in days (30)")
    parser.add_argument("--tmpdir", help="where the registry file goes (default: a temporary folder)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=args.tmpdir) as work:
        started = time.perf_counter()
        registry = build(Path(work) / "registry.db", args.records, args.streams)
        build_s = time.perf_counter() - started
        registry.close()
        before = vacuumed_size(str(registry.path))
        registry = SQLiteRegistry(registry.path)
        events_before = len(registry.history.events())
        rule = Retention(keep_last=args.keep_last, older_than=args.older_than_days * 86400)
        log = history_of(registry, "bench")
        started = time.perf_counter()
        planned = log.prune(Query(), rule, dry_run=True)
        dry_s = time.perf_counter() - started
        started = time.perf_counter()
        pruned = log.prune(Query(), rule)
        prune_s = time.perf_counter() - started
        unvacuumed = os.path.getsize(registry.path) + os.path.getsize(registry.path + "-wal")
        left, events_left = registry.records.count(Query()), len(registry.history.events())
        registry.close()
        started = time.perf_counter()
        after = vacuumed_size(str(registry.path))
        vacuum_s = time.perf_counter() - started
        report = {
            "records": args.records, "streams": args.streams, "keep_last": args.keep_last,
            "older_than_days": args.older_than_days, "build_s": round(build_s, 2), "dry_run_s": round(dry_s, 3),
            "prune_s": round(prune_s, 3), "vacuum_s": round(vacuum_s, 3), "planned": len(planned),
            "deleted": len(pruned), "records_left": left, "events_before": events_before,
            "events_left": events_left, "bytes_before_vacuumed": before,
            "bytes_after_unvacuumed": unvacuumed, "bytes_after_vacuumed": after,
        }  # fmt: skip
    print(f"{'registry of':<28} {args.records} records, {args.streams} streams (built in {build_s:.1f} s)")
    print(f"{'rule':<28} --older-than {args.older_than_days:g}d --keep-last {args.keep_last}")
    print(f"{'dry run':<28} {dry_s:.3f} s: {len(planned)} records")
    print(f"{'prune':<28} {prune_s:.3f} s: {len(pruned)} deleted, {left} left")
    print(f"{'file before (vacuumed)':<28} {before / 1e6:.1f} MB")
    print(f"{'file after, before VACUUM':<28} {unvacuumed / 1e6:.1f} MB (file + WAL)")
    print(f"{'file after VACUUM':<28} {after / 1e6:.1f} MB (VACUUM {vacuum_s:.2f} s)")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
