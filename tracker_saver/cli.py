"""The ``tracker-saver`` command: a thin layer over the public API; the only reader of CLI env vars."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from tracker_saver.console import fmt, make_console, print_records, print_report
from tracker_saver.errors import TrackerSaverError
from tracker_saver.fsck import STALE_AFTER_S, check, repair
from tracker_saver.models import find_models, get_model, rename_model
from tracker_saver.registry.shared import shared_registry

__all__ = ["main"]


def _cmd_list(args: argparse.Namespace) -> int:
    live = True if args.live else None
    records = find_models(
        project=args.project,
        run=args.run,
        stream=args.stream,
        where=args.where,
        order_by=args.sort,
        live=live,
        limit=args.limit,
        registry=args.registry,
    )
    if args.json:
        print(json.dumps([r.to_dict() for r in records], indent=2))
    else:
        print_records(records)
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    record = get_model(args.id, registry=args.registry)
    if args.json:
        print(json.dumps(record.to_dict(), indent=2))
        return 0
    console = make_console()
    for key, value in record.to_dict().items():
        if key != "metadata":
            console.print(f"[bold]{key}[/bold]: {fmt(value)}")
    for key, value in sorted(record.metadata.items()):
        console.print(f"  {key} = {value!r}")
    return 0


def _cmd_rename(args: argparse.Namespace) -> int:
    record = rename_model(args.id, args.name, registry=args.registry)
    print(json.dumps(record.to_dict(), indent=2) if args.json else f"record {record.id} is now named {record.name!r}")
    return 0


def _cmd_tag(args: argparse.Namespace) -> int:
    record = shared_registry(args.registry).add_tags(args.id, args.tags)
    print(json.dumps(record.to_dict(), indent=2) if args.json else f"record {record.id} tags: {', '.join(record.tags)}")
    return 0


def _fsck_scope(args: argparse.Namespace) -> dict[str, Any]:
    return {"project": args.project, "run": args.run, "stream": args.stream, "deep": args.deep}


def _cmd_fsck(args: argparse.Namespace) -> int:
    report = check(shared_registry(args.registry), **_fsck_scope(args))
    print(json.dumps(report.to_dict(), indent=2)) if args.json else print_report(report)
    return 1 if report.problems else 0


def _cmd_repair(args: argparse.Namespace) -> int:
    echo = (lambda _: None) if args.json else print
    report = repair(
        shared_registry(args.registry),
        **_fsck_scope(args),
        delete_orphans=args.delete_orphans,
        stale_after_s=args.stale_after,
        dry_run=args.dry_run,
        echo=echo,
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print("nothing to repair" if not report.actions else "after repair:")
        print_report(report)
    return 1 if report.problems and not args.dry_run else 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from tracker_saver.demo import run_demo

    run_demo(args.output_dir, epochs=args.epochs, registry=args.registry)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (every command has help; a test checks it)."""
    parser = argparse.ArgumentParser(prog="tracker-saver", description="Browse, query and rename checkpoint records.")
    parser.add_argument(
        "--registry",
        help="registry: a SQLite path, sqlite:///PATH or 'clearml' (default: $TRACKER_SAVER_REGISTRY, "
        "else ~/.tracker_saver/registry.db)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    models = commands.add_parser("models", help="list, show, rename and tag model records")
    model_cmds = models.add_subparsers(dest="models_command", required=True, metavar="SUBCOMMAND")

    ls = model_cmds.add_parser("list", help="list records, filtered and sorted by metadata")
    ls.add_argument("--project", help="only this project")
    ls.add_argument("--run", help="only this run")
    ls.add_argument("--stream", help="only this stream (e.g. best_model, checkpoint)")
    ls.add_argument(
        "--where",
        action="append",
        metavar="EXPR",
        help="a condition such as 'score>0.9', 'prefix=best', 'global_step in 10,20' (repeatable)",
    )
    ls.add_argument(
        "--sort", action="append", metavar="KEY", help="sort key, '-' for descending, e.g. -score (repeatable)"
    )
    which = ls.add_mutually_exclusive_group()
    which.add_argument("--live", action="store_true", help="only live (loadable) records")
    which.add_argument("--all", action="store_true", help="every record, evicted and failed included (the default)")
    ls.add_argument("--limit", type=int, help="at most this many")
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ls.set_defaults(func=_cmd_list)

    show = model_cmds.add_parser("show", help="show one record with all its metadata")
    show.add_argument("id", help="record id")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=_cmd_show)

    rename = model_cmds.add_parser("rename", help="give a record a name that later saves keep")
    rename.add_argument("id", help="record id")
    rename.add_argument("name", help="the new display name")
    rename.add_argument("--json", action="store_true", help="print the record as JSON")
    rename.set_defaults(func=_cmd_rename)

    tag = model_cmds.add_parser("tag", help="add tags to a record")
    tag.add_argument("id", help="record id")
    tag.add_argument("tags", nargs="+", help="tags to add")
    tag.add_argument("--json", action="store_true", help="print the record as JSON")
    tag.set_defaults(func=_cmd_tag)

    fsck = commands.add_parser("fsck", help="check records against output_uri: lies, orphans, unfinished saves")
    repair = commands.add_parser("repair", help="fix what fsck finds without losing a valid checkpoint")
    for sub in (fsck, repair):
        sub.add_argument("--project", help="only this project")
        sub.add_argument("--run", help="only this run")
        sub.add_argument("--stream", help="only this stream (e.g. best_model, checkpoint)")
        sub.add_argument("--deep", action="store_true", help="hash every live object, not only where sizes agree")
        sub.add_argument("--json", action="store_true", help="print JSON instead of a table")
    fsck.set_defaults(func=_cmd_fsck)
    repair.add_argument("--dry-run", action="store_true", help="print what would be done; change nothing")
    repair.add_argument("--delete-orphans", action="store_true", help="also delete slot objects no record claims")
    repair.add_argument(
        "--stale-after",
        type=float,
        default=STALE_AFTER_S,
        metavar="SECONDS",
        help=f"remove temp files and multipart uploads older than this (default: {STALE_AFTER_S:.0f})",
    )
    repair.set_defaults(func=_cmd_repair)

    demo = commands.add_parser("demo", help="train a small CNN on synthetic data and show what was saved")
    demo.add_argument(
        "--output-dir",
        default="demo-output",
        help="folder for checkpoints and the demo registry (default: demo-output)",
    )
    demo.add_argument("--epochs", type=int, default=6, help="epochs to train (default: 6)")
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; errors become one line on stderr and exit status 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # `--sort -score` reads naturally, but argparse takes "-score" for an option: glue it.
    for i in range(len(argv) - 2, -1, -1):
        if argv[i] == "--sort" and argv[i + 1].startswith("-"):
            argv[i : i + 2] = [f"--sort={argv[i + 1]}"]
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except TrackerSaverError as exc:
        print(f"tracker-saver: error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        print(f"tracker-saver: error: {exc}", file=sys.stderr)
        return 2
