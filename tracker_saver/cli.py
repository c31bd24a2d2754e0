"""The ``tracker-saver`` command: a thin layer over the public API; the only reader of CLI env vars.

Start-up cost is the point of this module's shape: at module level it imports only the
standard library and the error classes, and each command imports the API it calls when it
runs. So ``--help`` and ``models list`` never import torch or ignite (only ``demo`` does), and
tables are drawn by :mod:`tracker_saver.console` without rich (the fsck report uses it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from tracker_saver.errors import TrackerSaverError
from tracker_saver.wording import plural

if TYPE_CHECKING:
    from tracker_saver.records import Record
    from tracker_saver.registry.base import Registry

__all__ = ["build_parser", "main", "package_version"]

PROG = "tracker-saver"

#: The message for ``tracker-saver ui`` without the ``ui`` extra installed.
UI_HINT = "tracker-saver ui needs fastapi and uvicorn: pip install 'fastapi>=0.110' 'uvicorn>=0.30' (the ui extra)"

#: How an --output-uri option is spelled, in its help.
_URI_HELP = "(a folder or s3://BUCKET/PREFIX, as TrackerSaver was given it)"

#: Modules whose absence means the ``ui`` extra is not installed (not a bug in the UI).
_UI_MODULES = ("fastapi", "uvicorn", "starlette", "tracker_saver.ui")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``tracker-saver models list: error: … (see --help)``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


class _Version(argparse.Action):
    """``--version``: looked up only when asked, so other commands do not pay for it."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> NoReturn:
        print(f"{PROG} {package_version()}")  # on stdout, as argparse's own version action
        parser.exit()


