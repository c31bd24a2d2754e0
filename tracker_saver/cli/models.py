"""The CLI's models commands (``tracker-saver models list`` and the rest): show, get, edit, pin, history.

Standard library and the pure core (errors, text) only at module level, as :mod:`tracker_saver.cli.main`:
each command imports the API it calls when it runs.

Examples:
    >>> from tracker_saver.cli.main import build_parser
    >>> build_parser().parse_args(["models", "tag", "7", "prod"]).tags
    ['prod']
"""

from __future__ import annotations

import argparse
import difflib
import functools
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tracker_saver.cli.argparse_walk import LazySubcommands
from tracker_saver.cli.shared import (
    URI_HELP,
    add_filters,
    count,
    dump,
    dump_pages,
    label,
    open_cli_registry,
    print_record,
    resolve,
    wants_json,
)
from tracker_saver.core.jsonout import record_json
from tracker_saver.core.text import escape
from tracker_saver.core.wording import plural

if TYPE_CHECKING:
    from tracker_saver.core.records import Record

__all__ = ["add_models_commands"]

#: How a command is added: ``command(group, name, help, func, parents)`` (see :func:`tracker_saver.cli.main.build_parser`).
AddCommand = Callable[[Any, str, str, Callable[[argparse.Namespace], int], list[Any]], argparse.ArgumentParser]


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "output_uri": args.output_uri,
        "project": args.project,
        "run": args.run,
        "stream": args.stream,
        "filename": args.filename,
        "name": args.name,
        "tag": args.tag,
        "alias": args.alias,
        "where": args.where,
        "live": True if args.live else None,
        "states": args.state,
    }


def _cmd_models_list(args: argparse.Namespace) -> int:
    """Print each page of records as the registry reads it (SQLite: 100, then twice as many each
    time; MLflow: a search request's page), flushed, so the first rows show at once."""
    from tracker_saver.find import find_model_pages
    from tracker_saver.models import count_models

    registry = open_cli_registry(args)
    filters = _filters(args)
    pages = find_model_pages(**filters, order_by=args.sort, limit=args.limit, offset=args.offset, registry=registry)
    if wants_json(args):
        dump_pages([record_json(r) for r in page] for page in pages)
        return 0
    first = next(pages, None)
    if first is None:  # not a bare table header: say that the query ran and matched nothing
        total = count_models(**filters, registry=registry) if args.offset else 0
        print(
            f"no records past --offset {args.offset}: the query matches {plural(total, 'record')}"
            if total
            else "0 records match"
        )
        return 0
    from tracker_saver.cli.console import print_record_pages

    shown = print_record_pages(itertools.chain([first], pages))
    if args.limit is not None and shown == args.limit:
        total = count_models(**filters, registry=registry)
        if total > args.offset + shown:
            print(
                f"records {args.offset + 1}-{args.offset + shown} of {total}: --offset {args.offset + shown} for more"
            )
    return 0


def _cmd_models_show(args: argparse.Namespace) -> int:
    record = resolve(args, open_cli_registry(args))
    if wants_json(args):
        dump(record_json(record))
        return 0
    from tracker_saver.cli.console import print_record

    print_record(record)
    return 0


def _cmd_models_get(args: argparse.Namespace) -> int:
    from tracker_saver.models import download_model

    registry = open_cli_registry(args)
    record = resolve(args, registry)
    path = download_model(record, args.dest, registry=registry)
    if wants_json(args):
        dump({"record": record_json(record), "path": str(path)})
    else:
        print(escape(f"{label(record)}: {plural(record.size or 0, 'byte')}, sha256 verified, written to {path}"))
    return 0


#: The three edits of one record: ``(models function, argument it takes, text printed after)``.
_EDITS: dict[str, tuple[str, str, Callable[[argparse.Namespace, Record], str]]] = {
    "rename": ("rename_model", "name", lambda args, r: f"record {r.id} is now named {r.name!r}"),
    "tag": ("add_tags", "tags", lambda args, r: f"{label(r)} tags: {', '.join(r.tags) or '-'}"),
    "untag": ("remove_tags", "tags", lambda args, r: f"{label(r)} tags: {', '.join(r.tags) or '-'}"),
}


def _cmd_models_edit(args: argparse.Namespace) -> int:
    """``models rename|tag|untag``: resolve REF, apply the edit, print the record."""
    from tracker_saver import models

    function, argument, text = _EDITS[args.models_command]
    registry = open_cli_registry(args)
    record = getattr(models, function)(resolve(args, registry).id, getattr(args, argument), registry=registry)
    return print_record(args, record, text(args, record))


