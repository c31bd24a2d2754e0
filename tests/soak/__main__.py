"""``python -m tests.soak``: run the fault-injection soak on one back end and print its summary.

Progress and each violation go to stderr; stdout gets the summary line, then one JSON line.
The exit status is 1 when any invariant was violated.
"""

from __future__ import annotations

import argparse
import json
import sys

from tests.soak.driver import run_soak
from tests.soak.plan import BACKENDS
from tests.soak.trainer import MUTANTS


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run the soak, print the summary; the exit status."""
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    parser.add_argument("--backend", choices=BACKENDS, default="local", help="where checkpoints and records go")
    parser.add_argument("--kills", type=int, default=30, help="how many times the training is killed")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill plan (a violation names it)")
    parser.add_argument("--max-delay", type=float, default=None, help="longest random kill delay, seconds")
    parser.add_argument("--workdir", default=None, help="keep output and registry here (default: a temp folder)")
    parser.add_argument("--mutant", choices=sorted(MUTANTS), default="", help="a deliberate bug the checks must catch")
    args = parser.parse_args(argv)
    stats = run_soak(
        args.backend, args.kills, args.seed, workdir=args.workdir, max_delay=args.max_delay, mutant=args.mutant
    )
    print(stats.summary(), flush=True)
    print(json.dumps(stats.to_json()), flush=True)
    return 1 if stats.violations else 0


if __name__ == "__main__":
    sys.exit(main())
