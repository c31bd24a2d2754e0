"""Records, runs and fsck reports as text and rich tables, for the command line and the demo.

rich is imported inside the functions that draw a table, so a command that prints JSON or
plain text never pays for it. Every text a record or a report holds goes through
:func:`tracker_saver.core.text.escape` on its way to the terminal: a name that another writer
filled with ESC, CR or a bidirectional override is shown escaped, never obeyed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tracker_saver.core.text import escape
from tracker_saver.core.wording import plural

if TYPE_CHECKING:
    from rich.console import Console

    from tracker_saver.core.records import Record
    from tracker_saver.core.timings import SaveStats
    from tracker_saver.fsck import Report
    from tracker_saver.logs.upload import LogObject

__all__ = [
    "LINEAGE_KEYS",
    "TIME_FORMAT",
    "fmt",
    "make_console",
    "print_logs",
    "print_record",
    "print_record_pages",
    "print_records",
    "print_repair",
    "print_report",
    "print_runs",
    "print_save_stats",
    "rate_text",
    "seconds_text",
]

#: Metadata keys that say where a checkpoint came from; ``models show`` prints them apart.
LINEAGE_KEYS = (
    "git_commit",
    "git_dirty",
    "host",
    "command",
    "python",
    "torch",
    "ignite",
    "clearml_task_id",
    "pinned_from",
)

#: How ``models show`` labels each of a record's timings (``tracker_saver.core.timings``), in this order.
_TIMING_LABELS = {
    "save_blocked_s": "blocked",
    "save_durable_s": "durable",
    "save_bytes": "bytes",
    "save_mb_s": "throughput",
    "save_background": "background",
}

#: ANSI colour of a row by record state (on a terminal only).
_ANSI = {"live": "32", "revived": "36", "pinned": "35", "evicted": "2", "failed": "31", "pending": "33"}


def fmt(value: object) -> str:
    """One table cell: ``-`` for absent, four decimals for a float.

    Examples:
        >>> fmt(None), fmt(0.95), fmt(3)
        ('-', '0.9500', '3')
    """
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


#: How every human view shows a time (tables, ``models show``, and the UI's app.js the same):
#: local time to the second. ``--json`` and the UI's API give seconds since the epoch.
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def _when(created_at: float | None) -> str:
    return "-" if created_at is None else time.strftime(TIME_FORMAT, time.localtime(created_at))


def size_text(size: int | None) -> str:
    """A byte count for people, in decimal units as ``ls -h --si`` shows them.

    Examples:
        >>> size_text(999), size_text(1), size_text(1893), size_text(None)
        ('999 bytes', '1 byte', '1.9 kB', '-')
    """
    if size is None:
        return "-"
    if size < 1000:
        return plural(size, "byte")
    value, unit = size / 1000, "kB"
    for bigger in ("MB", "GB", "TB"):
        if value < 1000:
            break
        value, unit = value / 1000, bigger
    return f"{value:.1f} {unit}"


def seconds_text(seconds: float | None) -> str:
    """A duration for people: milliseconds below one second, else seconds.

    Examples:
        >>> seconds_text(0.01234), seconds_text(2.5), seconds_text(None)
        ('12.3 ms', '2.50 s', '-')
    """
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def rate_text(mb_s: float | None) -> str:
    """A throughput in MB/s, to three significant digits: a small checkpoint's 0.0432 is not "0.0".

    Examples:
        >>> rate_text(1234.5), rate_text(98.76), rate_text(0.0432), rate_text(0.00004), rate_text(None)
        ('1234', '98.8', '0.0432', '<0.001', '-')
    """
    if mb_s is None:
        return "-"
    if mb_s >= 100:
        return f"{mb_s:.0f}"
    return f"{mb_s:.3g}" if mb_s >= 0.001 or mb_s == 0 else "<0.001"


def _plain(value: object) -> str:
    """A metadata value as people write it: text without quotes, ``yes``/``no`` for a flag (what a
    terminal would act on is :func:`escape`'s, on the way out)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return fmt(value)


def _timing_text(key: str, value: object) -> str:
    if key in ("save_blocked_s", "save_durable_s") and isinstance(value, float):
        return seconds_text(value)
    if key == "save_bytes" and isinstance(value, int):
        return f"{size_text(value)} ({plural(value, 'byte')})"
    if key == "save_mb_s" and isinstance(value, float):
        return f"{rate_text(value)} MB/s"
    if key == "save_background" and isinstance(value, bool):
        return "yes (async_upload)" if value else "no (the training thread saved)"
    return repr(value)


def table_lines(
    columns: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    right: Iterable[str] = (),
    styles: Sequence[str | None] | None = None,
    color: bool = False,
    least: Sequence[int] = (),
) -> list[str]:
    """A boxed text table, one line per row, each row's cells between ``│``, each column at least ``least[i]`` wide.

    Drawn here rather than by rich: rich measures every cell of every row, which takes
    seconds for 10k records; this is one pass, and ``grep``/``cut -d│`` read its lines.
    ``styles`` names a colour per row (``live``, ``evicted``…), used only when ``color``.

    Examples:
        >>> print("\\n".join(table_lines(["id", "name"], [["1", "a.pt"]], right=["id"])))
        ┌────┬──────┐
        │ id │ name │
        ├────┼──────┤
        │  1 │ a.pt │
        └────┴──────┘
    """
    body = [[escape(cell) for cell in row] for row in rows]
    widths = [max([len(c), *(len(row[i]) for row in body), *least[i : i + 1]]) for i, c in enumerate(columns)]
    aligned = set(right)

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(w) if column in aligned else cell.ljust(w)
            for cell, w, column in zip(cells, widths, columns, strict=True)
        ]
        return "│ " + " │ ".join(parts) + " │"

    def rule(left: str, mid: str, end: str) -> str:
        return left + mid.join("─" * (w + 2) for w in widths) + end

    out = [rule("┌", "┬", "┐"), line(columns), rule("├", "┼", "┤")]
    for i, row in enumerate(body):
        text = line(row)
        code = _ANSI.get(styles[i] or "") if color and styles is not None else None
        out.append(f"\x1b[{code}m{text}\x1b[0m" if code else text)
    out.append(rule("└", "┴", "┘"))
    return out