def package_version() -> str:
    """The installed distribution's version, else the package's ``__version__`` (a source tree).

    Examples:
        >>> package_version() == __import__("tracker_saver").__version__
        True
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tracker-saver")
    except PackageNotFoundError:
        import tracker_saver

        return str(getattr(tracker_saver, "__version__", "unknown"))


# -- helpers the commands share ----------------------------------------------------------------


def _registry(args: argparse.Namespace) -> Registry:
    """The registry ``--registry`` names, never created: a typo is an error, not an empty registry."""
    from tracker_saver.registry.shared import shared_registry

    return shared_registry(getattr(args, "registry", None), create=False)


def _wants_json(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "json", False))


def _dump(value: Any) -> None:
    """Print JSON: an object indented, a list one item per line.

    ``indent`` switches json to its pure-Python encoder (2.5 s for 10k records); one compact
    line per item keeps the C encoder and still reads, and greps, line by line.
    """
    if isinstance(value, list):
        print("[" + ",".join("\n  " + json.dumps(item) for item in value) + ("\n]" if value else "]"))
    else:
        print(json.dumps(value, indent=2))


def _resolve(args: argparse.Namespace, registry: Registry) -> Record:
    from tracker_saver.models import resolve_model

    return resolve_model(args.ref, output_uri=getattr(args, "output_uri", None), registry=registry)


def _label(record: Record) -> str:
    return f"record {record.id} ({record.name!r})"


def _print_record(args: argparse.Namespace, record: Record, text: str) -> int:
    if _wants_json(args):
        _dump(record.to_dict())
    else:
        print(text)
    return 0


# -- models ------------------------------------------------------------------------------------


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
    from tracker_saver.models import count_models, find_models

    registry = _registry(args)
    filters = _filters(args)
    records = find_models(**filters, order_by=args.sort, limit=args.limit, offset=args.offset, registry=registry)
    if _wants_json(args):
        _dump([r.to_dict() for r in records])
        return 0
    from tracker_saver.console import print_records

    print_records(records)
    if args.limit is not None and len(records) == args.limit:
        shown = args.offset + len(records)
        total = count_models(**filters, registry=registry)
        if total > shown:
            print(f"records {args.offset + 1}-{shown} of {total}: --offset {shown} for more")
    return 0


def _cmd_models_show(args: argparse.Namespace) -> int:
    record = _resolve(args, _registry(args))
    if _wants_json(args):
        _dump(record.to_dict())
        return 0
    from tracker_saver.console import print_record

    print_record(record)
    return 0


def _cmd_models_get(args: argparse.Namespace) -> int:
    from tracker_saver.models import download_model

    registry = _registry(args)
    record = _resolve(args, registry)
    path = download_model(record, args.dest, registry=registry)
    if _wants_json(args):
        _dump({"record": record.to_dict(), "path": str(path)})
    else:
        print(f"{_label(record)}: {plural(record.size or 0, 'byte')}, sha256 verified, written to {path}")
    return 0


def _cmd_models_rename(args: argparse.Namespace) -> int:
    from tracker_saver.models import rename_model

    registry = _registry(args)
    record = rename_model(_resolve(args, registry).id, args.name, registry=registry)
    return _print_record(args, record, f"record {record.id} is now named {record.name!r}")


def _cmd_models_tag(args: argparse.Namespace) -> int:
    from tracker_saver.models import add_tags

    registry = _registry(args)
    record = add_tags(_resolve(args, registry).id, args.tags, registry=registry)
    return _print_record(args, record, f"{_label(record)} tags: {', '.join(record.tags) or '-'}")


def _cmd_models_untag(args: argparse.Namespace) -> int:
    from tracker_saver.models import remove_tags

    registry = _registry(args)
    record = remove_tags(_resolve(args, registry).id, args.tags, registry=registry)
    return _print_record(args, record, f"{_label(record)} tags: {', '.join(record.tags) or '-'}")


def _cmd_models_alias(args: argparse.Namespace) -> int:
    from tracker_saver.models import set_alias

    registry = _registry(args)
    record = set_alias(_resolve(args, registry).id, args.alias_name, registry=registry)
    return _print_record(args, record, f"{record.project}@{args.alias_name} is now {_label(record)}")


def _cmd_models_unalias(args: argparse.Namespace) -> int:
    from tracker_saver.models import remove_alias

    remove_alias(args.project_name, args.alias_name, registry=_registry(args))
    if _wants_json(args):
        _dump({"project": args.project_name, "alias": args.alias_name, "removed": True})
    else:
        print(f"alias {args.project_name}@{args.alias_name} removed")
    return 0


def _cmd_models_pin(args: argparse.Namespace) -> int:
    from tracker_saver.models import pin_model

    registry = _registry(args)
    source = _resolve(args, registry)
    pinned = pin_model(source.id, registry=registry)
    return _print_record(args, pinned, f"{_label(source)} pinned as record {pinned.id} at {pinned.uri}")


def _cmd_models_unpin(args: argparse.Namespace) -> int:
    from tracker_saver.models import unpin_model

    registry = _registry(args)
    record = _resolve(args, registry)
    unpin_model(record.id, registry=registry)
    if _wants_json(args):
        _dump({"id": record.to_dict()["id"], "unpinned": True, "deleted": record.uri})
    else:
        print(f"{_label(record)} unpinned: {record.uri} deleted")
    return 0


def _cmd_models_history(args: argparse.Namespace) -> int:
    from tracker_saver.models import slot_history

    registry = _registry(args)
    records = slot_history(_resolve(args, registry), registry=registry)
    if _wants_json(args):
        _dump([r.to_dict() for r in records])
        return 0
    from tracker_saver.console import print_records

    print_records(records)
    return 0


# -- runs --------------------------------------------------------------------------------------


def _cmd_runs_list(args: argparse.Namespace) -> int:
    from tracker_saver.find import find_models, run_summaries

    rows = run_summaries(find_models(project=args.project, output_uri=args.output_uri, registry=_registry(args)))
    if _wants_json(args):
        _dump(rows)
        return 0
    from tracker_saver.console import print_runs

    print_runs(rows)
    return 0


def _project_run(text: str) -> tuple[str, str]:
    project, _, run = text.rpartition("/")
    if not project or not run:
        raise argparse.ArgumentTypeError(f"{text!r} is not PROJECT/RUN, e.g. mnist/r1")
    return project, run


def _cmd_runs_logs(args: argparse.Namespace) -> int:
    from tracker_saver.logs import download_logs, list_logs

    project, run = args.project_run
    # With --output-uri the registry is not needed to find the logs.
    where: dict[str, Any] = {"output_uri": args.output_uri, "registry": None}
    if args.output_uri is None:
        where["registry"] = _registry(args)
    if args.download is not None:
        paths = download_logs(project, run, args.download, **where)
        if _wants_json(args):
            _dump([str(p) for p in paths])
        else:
            print("\n".join(map(str, paths)) or f"{project}/{run} has no logs")
        return 0
    logs = list_logs(project, run, **where)
    if _wants_json(args):
        _dump([{"name": o.name, "key": o.key, "size": o.size, "modified": o.modified} for o in logs])
        return 0
    from tracker_saver.console import print_logs

    if logs:
        print_logs(logs)
    else:
        print(f"{project}/{run} has no logs")
    return 0


# -- fsck, repair, demo, ui ----------------------------------------------------------------------


def _fsck_scope(args: argparse.Namespace) -> dict[str, Any]:
    return {"project": args.project, "run": args.run, "stream": args.stream, "deep": args.deep}


def _cmd_fsck(args: argparse.Namespace) -> int:
    from tracker_saver.fsck import check

    report = check(_registry(args), **_fsck_scope(args))
    if _wants_json(args):
        _dump(report.to_dict())
    else:
        from tracker_saver.console import print_report

        print_report(report)
    return 1 if report.problems else 0


def _cmd_repair(args: argparse.Namespace) -> int:
    from tracker_saver.fsck import repair

    as_json = _wants_json(args)
    report = repair(
        _registry(args),
        **_fsck_scope(args),
        delete_orphans=args.delete_orphans,
        stale_after_s=args.stale_after,
        dry_run=args.dry_run,
        echo=(lambda _: None) if as_json else print,
    )
    if as_json:
        _dump(report.to_dict())
    else:
        from tracker_saver.console import print_repair

        print_repair(report, dry_run=args.dry_run)
    return 1 if report.problems else 0  # a dry run exits as fsck does


def _cmd_demo(args: argparse.Namespace) -> int:
    from tracker_saver.demo import run_demo

    run_demo(args.output_dir, epochs=args.epochs, registry=getattr(args, "registry", None))
    return 0


def _cmd_ui(args: argparse.Namespace) -> int:
    try:
        from tracker_saver.ui import serve
    except ModuleNotFoundError as exc:
        if exc.name is not None and not exc.name.startswith(_UI_MODULES):
            raise  # a bug inside the UI, not a missing extra
        raise ModuleNotFoundError(UI_HINT) from exc
    serve(registry=_registry(args), host=args.host, port=args.port)
    return 0


# -- the parser --------------------------------------------------------------------------------


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count: use a whole number, 0 or more")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port: use a number from 1 to 65535")
    return value


def _global_options() -> tuple[_Parser, _Parser]:
    """``--registry`` and ``--json`` as parents of every command, so they go before or after it.

    ``default=SUPPRESS`` leaves an option unset unless typed: a subcommand's parser then never
    overwrites the value typed before the subcommand with its own default.
    """
    registry = _Parser(add_help=False, argument_default=argparse.SUPPRESS)
    registry.add_argument(
        "--registry",
        metavar="REGISTRY",
        help="a SQLite path, sqlite:///PATH or 'clearml' (default: $TRACKER_SAVER_REGISTRY, "
        "else ~/.tracker_saver/registry.db); it must exist",
    )
    as_json = _Parser(add_help=False, argument_default=argparse.SUPPRESS)
    as_json.add_argument("--json", action="store_true", help="print JSON instead of text or a table")
    return registry, as_json


def _add_filters(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--project", help="only this project")
    sub.add_argument("--run", help="only this run")
    sub.add_argument("--stream", help="only this stream (e.g. best_model, checkpoint)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (every command has help; a test checks it).

    Examples:
        >>> build_parser().parse_args(["models", "list", "--registry", "r.db", "--limit", "5"]).registry
        'r.db'
    """
    registry, as_json = _global_options()
    both = [registry, as_json]
    parser = _Parser(
        prog=PROG,
        description="Browse, query, download and manage checkpoint records.",
        parents=both,
        epilog="--registry and --json go before or after the command. Docs: docs/cli.md",
    )
    parser.add_argument("--version", action=_Version, help="print the version of tracker-saver and exit")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser, help="what to work on"
    )

    def command(
        group: Any, name: str, help: str, func: Callable[[argparse.Namespace], int], parents: list[Any]
    ) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = group.add_parser(name, help=help, description=help, parents=parents)
        sub.set_defaults(func=func)
        return sub

    models = commands.add_parser(
        "models", help="list, show, download and manage model records", description="Model records.", parents=both
    )
    model_cmds = models.add_subparsers(
        dest="models_command", required=True, metavar="SUBCOMMAND", help="what to do with records"
    )

    ls = command(model_cmds, "list", "list records, filtered and sorted by metadata", _cmd_models_list, both)
    _add_filters(ls)
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
    ls.add_argument("--output-uri", metavar="URI", help=f"only records stored at this output_uri {_URI_HELP}")
    which = ls.add_mutually_exclusive_group()
    which.add_argument("--live", action="store_true", help="only loadable records (live, revived, pinned)")
    which.add_argument("--state", action="append", metavar="STATE", help="only this state, e.g. pinned (repeatable)")
    which.add_argument("--all", action="store_true", help="every record, evicted and failed included (the default)")
    ls.add_argument("--limit", type=_count, metavar="N", help="at most N records")
    ls.add_argument(
        "--offset", type=_count, default=0, metavar="N", help="skip the first N records (with --limit: a page)"
    )

    ref_help = "a record id, PROJECT/RUN/STREAM[@ALIAS] (e.g. mnist/r1/best_model@best) or PROJECT@ALIAS"
    show = command(model_cmds, "show", "show one record: fields, aliases, lineage, metadata", _cmd_models_show, both)
    get = command(model_cmds, "get", "download a record's checkpoint, verifying its sha256", _cmd_models_get, both)
    for sub in (show, get):
        sub.add_argument("ref", metavar="REF", help=ref_help)
        sub.add_argument("--output-uri", metavar="URI", help=f"the record REF names at this output_uri {_URI_HELP}")
    get.add_argument(
        "dest", metavar="DEST", help="a file to write, or a folder: the file is then the record's name as a safe slug "
        "with the checkpoint's extension (the one we ship -> the_one_we_ship.pt)"
    )  # fmt: skip

    rename = command(model_cmds, "rename", "give a record a name that later saves keep", _cmd_models_rename, both)
    rename.add_argument("ref", metavar="REF", help=ref_help)
    rename.add_argument("name", metavar="NAME", help="the new display name")

    tag = command(model_cmds, "tag", "add tags to a record", _cmd_models_tag, both)
    untag = command(model_cmds, "untag", "remove tags from a record", _cmd_models_untag, both)
    for sub in (tag, untag):
        sub.add_argument("ref", metavar="REF", help=ref_help)
        sub.add_argument("tags", nargs="+", metavar="TAG", help="tags")

    alias = command(
        model_cmds, "alias", "point a project's alias (e.g. production) at a record", _cmd_models_alias, both
    )
    alias.add_argument("ref", metavar="REF", help=ref_help)
    alias.add_argument("alias_name", metavar="NAME", help="the alias: letters, digits, '_.-'; not latest or best")
    unalias = command(model_cmds, "unalias", "remove a project's alias", _cmd_models_unalias, both)
    unalias.add_argument("project_name", metavar="PROJECT", help="the project")
    unalias.add_argument("alias_name", metavar="NAME", help="the alias")

    pin = command(model_cmds, "pin", "copy a record to a stable key that eviction never touches", _cmd_models_pin, both)
    pin.add_argument("ref", metavar="REF", help=ref_help)
    unpin = command(model_cmds, "unpin", "delete a pinned record and its object", _cmd_models_unpin, both)
    unpin.add_argument("ref", metavar="REF", help="a pinned record's id or reference")

    history = command(
        model_cmds, "history", "every record that used a record's slot, oldest first", _cmd_models_history, both
    )
    history.add_argument("ref", metavar="REF", help=ref_help)

    runs = commands.add_parser("runs", help="list runs, their save costs and logs", description="Runs.", parents=both)
    run_cmds = runs.add_subparsers(dest="runs_command", required=True, metavar="SUBCOMMAND", help="what to do")
    runs_ls = command(
        run_cmds, "list", "one row per run and output_uri: streams, records, live, last save", _cmd_runs_list, both
    )
    runs_ls.add_argument("--project", help="only this project")
    runs_ls.add_argument("--output-uri", metavar="URI", help=f"only runs at this output_uri {_URI_HELP}")
    from tracker_saver.cli_stats import STATS_HELP, add_stats_arguments, cmd_stats  # light: no torch

    add_stats_arguments(command(run_cmds, "stats", STATS_HELP, cmd_stats, both), _project_run)
    logs = command(run_cmds, "logs", "list a run's uploaded logs, or download them", _cmd_runs_logs, both)
    logs.add_argument("project_run", metavar="PROJECT/RUN", type=_project_run, help="the run, e.g. mnist/r1")
    logs.add_argument("--download", metavar="DEST", help="download every log file into this folder")
    logs.add_argument(
        "--output-uri", metavar="URI", help="where the run's logs are (default: its checkpoints' output_uri)"
    )

    fsck = command(
        commands, "fsck", "check records against output_uri: lies, orphans, unfinished saves", _cmd_fsck, both
    )
    repair = command(commands, "repair", "fix what fsck finds without losing a valid checkpoint", _cmd_repair, both)
    for sub in (fsck, repair):
        _add_filters(sub)
        sub.add_argument("--deep", action="store_true", help="hash every live object, not only where sizes agree")
    repair.add_argument("--dry-run", action="store_true", help="print what would be done; change nothing")
    repair.add_argument("--delete-orphans", action="store_true", help="also delete slot objects no record claims")
    from tracker_saver.fsck import STALE_AFTER_S  # light: no torch, no storage backend

    repair.add_argument(
        "--stale-after",
        type=float,
        default=STALE_AFTER_S,
        metavar="SECONDS",
        help=f"remove temp files and multipart uploads older than this (default: {STALE_AFTER_S:.0f})",
    )

    demo = command(
        commands, "demo", "train a small CNN on synthetic data and show what was saved", _cmd_demo, [registry]
    )
    demo.add_argument(
        "--output-dir",
        default="demo-output",
        help="folder for checkpoints and the demo registry (default: demo-output)",
    )
    demo.add_argument("--epochs", type=int, default=6, help="epochs to train (default: 6)")

    from tracker_saver.cli_sync import SYNC_HELP, add_sync_arguments, cmd_sync  # light: clearml loads when it runs

    add_sync_arguments(command(commands, "sync", SYNC_HELP, cmd_sync, [as_json]))
    ui = command(commands, "ui", "serve the web UI for browsing records (the ui extra)", _cmd_ui, [registry])
    ui.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    ui.add_argument("--port", type=_port, default=8765, help="port to listen on (default: 8765)")
    return parser


