"""What 10,000 and 100,000 records cost on SQLite: a query's first page, fsck, ``models list``'s first page, the file.

:func:`fill` writes a registry the way a long hyper-parameter sweep does: runs of two streams
(``best_model``, ``n_saved=2``, scored by ``val_acc``; ``checkpoint``, ``n_saved=1``), about
100 saves a stream, each save through the registry calls a real save makes (``create_pending``,
``supersede``, ``make_live``), evicting the slot's previous record as it goes, with the metadata
a real save carries (Ignite's, the lineage, the timings) and a callback's own keys (``val_acc``,
``lr``, ``optimizer``); one save in 200 fails, some runs pin and tag a record and set an alias.
Each live record's slot file exists at output_uri with its owner object, so fsck checks real
files. Saves go in batches of 500 per ``registry.atomic()`` transaction, which is what keeps
the fill fast; the per-call cost of the last saves (``pending``, ``supersede``, ``live``) is
timed and printed, so a slower write path shows.

Then, for each size, the median of ``--repeats``:

* ``query ...``: ``find_models(where=..., order_by=..., limit=50)``, a page as the CLI and the
  UI ask for it (the goal: 50 ms at 100,000 records), and ``count`` the matching records;
* ``fsck``: ``tracker_saver.fsck.check`` of every stream (the goal: 2 s);
* ``models list``: ``tracker-saver models list`` as a fresh process, timed until its first
  page of rows has arrived on a pipe, then the pipe closed as ``| head`` does (the goal: 1 s);
* ``registry MB``: the SQLite file's size.

::

    python benchmarks/bench_scale.py --records 10000 100000

Prints a table (a column per size, medians, the goals), then one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracker_saver.core.naming import pinned_key, slot_key  # noqa: E402
from tracker_saver.core.records import RecordState, StreamId, UploadInfo  # noqa: E402
from tracker_saver.find import count_models, find_models  # noqa: E402
from tracker_saver.fsck import check  # noqa: E402
from tracker_saver.registry.sqlite import SQLiteRegistry  # noqa: E402
from tracker_saver.save.ownership import ensure_owner  # noqa: E402
from tracker_saver.storage import open_storage  # noqa: E402

#: (stream, n_saved, scored): the streams of every run.
STREAMS = (("best_model", 2, True), ("checkpoint", 1, False))
SAVES_PER_STREAM = 100
#: Saves per ``registry.atomic()`` transaction.
BATCH = 500
#: The page a query asks for (the CLI's and the UI's).
PAGE = 50
#: One run's git commit (``_metadata``): a filter that 1 run in ``runs`` matches.
ONE_RUN = f"{1 * 2654435761 % 2**32:08x}"
#: The queries timed: (label, where, order_by).
QUERIES = (
    ("val_acc>0.9 by -val_acc", "val_acc>0.9", "-val_acc"),
    ("global_step>=1000 by global_step", "global_step>=1000", "global_step"),
    ("optimizer=sgd by -val_acc", "optimizer=sgd", "-val_acc"),
    ("optimizer=sgd (by created_at)", "optimizer=sgd", None),
    ("lr<0.001 by -created_at", "lr<0.001", "-created_at"),
    ("git_commit=<one run> by -val_acc", f"git_commit={ONE_RUN}", "-val_acc"),
)
LINEAGE = {"host": "gpu-07", "command": "train.py --sweep", "python": "3.11.7", "torch": "2.5.1", "ignite": "0.5.5"}


def _metadata(run: int, stream: str, step: int, scored: bool) -> tuple[dict[str, Any], float | None]:
    """A save's metadata as a real save has it at ``create_pending`` (with a callback's keys), and its score."""
    epoch = step
    global_step = epoch * 250
    score = round(0.5 + 0.45 * (1 - 1 / (1 + epoch / 10)) + ((run * 7919 + step * 104729) % 1000) / 20000, 4)
    meta: dict[str, Any] = {
        "basename": stream,
        "ext": ".pt",
        "global_step": global_step,
        "ignite_name": "model",
        "prefix": stream.split("_")[0],
        "priority": score if scored else global_step,
        **LINEAGE,
        "git_commit": f"{run * 2654435761 % 2**32:08x}",
        "git_dirty": run % 3 == 0,
        "lr": [0.1, 0.01, 0.001, 0.0003][run % 4],
        "optimizer": ("adam", "sgd", "adamw")[run % 3],
        "batch_size": (64, 128, 256)[run % 3],
        "epoch": epoch,
    }
    if scored:
        meta.update(score=score, score_name="val_acc", val_acc=score)
    return meta, score if scored else None


def _timings(size: int) -> dict[str, Any]:
    return {"save_blocked_s": 0.412, "save_durable_s": 0.412, "save_bytes": size, "save_mb_s": 612.0,
            "save_background": False}  # fmt: skip


class _Costs:
    """Seconds of each registry call a save makes, kept for the last saves of the fill."""

    def __init__(self) -> None:
        self.calls: dict[str, list[float]] = {"pending": [], "supersede": [], "live": []}

    def time(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        value = fn(*args, **kwargs)
        self.calls[what].append(time.perf_counter() - started)
        del self.calls[what][:-2000]
        return value


def fill(path: str, output_uri: str, records: int) -> tuple[int, dict[str, float]]:
    """Write about ``records`` records as a sweep's saves do; return how many, and each save call's median ms."""
    registry = SQLiteRegistry(path)
    storage = open_storage(output_uri)
    costs = _Costs()
    runs = max(1, round(records / (SAVES_PER_STREAM * len(STREAMS))))
    written = 0
    batch = registry.atomic()
    batch.__enter__()
    for run in range(runs):
        project, run_name = f"sweep{run % 5}", f"trial-{run:05d}"
        for stream, n_saved, scored in STREAMS:
            sid = StreamId(storage.uri, project, run_name, stream)
            ensure_owner(storage, registry, sid)
            in_slot: dict[int, str] = {}
            for step in range(1, SAVES_PER_STREAM + 1):
                meta, score = _metadata(run, stream, step, scored)
                slot = (step - 1) % n_saved
                filename = f"{stream}_{step}_val_acc={score:.4f}.pt" if scored else f"{stream}_{step * 250}.pt"
                key = slot_key(project, run_name, stream, slot, ".pt")
                info = UploadInfo(project, run_name, stream, filename, metadata=meta, slot=slot, key=key,
                                  output_uri=storage.uri)  # fmt: skip
                record = costs.time("pending", registry.records.create_pending, info, uri=storage.url(key))
                data = f"{project}/{run_name}/{stream} save {step}\n".encode() * 64
                sha = hashlib.sha256(data).hexdigest()
                stays = step > SAVES_PER_STREAM - n_saved  # live at the end: its bytes are the slot's
                if (run * SAVES_PER_STREAM + step) % 200 == 0 and not stays:  # failed: the slot keeps its record
                    registry.records.set_state(
                        record.id, RecordState.FAILED, expected=(RecordState.PENDING,), error="disk full"
                    )
                    continue
                costs.time(
                    "supersede",
                    registry.records.supersede,
                    record.id,
                    sha256=sha,
                    size=len(data),
                    replaces=in_slot.get(slot),
                )
                fingerprint = None
                if stays:
                    storage.put_stream(key, io.BytesIO(data))
                    fingerprint = storage.stat(key).fingerprint  # type: ignore[union-attr]
                costs.time("live", registry.records.make_live, record.id, sha256=sha, size=len(data),
                           metadata=_timings(len(data)), fingerprint=fingerprint)  # fmt: skip
                in_slot[slot] = record.id
                written += 1
                if written % BATCH == 0:
                    batch.__exit__(None, None, None)
                    batch = registry.atomic()
                    batch.__enter__()
            if scored and run % 10 == 0:
                _pin_and_tag(registry, storage, in_slot[0], project)
    batch.__exit__(None, None, None)
    registry.close()
    return written, {what: statistics.median(v) * 1000 for what, v in costs.calls.items() if v}


def _pin_and_tag(registry: SQLiteRegistry, storage: Any, record_id: str, project: str) -> None:
    """Pin a live record as ``models pin`` does (a copy at its pin key), tag it, alias the copy."""
    source = registry.records.get(record_id)
    key = pinned_key(source.project, source.run, source.filename, f"{int(record_id):08x}")
    storage.copy(source.key, key)
    info = UploadInfo(source.project, source.run, source.stream, source.filename, metadata=dict(source.metadata),
                      key=key, output_uri=source.output_uri or "")  # fmt: skip
    found = storage.stat(key)
    pinned = registry.labels.create_pinned(info, uri=storage.url(key), sha256=source.sha256 or "", size=source.size or 0,
                                    fingerprint=found.fingerprint)  # fmt: skip
    registry.labels.add_tags(record_id, ["candidate"])
    registry.labels.set_alias(pinned.id, f"best-{source.run}")


def median_s(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def first_page_s(registry: str, rows: int = PAGE) -> float:
    """Seconds from starting ``tracker-saver models list`` until ``rows`` record rows arrived, then close the pipe."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRACKER_SAVER_REGISTRY": registry}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "tracker_saver", "models", "list"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    seen = 0
    for line in proc.stdout:
        cells = line.decode().split("│")
        seen += len(cells) > 2 and cells[1].strip() != "id"  # a record's row, not the header
        if seen >= rows:
            break
    elapsed = time.perf_counter() - started
    proc.stdout.close()  # as `| head` does: the command must end quietly
    err = proc.stderr.read().decode()
    proc.wait()
    if seen < rows or "Traceback" in err:
        raise SystemExit(f"models list showed {seen} rows, then: {err[-2000:]}")
    return elapsed


