"""``python -m tests.soak``: run the fault-injection soak on one back end and print its summary.

``--race`` runs the race soak instead (``tests.soak.race``): a training and ``--racers`` processes
making random operations on the same records, then every invariant checked; ``--long`` is its
long run (``scripts/dev.sh soak``). Progress and each violation go to stderr; stdout gets the
summary line, then one JSON line. The exit status is 1 when any invariant was violated.
"""

from __future__ import annotations

import argparse
import json
import sys

from tests.soak.driver import run_soak
from tests.soak.plan import BACKENDS
from tests.soak.race import run_race
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
    parser.add_argument("--race", action="store_true", help="the race soak: racers on the same records at once")
    parser.add_argument("--racers", type=int, default=4, help="race soak: processes beside the training (>= 3)")
    parser.add_argument(
        "--ops", type=int, default=None, help="race soak: operations per racer (default 12; --long 200)"
    )
    parser.add_argument("--long", action="store_true", help="race soak: the long run (200 operations per racer)")
    args = parser.parse_args(argv)
    if args.race or args.long:
        ops = args.ops or (200 if args.long else 12)
        race = run_race(args.backend, args.seed, racers=args.racers, ops=ops, workdir=args.workdir)
        print(race.summary(), flush=True)
        print(json.dumps(race.to_json()), flush=True)
        return 1 if race.violations else 0
    stats = run_soak(
        args.backend, args.kills, args.seed, workdir=args.workdir, max_delay=args.max_delay, mutant=args.mutant
    )
    print(stats.summary(), flush=True)
    print(json.dumps(stats.to_json()), flush=True)
    return 1 if stats.violations else 0


if __name__ == "__main__":
    sys.exit(main())
