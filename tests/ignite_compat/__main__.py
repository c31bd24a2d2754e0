"""``python -m tests.ignite_compat``: run ignite's own saver tests against ignite's classes and ours.

stdout gets a table (each test that builds our saver or does not pass, both outcomes, our error),
the counts per file, then one JSON line (counts and every test's outcomes). The exit status is 1
when the outcome disagrees with the table in docs/migration.md (each disagreement on stderr), 2
when ignite's tests could not be fetched or run (the message says how to run them).
"""

from __future__ import annotations

import argparse
import json
import sys

from tests.ignite_compat.suite import SuiteUnavailable, format_table, run_suite
from tests.ignite_compat.table import disagreements, read_page


def main(argv: list[str] | None = None) -> int:
    """Run the suite, print its table and JSON line, check it against docs/migration.md; the exit status."""
    parser = argparse.ArgumentParser(prog="python -m tests.ignite_compat", description=__doc__)
    parser.add_argument(
        "--version", default=None, help="the pytorch-ignite version whose tests run (default: installed)"
    )
    args = parser.parse_args(argv)
    try:
        result = run_suite(args.version)
    except SuiteUnavailable as exc:
        print(f"ignite_compat: {exc}", file=sys.stderr)
        return 2
    print(format_table(result), flush=True)
    print(json.dumps(result.to_json()), flush=True)
    problems = disagreements(result, *read_page())
    for problem in problems:
        print(f"ignite_compat: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