def measure(records: int, repeats: int, work: str) -> dict[str, Any]:
    """Fill a registry of ``records`` records in ``work``; every figure of it."""
    path, output_uri = os.path.join(work, f"registry-{records}.db"), os.path.join(work, f"out-{records}")
    started = time.perf_counter()
    written, calls = fill(path, output_uri, records)
    row: dict[str, Any] = {"records": written, "fill_s": time.perf_counter() - started, "save_call_ms": calls}
    row["registry_mb"] = os.path.getsize(path) / 1e6
    registry = SQLiteRegistry(path)
    row["query_ms"], row["matches"] = {}, {}
    for label, where, order_by in QUERIES:
        page = find_models(where=where, order_by=order_by, limit=PAGE, registry=registry)
        assert len(page) == PAGE, (label, len(page))
        row["query_ms"][label] = 1000 * median_s(
            lambda w=where, o=order_by: find_models(where=w, order_by=o, limit=PAGE, registry=registry), repeats
        )
        row["matches"][label] = count_models(where=where, registry=registry)
    report = check(registry)
    assert report.problems == [], report.problems[:5]
    row["fsck_s"] = median_s(lambda: check(registry), repeats)
    registry.close()
    row["models_list_first_page_s"] = statistics.median(first_page_s(path) for _ in range(repeats))
    return row


