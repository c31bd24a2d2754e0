"""``tracker-saver sync SESSION``: import an offline ClearML session and push its checkpoint records.

A thin face over :func:`tracker_saver.clearml.import_offline_session`; ``cli.py`` registers it
with :func:`add_sync_arguments` and :func:`cmd_sync`. Imports nothing heavy until it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys

from tracker_saver.core.jsonout import dumps
from tracker_saver.core.text import escape

__all__ = ["SYNC_HELP", "add_sync_arguments", "cmd_sync"]

SYNC_HELP = "import an offline ClearML session and push its checkpoint records, once (safe to rerun)"


def add_sync_arguments(sub: argparse.ArgumentParser) -> None:
    """The ``sync`` command's arguments.

    Examples:
        >>> parser = argparse.ArgumentParser(); add_sync_arguments(parser)
        >>> parser.parse_args(["s.zip", "--task-id", "4a7c"]).task_id
        '4a7c'
    """
    sub.add_argument(
        "session", metavar="SESSION", help="the offline session zip or folder (Task.get_offline_mode_folder())"
    )
    sub.add_argument(
        "--task-id",
        metavar="ID",
        help="push into this task (one Task.import_offline_session made already) instead of importing",
    )
    sub.add_argument("--project-root", metavar="ROOT", help="put the models under the ClearML project ROOT/<project>")
    sub.add_argument(
        "--timeout", type=float, default=60.0, metavar="SECONDS", help="longest wait on a silent server (default: 60)"
    )


def cmd_sync(args: argparse.Namespace) -> int:
    """Run ``sync``: one line per pushed record and a summary, or the report as JSON (``--json``)."""
    # The sync module itself, not tracker_saver.clearml: that face also loads the drop-in saver, and
    # with it ignite and torch, which a sync never uses (3 s of CPU at every start on the test machine).
    from tracker_saver.integrations.clearml.sync import import_offline_session

    as_json, out = bool(getattr(args, "json", False)), sys.stdout
    # ClearML's import prints progress on stdout: keep stdout for our output.
    with contextlib.redirect_stdout(sys.stderr):
        report = import_offline_session(
            args.session,
            task_id=args.task_id,
            project_root=args.project_root,
            timeout=args.timeout,
            progress=None if as_json else (lambda r: print(escape(f"  {r.state.value:8} {r.name}"), file=out)),
        )
    if as_json:
        print(dumps({**dataclasses.asdict(report), "records": report.records}, indent=2))
    else:
        how = "imported into" if report.imported else "already in"
        print(
            f"offline session {how} task {report.task_id}: {report.records} records, {report.created} models "
            f"created, {report.completed} completed, {report.unchanged} already there"
        )
    return 0
