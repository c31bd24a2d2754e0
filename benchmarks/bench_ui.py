"""How fast the UI opens on a large registry: the page and its first requests, over real HTTP.

A registry of ``--records`` records (default 10,000: 10 runs × 4 streams, two slots each, so
most records are evicted, with typed metadata: global_step, score, score_name) is written
through the registry API in one transaction (no checkpoint bytes: the UI never reads them to
list). The real app then runs under uvicorn on a loopback port, and each request is timed
``--repeats`` times; the first (cold) time is shown apart from the median::

    python benchmarks/bench_ui.py --records 10000

What opening the page costs is ``GET /`` + ``GET /static/app.js`` + the first ``/api/models``
page + ``/api/chart`` (the browser sends the last two at once). Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import uvicorn  # noqa: E402

from tracker_saver.core.records import UploadInfo  # noqa: E402
from tracker_saver.registry.sqlite import SQLiteRegistry  # noqa: E402
from tracker_saver.ui.app import create_app  # noqa: E402

REQUESTS = {
    "page (GET /)": "/",
    "script (GET /static/app.js)": "/static/app.js",
    "first page (/api/models)": "/api/models?order_by=-created_at&offset=0&limit=50",
    "chart (/api/chart)": "/api/chart",
    "sorted by score": "/api/models?order_by=-score&limit=50",
    "where score>0.9 and global_step<=20": "/api/models?where=score%3E0.9%20and%20global_step%3C%3D20&limit=50",
    "last page": "/api/models?order_by=-created_at&offset=9950&limit=50",
}


def fill(path: str, records: int) -> None:
    """``records`` records in 10 runs × 4 streams, two slots per stream (the rest evicted)."""
    registry = SQLiteRegistry(path)
    per_stream = max(1, records // 40)
    output_uri = "file:///bench/output"
    with registry.atomic():
        for run in range(10):
            for stream in ("best_model", "checkpoint", "ema_model", "swa_model"):
                previous: dict[int, str] = {}
                for step in range(1, per_stream + 1):
                    slot = step % 2
                    score = round(0.5 + 0.5 * ((step * 7919) % 1000) / 1000, 4)
                    name = f"{stream}_{step}_val_acc={score:.4f}.pt"
                    key = f"bench/run{run}/{stream}.slot{slot}.pt"
                    info = UploadInfo(
                        "bench", f"run{run}", stream, name, slot=slot, key=key, output_uri=output_uri,
                        metadata={"global_step": step, "score": score, "score_name": "val_acc", "prefix": stream},
                    )  # fmt: skip
                    record = registry.records.create_pending(info, uri=f"{output_uri}/{key}")
                    sha256 = hashlib.sha256(name.encode()).hexdigest()
                    registry.records.supersede(record.id, sha256=sha256, size=1 << 20, replaces=previous.get(slot))
                    registry.records.make_live(record.id, sha256=sha256, size=1 << 20)
                    previous[slot] = record.id
    registry.close()


def timed(url: str, repeats: int) -> tuple[float, float, int]:
    """Cold seconds, median warm seconds, and the response size."""
    times = []
    size = 0
    for _ in range(repeats + 1):
        start = time.perf_counter()
        with urllib.request.urlopen(url, timeout=30) as response:
            size = len(response.read())
        times.append(time.perf_counter() - start)
    return times[0], statistics.median(times[1:]), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "registry.db")
        start = time.perf_counter()
        fill(path, args.records)
        fill_s = time.perf_counter() - start
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        server = uvicorn.Server(uvicorn.Config(create_app(path), log_level="warning", lifespan="off"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.01)
        results = {label: timed(base + url, args.repeats) for label, url in REQUESTS.items()}
        server.should_exit = True
        thread.join(10)
    print(f"{args.records} records (filled in {fill_s:.1f} s), {args.repeats} warm repeats per request\n")
    print(f"{'request':<40} {'cold ms':>9} {'median ms':>10} {'bytes':>9}")
    for label, (cold, warm, size) in results.items():
        print(f"{label:<40} {cold * 1000:>9.1f} {warm * 1000:>10.1f} {size:>9}")
    opening = ["page (GET /)", "script (GET /static/app.js)"]
    open_s = sum(results[k][0] for k in opening) + max(
        results["first page (/api/models)"][0], results["chart (/api/chart)"][0]
    )
    print(f"\nopening the page (cold): {open_s * 1000:.0f} ms")
    print(
        json.dumps(
            {
                "benchmark": "ui",
                "records": args.records,
                "open_cold_ms": round(open_s * 1000, 1),
                **{
                    label: {"cold_ms": round(c * 1000, 1), "median_ms": round(w * 1000, 1)}
                    for label, (c, w, _) in results.items()
                },
            }
        )
    )


if __name__ == "__main__":
    main()