def print_table(rows: list[dict[str, Any]]) -> None:
    """One line per figure, one column per size, then the goal."""
    table = [("records", [f"{row['records']:,}" for row in rows], "")]
    table += [("fill s", [f"{row['fill_s']:.1f}" for row in rows], "")]
    for what in rows[0]["save_call_ms"]:
        table.append((f"save call {what} ms", [f"{row['save_call_ms'][what]:.2f}" for row in rows], ""))
    table.append(("registry MB", [f"{row['registry_mb']:.0f}" for row in rows], ""))
    for label, _, _ in QUERIES:
        table.append((f"query {label} ms", [f"{row['query_ms'][label]:.1f}" for row in rows], "<= 50"))
    table.append(("fsck s", [f"{row['fsck_s']:.2f}" for row in rows], "<= 2"))
    table.append(("models list, first page s", [f"{row['models_list_first_page_s']:.2f}" for row in rows], "<= 1"))
    width = max(len(name) for name, _, _ in table)
    for name, cells, goal in table:
        print(f"{name:<{width}}  " + "  ".join(f"{cell:>9}" for cell in cells) + f"  {goal}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[10_000, 100_000], help="registry sizes")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each measurement (median)")
    parser.add_argument("--keep", metavar="DIR", help="write the registries and output_uris into DIR and keep them")
    args = parser.parse_args(argv)
    rows = []
    with contextlib.ExitStack() as stack:
        work = args.keep or stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-scale-"))
        for records in args.records:
            rows.append(measure(records, args.repeats, work))
    print_table(rows)
    print(json.dumps({"benchmark": "scale", "page": PAGE, "repeats": args.repeats, "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