def _print_lines(lines: Sequence[str], console: Console | None) -> None:
    out = console.file if console is not None else sys.stdout
    out.write("\n".join(lines) + "\n")


def make_console() -> Console:
    """A rich console for the fsck report and the demo: colours on a TTY, a readable width when piped."""
    from rich.console import Console

    # Piped output (CI logs, `| less`) still gets a table wide enough to read.
    return Console() if sys.stdout.isatty() else Console(width=200)


RECORD_COLUMNS = (
    "id",
    "project",
    "run",
    "stream",
    "name",
    "state",
    "aliases",
    "step",
    "score",
    "slot",
    "size",
    "created",
    "output_uri",
)


def print_records(records: Sequence[Record], console: Console | None = None, *, title: str | None = None) -> None:
    """Print records as a table: project, run, stream, name, state, aliases… output_uri (colours on a TTY)."""
    if title:
        _print_lines([title], console)
    print_record_pages([records], console)


def print_record_pages(pages: Iterable[Sequence[Record]], console: Console | None = None) -> int:
    """Print pages of records as one table, each page as it comes; return how many records.

    The columns are as wide as the first page needs; a later page that needs them wider closes
    the table and opens one with wider columns. Each page is flushed, so ``| head`` and ``| less``
    show the first rows at once.
    """
    out = console.file if console is not None else sys.stdout
    top, bottom, widths, count = "", "", list[int](), 0
    for records in pages:
        rows = [
            [
                str(r.id),
                r.project,
                r.run,
                r.stream,
                r.name,
                r.state.value,
                ", ".join(r.aliases) or "-",
                fmt(r.global_step),
                fmt(r.score),
                fmt(r.slot),
                size_text(r.size),
                _when(r.created_at),
                r.output_uri or "-",
            ]
            for r in records
        ]
        lines = table_lines(
            RECORD_COLUMNS,
            rows,
            right=("id", "step", "score", "slot", "size"),
            styles=[r.state.value for r in records],
            color=_color(console),
            least=widths,
        )
        if lines[0] == top:  # the same columns: this page's rows go on the open table
            body = lines[3:-1]
        else:  # the first page, or wider columns: close the open table, open another
            body, top = [bottom, *lines[:-1]] if bottom else lines[:-1], lines[0]
            widths = [len(part) - 2 for part in top[1:-1].split("┬")]
        bottom = lines[-1]
        count += len(records)
        if body:
            out.write("\n".join(body) + "\n")
            out.flush()
    if bottom:
        out.write(bottom + "\n")
    return count


def print_runs(rows: Sequence[Mapping[str, Any]], console: Console | None = None) -> None:
    """Print run summaries (``tracker_saver.find.run_summaries``) as a table, one row per run and output_uri."""
    cells = [
        [
            row["project"],
            row["run"],
            ", ".join(row["streams"]),
            str(row["records"]),
            str(row["live"]),
            _when(row["last_save"]),
            row["output_uri"] or "-",
        ]
        for row in rows
    ]
    columns = ("project", "run", "streams", "records", "live", "last save", "output_uri")
    _print_lines(table_lines(columns, cells, right=("records", "live")), console)


