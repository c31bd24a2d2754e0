"""How long ``tracker-saver`` takes to start and to list 10k records, next to importing torch.

A SQLite registry of ``--records`` records is written in a temp folder by
``bench_scale.fill``: a sweep's saves, each evicting its slot's previous record as a save does
(a fill that kept every record live until the end made each ``make_live`` slower, and never
finished 100,000 records). Then each command runs ``--repeats`` times as a fresh
``python -m tracker_saver`` process, interleaved, and is timed from start to exit:

* ``python -c 'import torch, ignite'``: the baseline, what every command paid when the CLI
  imported the whole package;
* ``python -c pass``: the interpreter alone, the floor;
* ``tracker-saver --help``;
* ``tracker-saver models list --limit 50`` (a table, piped);
* ``tracker-saver models list --json`` (every record).

::

    python benchmarks/bench_cli.py --records 10000 --repeats 10

Prints a table of median and best seconds, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_scale import fill  # noqa: E402  (benchmarks/ is sys.path[0] when a benchmark runs)


def timed(cmd: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000, help="records in the registry (default: 10000)")
    parser.add_argument("--repeats", type=int, default=10, help="runs of each command (default: 10)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        registry = str(Path(tmp) / "registry.db")
        started = time.perf_counter()
        count, _ = fill(registry, str(Path(tmp) / "out"), args.records)
        fill_s = time.perf_counter() - started
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TRACKER_SAVER_REGISTRY": registry}
        python = [sys.executable]
        cli = [sys.executable, "-m", "tracker_saver"]
        commands = {
            "python -c 'import torch, ignite' (baseline)": [*python, "-c", "import torch, ignite"],
            "python -c pass (floor)": [*python, "-c", "pass"],
            "tracker-saver --help": [*cli, "--help"],
            "tracker-saver models list --limit 50": [*cli, "models", "list", "--limit", "50"],
            f"tracker-saver models list --json ({count} records)": [*cli, "models", "list", "--json"],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for cmd in commands.values():
            timed(cmd, env)  # warm the page cache and .pyc files once
        for _ in range(args.repeats):
            for name, cmd in commands.items():
                times[name].append(timed(cmd, env))

    width = max(len(name) for name in commands)
    print(f"{count} records written in {fill_s:.1f} s; {args.repeats} runs each, interleaved\n")
    print(f"{'command':<{width}}  {'median s':>9}  {'best s':>7}")
    for name, values in times.items():
        print(f"{name:<{width}}  {statistics.median(values):9.3f}  {min(values):7.3f}")
    summary = {
        "records": count,
        "repeats": args.repeats,
        "median_s": {name: round(statistics.median(v), 4) for name, v in times.items()},
        "best_s": {name: round(min(v), 4) for name, v in times.items()},
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