def _cmd_models_alias(args: argparse.Namespace) -> int:
    """``models alias REF NAME [--if-better KEY]``: a slot record is pinned first (once the gate let the
    record named pass), and the alias goes on the pin (it says so)."""
    from tracker_saver.lifecycle.aliases import alias_note
    from tracker_saver.lifecycle.gates import better
    from tracker_saver.models import set_alias

    registry = open_cli_registry(args)
    source = resolve(args, registry)
    if args.if_better:
        _check_gate_key(args.if_better, source)
    gate = better(args.if_better, lower=args.lower_wins) if args.if_better else None
    record = set_alias(source.id, args.alias_name, registry=registry, require=gate)
    return print_record(args, record, alias_note(source, record, args.alias_name))


def _check_gate_key(key: str, record: Record) -> None:
    """A gate metric the record lacks, one letter off one it has, is a typo: a usage error, not a refusal."""
    from tracker_saver.core.errors import ConfigError
    from tracker_saver.core.query import is_number

    numeric = sorted(k for k, v in record.metadata.items() if is_number(v))
    close = difflib.get_close_matches(key, numeric, n=1, cutoff=0.6)
    if key not in record.metadata and close:
        raise ConfigError(
            f"--if-better {key!r}: {label(record)} has no {key!r}: did you mean {close[0]!r}? "
            f"(its numeric metadata: {', '.join(numeric)})"
        )


def _cmd_models_unalias(args: argparse.Namespace) -> int:
    """``models unalias PROJECT NAME``: says whether a copy that the alias made stays pinned."""
    from tracker_saver.lifecycle.aliases import unalias_note
    from tracker_saver.models import remove_alias

    named = remove_alias(args.project_name, args.alias_name, registry=open_cli_registry(args))
    if wants_json(args):
        record = record_json(named) if named is not None else None
        dump({"project": args.project_name, "alias": args.alias_name, "removed": True, "record": record})
    else:
        print(escape(unalias_note(args.project_name, args.alias_name, named)))
    return 0


def _cmd_models_pin(args: argparse.Namespace) -> int:
    from tracker_saver.models import pin_model

    registry = open_cli_registry(args)
    source = resolve(args, registry)
    pinned = pin_model(source.id, registry=registry)
    if pinned.id == source.id:  # a pin (an alias's copy included): pinning it again returns it
        return print_record(args, pinned, f"{label(source)} is pinned already, at {pinned.uri}")
    return print_record(args, pinned, f"{label(source)} pinned as record {pinned.id} at {pinned.uri}")


def _cmd_models_unpin(args: argparse.Namespace) -> int:
    from tracker_saver.models import unpin_model

    registry = open_cli_registry(args)
    record = resolve(args, registry)
    deleted = unpin_model(record.id, registry=registry)
    if wants_json(args):
        dump({"id": record.id, "unpinned": True, "deleted": record.uri if deleted else None})
    elif deleted:
        print(escape(f"{label(record)} unpinned: {record.uri} deleted"))
    else:  # another record names the object, or an earlier release's pin key may be another stream's slot
        print(escape(f"{label(record)} unpinned: {record.uri} kept, as another record may still name it"))
    return 0


def _cmd_models_history(args: argparse.Namespace) -> int:
    from tracker_saver.models import slot_history

    registry = open_cli_registry(args)
    records = slot_history(resolve(args, registry), registry=registry)
    if wants_json(args):
        dump([record_json(r) for r in records])
        return 0
    from tracker_saver.cli.console import print_records

    print_records(records)
    return 0


def add_models_commands(commands: Any, command: AddCommand, both: list[Any]) -> None:
    """Add ``models`` and its subcommands to the CLI's subparsers ``commands``; each subcommand's parser
    is built when the command line names it (:class:`~tracker_saver.cli.argparse_walk.LazySubcommands`)."""
    models = commands.add_parser(
        "models", help="list, show, download and manage model records", description="Model records.", parents=both
    )
    model_cmds = models.add_subparsers(
        action=LazySubcommands,
        dest="models_command",
        required=True,
        metavar="SUBCOMMAND",
        help="what to do with records",
    )
    # In the order `models --help` lists them; one function adds the subcommands named with it.
    for names, add in (
        (("list",), _add_list),
        (("show", "get"), _add_show_get),
        (("rename",), _add_rename),
        (("tag", "untag"), _add_tag_untag),
        (("alias", "unalias"), _add_alias_unalias),
        (("pin", "unpin"), _add_pin_unpin),
        (("history",), _add_history),
    ):
        for name in names:
            model_cmds.add_lazy(name, functools.partial(add, model_cmds, command, both))


#: A record reference, as the subcommands that take one say it.
_REF_HELP = "a record id, PROJECT/RUN/STREAM[@ALIAS] (e.g. mnist/r1/best_model@best) or PROJECT@ALIAS"