def print_save_stats(rows: Sequence[SaveStats], console: Console | None = None) -> None:
    """Print what a run's saves cost (``tracker_saver.find.run_stats``): a row per stream, then the run's."""
    streams = [row for row in rows if row.stream is not None]
    shown = streams + [row for row in rows if row.stream is None and len(streams) != 1]
    cells = [
        [
            row.stream if row.stream is not None else "(all)",
            str(row.count),
            str(row.background),
            *(seconds_text(v) for v in (row.blocked_p50_s, row.blocked_p95_s, row.durable_p50_s, row.durable_p95_s)),
            rate_text(row.mb_s_p50),
            *(str(n) for n in (row.slots, row.archive, row.pinned, row.objects)),
        ]
        for row in shown
    ]
    columns = (
        "stream",
        "saves",
        "background",
        "blocked p50",
        "blocked p95",
        "durable p50",
        "durable p95",
        "MB/s p50",
        "slots",
        "archive",
        "pins",
        "objects",
    )
    _print_lines(table_lines(columns, cells, right=columns[1:]), console)
    if rows and rows[-1].count == 0:
        _print_lines(
            [f"no save of {rows[-1].project}/{rows[-1].run} has timings: its records were saved before they were kept"],
            console,
        )


def print_logs(logs: Sequence[LogObject], console: Console | None = None) -> None:
    """Print a run's log files (``tracker_saver.logs.upload.list_logs``) as a table."""
    cells = [[log.name, size_text(log.size), _when(log.modified), log.key] for log in logs]
    _print_lines(table_lines(("name", "size", "modified", "key"), cells, right=("size",)), console)


def _color(console: Console | None) -> bool:
    return console.is_terminal if console is not None else sys.stdout.isatty()


def print_record(record: Record) -> None:
    """Print one record as plain ``key: value`` lines: fields, what the save cost, lineage, other metadata.

    Plain text, not rich markup: a name such as ``resnet [v2]`` prints as it is.
    """
    data = record.to_dict()
    # The timings print under their short labels: their long keys do not widen the columns.
    width = max(len(key) for key in (*data, *_TIMING_LABELS.values(), *set(record.metadata) - set(_TIMING_LABELS)))
    for key, value in data.items():
        if key == "metadata":
            continue
        if isinstance(value, (list, tuple)):
            value = ", ".join(map(str, value)) or None
        elif key == "created_at":
            value = _when(value)
        print(f"{key:<{width}}  {escape(fmt(value))}")
    lineage = [key for key in LINEAGE_KEYS if key in record.metadata]
    timings = [key for key in _TIMING_LABELS if key in record.metadata]
    # Keys the record shows as its own fields above (slot, size, sha256…) are not repeated.
    rest = sorted(set(record.metadata) - set(lineage) - set(timings) - set(data))
    if timings:
        print("save (what it cost):")
        for key in timings:
            print(f"  {_TIMING_LABELS[key]:<{width}}  {_timing_text(key, record.metadata[key])}")
    if lineage:  # what people read as text (a commit, a host, a command): without Python's quotes
        print("lineage:")
        for key in lineage:
            print(f"  {escape(key):<{width}}  {escape(_plain(record.metadata[key]))}")
    if rest:  # a callback's own keys keep repr: "3" (text) and 3 (a number) stay told apart
        print("metadata:")
        for key in rest:
            print(f"  {escape(key):<{width}}  {escape(repr(record.metadata[key]))}")


def print_report(report: Report, console: Console | None = None) -> None:
    """Print an fsck/repair report: one row per finding, then a one-line summary."""
    from rich.table import Table

    console = console or make_console()
    if report.findings:
        table = Table(title="tracker-saver fsck", show_lines=False)
        for column in ("kind", "stream", "key", "record", "detail", "repair"):
            table.add_column(column)
        styles = {"lie": "red", "orphan": "yellow", "pending": "yellow", "busy": "dim"}
        for f in report.findings:
            cells = (f.kind, f.stream, fmt(f.key), fmt(f.record_id), f.detail, f.fix)
            table.add_row(*map(escape, cells), style=styles.get(f.kind))
        console.print(table, markup=False, highlight=False)
    problems = len(report.problems)
    found = plural(problems, "problem") if problems else "no problems"
    console.print(f"{plural(len(report.streams), 'stream')} checked: {found}")


def print_repair(report: Report, *, dry_run: bool = False) -> None:
    """After ``repair`` echoed its actions: the check it made afterwards, or, after a dry run, one line.

    A dry run changed nothing, so it shows no "after repair" table: its actions above are the plan.
    """
    if dry_run and report.actions:
        actions, problems = len(report.actions), len(report.problems)
        print(
            f"dry run: nothing changed; repair would take the {plural(actions, 'action')} "
            f"above for {plural(problems, 'problem')} (tracker-saver fsck lists them)"
        )
        return
    print("after repair:" if report.actions else "nothing to repair")
    print_report(report)