# -- main --------------------------------------------------------------------------------------


def _one_line(exc: BaseException) -> str:
    """An error as one line: ClearML's multi-line 'not configured' text becomes its fix."""
    # The ClearML SDK's MissingConfigError is a paragraph with links; its fix fits one line.
    if "MissingConfigError" in str(exc):
        return (
            "ClearML is not configured on this machine: run `clearml-init`, or set CLEARML_API_HOST, "
            "CLEARML_API_ACCESS_KEY and CLEARML_API_SECRET_KEY"
        )
    return " ".join(str(exc).split())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; errors become one line on stderr and exit status 2.

    Examples:
        >>> main(["runs", "list", "--registry", ":memory:", "--json"])
        []
        0
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    # `--sort -score` reads naturally, but argparse takes "-score" for an option: glue it.
    for i in range(len(argv) - 2, -1, -1):
        if argv[i] == "--sort" and argv[i + 1].startswith("-"):
            argv[i : i + 2] = [f"--sort={argv[i + 1]}"]
    args = build_parser().parse_args(argv)
    try:
        status = int(args.func(args))
        sys.stdout.flush()  # a reader that went away (`| head`) shows here, not as a traceback at exit
        return status
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 141  # 128 + SIGPIPE, as a tool killed by the closed pipe exits
    except (TrackerSaverError, ModuleNotFoundError) as exc:
        print(f"{PROG}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
