"""``tracker-saver runs stats PROJECT/RUN``: what a run's saves cost, per stream and in all.

A thin face over :func:`tracker_saver.find.run_stats`; ``cli.py`` registers it with
:func:`add_stats_arguments` and :func:`cmd_stats`. Imports nothing heavy until it runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

__all__ = ["STATS_HELP", "add_stats_arguments", "cmd_stats"]

STATS_HELP = (
    "what a run's saves cost (count, p50/p95 blocked and durable seconds, MB/s) and hold (slots, archive, pins)"
)


def add_stats_arguments(sub: argparse.ArgumentParser, project_run: Callable[[str], Any]) -> None:
    """The ``runs stats`` command's arguments; ``project_run`` parses ``PROJECT/RUN``.

    Examples:
        >>> parser = argparse.ArgumentParser(); add_stats_arguments(parser, lambda t: tuple(t.split("/")))
        >>> parser.parse_args(["mnist/r1"]).project_run
        ('mnist', 'r1')
    """
    sub.add_argument("project_run", metavar="PROJECT/RUN", type=project_run, help="the run, e.g. mnist/r1")
    sub.add_argument(
        "--output-uri", metavar="URI", help="only the run's records at this output_uri (a folder or s3://BUCKET/PREFIX)"
    )


def cmd_stats(args: argparse.Namespace) -> int:
    """Run ``runs stats``: a table (a row per stream, then ``(all)``), or the rows as JSON (``--json``)."""
    from tracker_saver.cli.shared import open_cli_registry
    from tracker_saver.find import run_stats

    project, run = args.project_run
    registry = open_cli_registry(args)
    rows = run_stats(project, run, output_uri=args.output_uri, registry=registry)
    if getattr(args, "json", False):
        from tracker_saver.core.jsonout import dumps

        print(dumps([row.to_dict() for row in rows], indent=2))
        return 0
    from tracker_saver.cli.console import print_save_stats

    print_save_stats(rows)
    return 0
