"""What the CLI's commands share: the registry ``--registry`` names, a record by reference, JSON out.

Standard library and the pure core (errors, text) only at module level, as :mod:`tracker_saver.cli.main`
(start-up cost).

Examples:
    >>> import argparse
    >>> wants_json(argparse.Namespace(json=True))
    True
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from tracker_saver.core.jsonout import dumps, record_json
from tracker_saver.core.text import escape

if TYPE_CHECKING:
    from tracker_saver.core.records import Record
    from tracker_saver.registry.base import Registry

__all__ = [
    "URI_HELP",
    "add_filters",
    "count",
    "dump",
    "dump_pages",
    "label",
    "open_cli_registry",
    "print_record",
    "resolve",
    "wants_json",
]

#: How an --output-uri option is spelled, in its help.
URI_HELP = "(a folder or s3://BUCKET/PREFIX, as TrackerSaver was given it)"


def open_cli_registry(args: argparse.Namespace) -> Registry:
    """The registry ``--registry`` names, never created: a typo is an error, not an empty registry."""
    from tracker_saver.registry import check_exists, parse_registry
    from tracker_saver.registry.shared import shared_registry

    named = getattr(args, "registry", None)
    spec = parse_registry(named)
    if spec.kind == "sqlite":  # first, so a missing file's fix is in the command line's words
        check_exists(spec.location or "", create=False, cli=True)
    return shared_registry(named, create=False)


def wants_json(args: argparse.Namespace) -> bool:
    """Whether ``--json`` was given."""
    return bool(getattr(args, "json", False))


def dump(value: Any) -> None:
    """Print standard JSON (:func:`~tracker_saver.core.jsonout.dumps`): an object indented, a list one item per line.

    ``indent`` switches json to its pure-Python encoder (2.5 s for 10k records); one compact
    line per item keeps the C encoder and still reads, and greps, line by line.
    """
    if isinstance(value, list):
        print("[" + ",".join("\n  " + dumps(item) for item in value) + ("\n]" if value else "]"))
    else:
        print(dumps(value, indent=2))


def dump_pages(pages: Iterable[Sequence[Any]]) -> None:
    """Print the items of ``pages`` as :func:`dump` prints their list, each page as soon as it comes.

    Examples:
        >>> dump_pages([[1, 2], [3]])
        [
          1,
          2,
          3
        ]
    """
    out, count = sys.stdout, 0
    out.write("[")
    for page in pages:
        out.write("".join(("," if count or i else "") + "\n  " + dumps(item) for i, item in enumerate(page)))
        out.flush()
        count += len(page)
    out.write("\n]\n" if count else "]\n")


def resolve(args: argparse.Namespace, registry: Registry) -> Record:
    """The record ``args.ref`` names (at ``--output-uri`` when given)."""
    from tracker_saver.models import resolve_model

    return resolve_model(args.ref, output_uri=getattr(args, "output_uri", None), registry=registry)


def label(record: Record) -> str:
    """A record as text: ``record 3 ('best')``."""
    return f"record {escape(record.id)} ({record.name!r})"


def print_record(args: argparse.Namespace, record: Record, text: str) -> int:
    """Print a record as JSON with ``--json``, else ``text`` (escaped); the command's exit status (0)."""
    if wants_json(args):
        dump(record_json(record))
    else:
        print(escape(text))
    return 0


def count(text: str) -> int:
    """An argparse type: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count: use a whole number, 0 or more")
    return value


def add_filters(sub: argparse.ArgumentParser) -> None:
    """``--project``, ``--run`` and ``--stream`` on a command."""
    sub.add_argument("--project", help="only this project")
    sub.add_argument("--run", help="only this run")
    sub.add_argument("--stream", help="only this stream (e.g. best_model, checkpoint)")