def _add_list(model_cmds: Any, command: AddCommand, both: list[Any]) -> None:
    ls = command(model_cmds, "list", "list records, filtered and sorted by metadata", _cmd_models_list, both)
    add_filters(ls)
    ls.add_argument("--filename", help="only records with this Ignite filename (e.g. best_model_6_val_acc=0.9500.pt)")
    ls.add_argument("--name", help="only records with this display name")
    ls.add_argument("--tag", help="only records with this tag")
    ls.add_argument("--alias", help="only the record(s) this alias names (latest, best, or a user alias)")
    ls.add_argument(
        "--where",
        action="append",
        metavar="EXPR",
        help="conditions on metadata or record fields, joined by 'and': 'score>0.9', 'prefix=best and name!=x', "
        "'global_step in 10,20' (repeatable; an unknown key is an error; grammar: docs/cli.md)",
    )
    ls.add_argument(
        "--sort", action="append", metavar="KEY", help="sort key, '-' for descending, e.g. -score (repeatable)"
    )
    ls.add_argument("--output-uri", metavar="URI", help=f"only records stored at this output_uri {URI_HELP}")
    which = ls.add_mutually_exclusive_group()
    which.add_argument("--live", action="store_true", help="only loadable records (live, revived, pinned)")
    which.add_argument("--state", action="append", metavar="STATE", help="only this state, e.g. pinned (repeatable)")
    which.add_argument("--all", action="store_true", help="every record, evicted and failed included (the default)")
    ls.add_argument("--limit", type=count, metavar="N", help="at most N records")
    ls.add_argument(
        "--offset", type=count, default=0, metavar="N", help="skip the first N records (with --limit: a page)"
    )


def _add_show_get(model_cmds: Any, command: AddCommand, both: list[Any]) -> None:
    show = command(model_cmds, "show", "show one record: fields, aliases, lineage, metadata", _cmd_models_show, both)
    get = command(model_cmds, "get", "download a record's checkpoint, verifying its sha256", _cmd_models_get, both)
    for sub in (show, get):
        sub.add_argument("ref", metavar="REF", help=_REF_HELP)
        sub.add_argument("--output-uri", metavar="URI", help=f"the record REF names at this output_uri {URI_HELP}")
    get.add_argument(
        "dest",
        metavar="DEST",
        help="a file to write, or a folder: the file is then the record's name as a safe slug "
        "with the checkpoint's extension (the one we ship -> the_one_we_ship.pt)",
    )


def _add_rename(model_cmds: Any, command: AddCommand, both: list[Any]) -> None:
    rename = command(model_cmds, "rename", "give a record a name that later saves keep", _cmd_models_edit, both)
    rename.add_argument("ref", metavar="REF", help=_REF_HELP)
    rename.add_argument("name", metavar="NAME", help="the new display name")


def _add_tag_untag(model_cmds: Any, command: AddCommand, both: list[Any]) -> None:
    tag = command(model_cmds, "tag", "add tags to a record", _cmd_models_edit, both)
    untag = command(model_cmds, "untag", "remove tags from a record", _cmd_models_edit, both)
    for sub in (tag, untag):
        sub.add_argument("ref", metavar="REF", help=_REF_HELP)
        sub.add_argument("tags", nargs="+", metavar="TAG", help="tags")


def _add_alias_unalias(model_cmds: Any, command: AddCommand, both: list[Any]) -> None:
    alias = command(
        model_cmds,
        "alias",
        "point a project's alias (e.g. production) at a record; a slot record is pinned first",
        _cmd_models_alias,
        both,
    )
    alias.add_argument("ref", metavar="REF", help=_REF_HELP)
    alias.add_argument("alias_name", metavar="NAME", help="the alias: letters, digits, '_.-'; not latest or best")
    alias.add_argument(
        "--if-better",
        metavar="KEY",
        help="move the alias only if the record's metadata KEY (e.g. score) beats the current holder's; "
        "checked and moved in one transaction on SQLite",
    )
    alias.add_argument("--lower-wins", action="store_true", help="with --if-better: the lower value wins (a loss)")
    unalias = command(model_cmds, "unalias", "remove a project's alias", _cmd_models_unalias, both)
    unalias.add_argument("project_name", metavar="PROJECT", help="the project")
    unalias.add_argument("alias_name", metavar="NAME", help="the alias")


def _add_pin_unpin(model_cmds: Any, command: AddCommand, both: list[Any]) -> None:
    pin = command(model_cmds, "pin", "copy a record to a stable key that eviction never touches", _cmd_models_pin, both)
    pin.add_argument("ref", metavar="REF", help=_REF_HELP)
    unpin = command(model_cmds, "unpin", "delete a pinned record and its object", _cmd_models_unpin, both)
    unpin.add_argument("ref", metavar="REF", help="a pinned record's id or reference")


def _add_history(model_cmds: Any, command: AddCommand, both: list[Any]) -> None:
    history = command(
        model_cmds, "history", "every record that used a record's slot, oldest first", _cmd_models_history, both
    )
    history.add_argument("ref", metavar="REF", help=_REF_HELP)
