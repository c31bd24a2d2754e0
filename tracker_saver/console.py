"""Records and fsck reports as rich tables, for the command line and the demo."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from rich import filesize
from rich.console import Console
from rich.table import Table

from tracker_saver.fsck import Report
from tracker_saver.records import Record

__all__ = ["fmt", "make_console", "print_records", "print_report"]


def fmt(value: object) -> str:
    """One table cell: ``-`` for absent, four decimals for a float."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def make_console() -> Console:
    """A console for tables: colours on a TTY, a readable width when piped."""
    # Piped output (CI logs, `| less`) still gets a table wide enough to read.
    return Console() if sys.stdout.isatty() else Console(width=200)


def print_records(records: Sequence[Record], console: Console | None = None, *, title: str | None = None) -> None:
    """Print records as a table (colours only on a TTY)."""
    table = Table(title=title, show_lines=False)
    for column in ("id", "name", "state", "run", "stream", "step", "score", "slot", "size", "created"):
        table.add_column(column, justify="right" if column in ("id", "step", "score", "slot", "size") else "left")
    styles = {"live": "green", "revived": "cyan", "evicted": "dim", "failed": "red", "pending": "yellow"}
    for r in records:
        table.add_row(
            r.id,
            r.name,
            r.state.value,
            r.run,
            r.stream,
            fmt(r.global_step),
            fmt(r.score),
            fmt(r.slot),
            "-" if r.size is None else filesize.decimal(r.size),
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.created_at)),
            style=styles.get(r.state.value),
        )
    (console or make_console()).print(table)


def print_report(report: Report, console: Console | None = None) -> None:
    """Print an fsck/repair report: one row per finding, then a one-line summary."""
    console = console or make_console()
    if report.findings:
        table = Table(title="tracker-saver fsck", show_lines=False)
        for column in ("kind", "stream", "key", "record", "detail", "repair"):
            table.add_column(column)
        styles = {"lie": "red", "orphan": "yellow", "pending": "yellow", "busy": "dim"}
        for f in report.findings:
            table.add_row(f.kind, f.stream, fmt(f.key), fmt(f.record_id), f.detail, f.fix, style=styles.get(f.kind))
        console.print(table)
    problems = len(report.problems)
    console.print(f"{len(report.streams)} streams checked: {problems or 'no'} problem{'' if problems == 1 else 's'}")
