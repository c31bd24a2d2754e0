"""The ``tracker-saver`` command: a thin layer over the public API; the only reader of CLI env vars.

Start-up cost is the point of this module's shape: at module level it imports only the
standard library and the error classes, and each command imports the API it calls when it
runs. So ``--help`` and ``models list`` never import torch or ignite (only ``demo`` does);
each command's parser is built only when the command line names it (``LazySubcommands``), with
the module that adds it, so ``models list`` builds its own and not the other commands'; and
tables are drawn by :mod:`tracker_saver.cli.console` without rich (the fsck report uses it).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, cast

from tracker_saver.cli.argparse_walk import LazySubcommands
from tracker_saver.cli.shared import URI_HELP, add_filters, dump, open_cli_registry, wants_json
from tracker_saver.core.claims import STALE_AFTER_S
from tracker_saver.core.errors import ConfigError, PromotionRefusedError, RecordNotFoundError, TrackerSaverError
from tracker_saver.core.extras import missing_extra
from tracker_saver.core.text import escape

if TYPE_CHECKING:
    from tracker_saver.fsck import Report
    from tracker_saver.registry.base import Registry

__all__ = ["build_parser", "main", "package_version"]

PROG = "tracker-saver"

#: Exit statuses beyond 0 and 1 (a check found problems): the table in docs/cli.md.
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_INTERNAL = 70  # BSD's EX_SOFTWARE

#: Modules whose absence means the ``ui`` extra is not installed (not a bug in the UI).
_UI_MODULES = ("fastapi", "uvicorn", "starlette", "tracker_saver.ui")


#: argparse's message for a value not among an argument's choices (the choices quoted or not).
_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<value>[^']*)' \(choose from (?P<choices>.*)\)$")


def did_you_mean(message: str) -> str:
    """argparse's ``invalid choice`` message, with the closest choice suggested first.

    Examples:
        >>> did_you_mean("argument COMMAND: invalid choice: 'modles' (choose from 'models', 'runs')")
        "argument COMMAND: invalid choice: 'modles': did you mean 'models'? (choose from 'models', 'runs')"
        >>> did_you_mean("argument COMMAND: invalid choice: 'zzz' (choose from 'models', 'runs')")
        "argument COMMAND: invalid choice: 'zzz' (choose from 'models', 'runs')"
    """
    found = _INVALID_CHOICE.search(message)
    if found is None:
        return message
    choices = [choice.strip().strip("'") for choice in found["choices"].split(",")]
    close = difflib.get_close_matches(found["value"], choices, n=1, cutoff=0.6)
    if not close:
        return message
    return f"{message[: found.start('choices') - len(' (choose from ')]}: did you mean {close[0]!r}? (choose from {found['choices']})"


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``tracker-saver models list: error: … (see --help)``; a mistyped
    command gets the closest one (``did you mean 'models'?``)."""

    def error(self, message: str) -> NoReturn:
        message = did_you_mean(message)
        if message.startswith("unrecognized arguments: "):  # a mistyped option: the closest of any command's
            typed = [word.split("=")[0] for word in message.split()[2:] if word.startswith("--")]
            close = difflib.get_close_matches(typed[0], sorted(_option_names(self)), n=1) if typed else []
            message += f": did you mean {close[0]!r}?" if close else ""
        self.exit(2, f"{self.prog}: error: {escape(message)} (see `{self.prog} --help`)\n")


def _option_names(parser: argparse.ArgumentParser) -> set[str]:
    """Every ``--option`` of ``parser`` and of its commands, at any depth."""
    from tracker_saver.cli.argparse_walk import options, subcommands

    names = {name for action in options(parser) for name in action.option_strings if name.startswith("--")}
    for _, _, sub in subcommands(parser):
        names |= _option_names(sub)
    return names


class _Version(argparse.Action):
    """``--version``: looked up only when asked, so other commands do not pay for it."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> NoReturn:
        print(f"{PROG} {package_version()}")  # on stdout, as argparse's own version action
        parser.exit()


def package_version() -> str:
    """The package's ``__version__``: the one source, which a wheel's metadata is built from.

    An editable install's metadata keeps the version of its last ``pip install -e``, so it is not read.

    Examples:
        >>> package_version() == __import__("tracker_saver").__version__
        True
    """
    import tracker_saver

    return tracker_saver.__version__


# -- the commands ----------------------------------------------------------------------------


def _cmd_runs_list(args: argparse.Namespace) -> int:
    from tracker_saver.find import find_models, run_summaries

    rows = run_summaries(
        find_models(project=args.project, output_uri=args.output_uri, registry=open_cli_registry(args))
    )
    if wants_json(args):
        dump(rows)
        return 0
    from tracker_saver.cli.console import print_runs

    print_runs(rows)
    return 0


def _project_run(text: str) -> tuple[str, str]:
    project, _, run = text.rpartition("/")
    if not project or not run:
        raise argparse.ArgumentTypeError(f"{text!r} is not PROJECT/RUN, e.g. mnist/r1")
    return project, run


def _cmd_runs_logs(args: argparse.Namespace) -> int:
    from tracker_saver.logs.upload import download_logs, list_logs

    project, run = args.project_run
    # With --output-uri the registry is not needed to find the logs.
    where: dict[str, Any] = {"output_uri": args.output_uri, "registry": None}
    if args.output_uri is None:
        where["registry"] = open_cli_registry(args)
    if args.download is not None:
        paths = download_logs(project, run, args.download, **where)
        if wants_json(args):
            dump([str(p) for p in paths])
        else:
            print("\n".join(escape(p) for p in paths) or escape(f"{project}/{run} has no logs"))
        return 0
    logs = list_logs(project, run, **where)
    if wants_json(args):
        dump([{"name": o.name, "key": o.key, "size": o.size, "modified": o.modified} for o in logs])
        return 0
    from tracker_saver.cli.console import print_logs

    if logs:
        print_logs(logs)
    else:
        print(escape(f"{project}/{run} has no logs"))
    return 0


# -- fsck, repair, demo, ui ----------------------------------------------------------------------


def _fsck_scope(args: argparse.Namespace) -> dict[str, Any]:
    return {"project": args.project, "run": args.run, "stream": args.stream, "deep": args.deep}


def _matched_nothing(args: argparse.Namespace, streams: list[str]) -> None:
    """A ``--project``/``--run``/``--stream`` that no stream matches is a typo far more often than a
    clean bill of health: say so (exit 2) rather than "0 streams checked: no problems"."""
    scope = [
        f"--{name} {shlex.quote(value)}" for name in ("project", "run", "stream") if (value := getattr(args, name))
    ]
    if scope and not streams:
        raise RecordNotFoundError(
            f"no records match {' '.join(scope)}: nothing was checked; see `tracker-saver runs list` for the runs "
            "and their projects"
        )


def _open_or_damaged(args: argparse.Namespace) -> Registry | Report:
    """The registry for fsck and repair, or, when an existing SQLite file cannot be opened as one
    because it is damaged, the report that says so (instead of only "cannot be opened")."""
    try:
        return open_cli_registry(args)
    except TrackerSaverError:
        from tracker_saver.fsck import check_registry_file
        from tracker_saver.registry import parse_registry

        try:
            spec = parse_registry(getattr(args, "registry", None))
        except TrackerSaverError:
            spec = None
        if spec is None or spec.kind != "sqlite" or not spec.location or not os.path.isfile(spec.location):
            raise
        report = check_registry_file(spec.location, deep=args.deep)
        if not report.problems:
            raise
        return report


def _damaged(report: Report) -> bool:
    return any(f.kind == "damaged-registry" for f in report.findings)


def _cmd_fsck(args: argparse.Namespace) -> int:
    from tracker_saver.fsck import Report, check

    registry = _open_or_damaged(args)
    report = registry if isinstance(registry, Report) else check(registry, **_fsck_scope(args))
    if not _damaged(report):  # a damaged registry's records were not read: no stream matched nothing
        _matched_nothing(args, report.streams)
    if wants_json(args):
        dump(report.to_dict())
    else:
        from tracker_saver.cli.console import print_report

        print_report(report)
    return 1 if report.problems else 0


def _cmd_repair(args: argparse.Namespace) -> int:
    from tracker_saver.fsck import Report, repair

    as_json = wants_json(args)
    registry = _open_or_damaged(args)
    echo: Callable[[str], None] = (lambda _: None) if as_json else (lambda line: print(escape(line)))
    if isinstance(registry, Report):  # nothing to open, and nothing may be written to it
        report = registry
        (damaged,) = report.findings
        report.actions = [f"leave {damaged.detail} ({damaged.fix})"]  # as repair words what it leaves
        echo(report.actions[0])
    else:
        report = repair(
            registry,
            **_fsck_scope(args),
            delete_orphans=args.delete_orphans,
            stale_after_s=args.stale_after,
            dry_run=args.dry_run,
            echo=echo,
        )
    if not _damaged(report):
        _matched_nothing(args, report.streams)
    if as_json:
        dump(report.to_dict())
    else:
        from tracker_saver.cli.console import print_repair

        print_repair(report, dry_run=args.dry_run)
    return 1 if report.problems else 0  # a dry run exits as fsck does


def _cmd_demo(args: argparse.Namespace) -> int:
    from tracker_saver.cli.demo import run_demo

    run_demo(args.output_dir, epochs=args.epochs, registry=getattr(args, "registry", None))
    return 0


def _cmd_ui(args: argparse.Namespace) -> int:
    try:
        from tracker_saver.ui import serve
    except ModuleNotFoundError as exc:
        if exc.name is not None and not exc.name.startswith(_UI_MODULES):
            raise  # a bug inside the UI, not a missing extra
        raise missing_extra("tracker-saver ui", "ui", exc) from exc
    registry = open_cli_registry(args)
    _check_port_free(args.host, args.port)
    serve(registry=registry, host=args.host, port=args.port, allow_hosts=args.allow_host or ())
    return 0


def _check_port_free(host: str, port: int) -> None:
    """Bind ``host:port`` as uvicorn will (SO_REUSEADDR), and let go: a port in use is our one-line
    error, not uvicorn's ``ERROR: [Errno 98]`` and its exit status 3."""
    import socket

    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        raise ConfigError(
            f"--port {port}: cannot listen on {host}:{port} ({exc.strerror or exc}): stop what listens there, "
            "or pass another --port"
        ) from None


# -- the parser --------------------------------------------------------------------------------


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
        help="a SQLite path, sqlite:///PATH, 'clearml' or 'mlflow[:URI]' (default: $TRACKER_SAVER_REGISTRY, "
        "else ~/.tracker_saver/registry.db); it must exist",
    )
    as_json = _Parser(add_help=False, argument_default=argparse.SUPPRESS)
    as_json.add_argument("--json", action="store_true", help="print JSON instead of text or a table")
    return registry, as_json


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (every command has help; a test checks it).

    Each command's parser, and the module that adds it, comes when the command line names it
    (or when ``--help`` lists the commands, or :func:`~tracker_saver.cli.argparse_walk.subcommands`
    walks them).

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
    commands = cast(
        LazySubcommands,
        parser.add_subparsers(
            action=LazySubcommands,
            dest="command",
            required=True,
            metavar="COMMAND",
            parser_class=_Parser,
            help="what to work on",
        ),
    )

    def command(
        group: Any, name: str, help: str, func: Callable[[argparse.Namespace], int], parents: list[Any]
    ) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = group.add_parser(name, help=help, description=help, parents=parents)
        sub.set_defaults(func=func)
        return sub

    def models() -> None:
        from tracker_saver.cli.models import add_models_commands

        add_models_commands(commands, command, both)

    def streams() -> None:
        from tracker_saver.cli.streams import add_streams_commands

        add_streams_commands(commands, command, both)

    def history() -> None:
        from tracker_saver.cli.history import add_history_commands

        add_history_commands(commands, command, both)

    def sync() -> None:
        from tracker_saver.cli.sync import SYNC_HELP, add_sync_arguments, cmd_sync  # clearml loads when it runs

        add_sync_arguments(command(commands, "sync", SYNC_HELP, cmd_sync, [as_json]))

    # In the order `--help` lists them; a function adds a command's parser once it is chosen.
    for name, build in (
        ("models", models),
        ("runs", lambda: _add_runs(commands, command, both)),
        ("fsck", lambda: _add_fsck_repair(commands, command, both)),
        ("repair", lambda: _add_fsck_repair(commands, command, both)),
        ("demo", lambda: _add_demo(command(commands, "demo", _DEMO_HELP, _cmd_demo, [registry]))),
        ("streams", streams),
        ("events", history),
        ("prune", history),
        ("sync", sync),
        ("ui", lambda: _add_ui(command(commands, "ui", _UI_HELP, _cmd_ui, [registry]))),
    ):
        commands.add_lazy(name, build)
    return parser


#: How a command is added: ``command(group, name, help, func, parents)`` (in :func:`build_parser`).
_Command = Callable[[Any, str, str, Callable[[argparse.Namespace], int], list[Any]], argparse.ArgumentParser]

_DEMO_HELP = "train a small CNN on synthetic data and show what was saved"
_UI_HELP = "serve the web UI for browsing records (the ui extra)"


def _add_runs(commands: Any, command: _Command, both: list[Any]) -> None:
    runs = commands.add_parser("runs", help="list runs, their save costs and logs", description="Runs.", parents=both)
    run_cmds = runs.add_subparsers(dest="runs_command", required=True, metavar="SUBCOMMAND", help="what to do")
    runs_ls = command(
        run_cmds, "list", "one row per run and output_uri: streams, records, live, last save", _cmd_runs_list, both
    )
    runs_ls.add_argument("--project", help="only this project")
    runs_ls.add_argument("--output-uri", metavar="URI", help=f"only runs at this output_uri {URI_HELP}")
    from tracker_saver.cli.stats import STATS_HELP, add_stats_arguments, cmd_stats  # light: no torch

    add_stats_arguments(command(run_cmds, "stats", STATS_HELP, cmd_stats, both), _project_run)
    logs = command(run_cmds, "logs", "list a run's uploaded logs, or download them", _cmd_runs_logs, both)
    logs.add_argument("project_run", metavar="PROJECT/RUN", type=_project_run, help="the run, e.g. mnist/r1")
    logs.add_argument("--download", metavar="DEST", help="download every log file into this folder")
    logs.add_argument(
        "--output-uri", metavar="URI", help="where the run's logs are (default: its checkpoints' output_uri)"
    )


def _add_fsck_repair(commands: Any, command: _Command, both: list[Any]) -> None:
    fsck = command(
        commands, "fsck", "check records against output_uri: lies, orphans, unfinished saves", _cmd_fsck, both
    )
    repair = command(commands, "repair", "fix what fsck finds without losing a valid checkpoint", _cmd_repair, both)
    for sub in (fsck, repair):
        add_filters(sub)
        sub.add_argument("--deep", action="store_true", help="hash every live object, not only where sizes agree")
    repair.add_argument("--dry-run", action="store_true", help="print what would be done; change nothing")
    repair.add_argument("--delete-orphans", action="store_true", help="also delete slot objects no record claims")
    repair.add_argument(
        "--stale-after",
        type=float,
        default=STALE_AFTER_S,
        metavar="SECONDS",
        help=f"remove temp files and multipart uploads older than this (default: {STALE_AFTER_S:.0f})",
    )


def _add_demo(demo: argparse.ArgumentParser) -> None:
    demo.add_argument(
        "--output-dir",
        default="demo-output",
        help="folder for checkpoints and the demo registry (default: demo-output)",
    )
    demo.add_argument("--epochs", type=int, default=6, help="epochs to train (default: 6)")


def _add_ui(ui: argparse.ArgumentParser) -> None:
    ui.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    ui.add_argument("--port", type=_port, default=8765, help="port to listen on (default: 8765)")
    ui.add_argument(
        "--allow-host",
        action="append",
        metavar="NAME",
        help="also answer requests for this host name, e.g. a reverse proxy's (repeatable; the names --host "
        "binds are always answered, any other gets 400)",
    )


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
    """Run the CLI; an error becomes one line on stderr, and the exit status says what kind.

    0: done; 1: a check found problems (``fsck``, ``repair``, undelivered ``events --webhook``);
    2 (:data:`EXIT_USAGE`): the command cannot run as typed (an option, a value, a registry, a
    record); 3 (:data:`EXIT_REFUSED`): a promotion gate refused the move; 70 (:data:`EXIT_INTERNAL`):
    a bug (with its traceback); 130: interrupted; 141: the reader of the output went away.

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
    except PromotionRefusedError as exc:  # the command was right; the record did not pass the gate
        print(f"{PROG}: error: {escape(_one_line(exc))}", file=sys.stderr)
        return EXIT_REFUSED
    except (TrackerSaverError, ModuleNotFoundError, OSError) as exc:  # OSError: a DEST, a port, a disk
        print(f"{PROG}: error: {escape(_one_line(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: its traceback helps the report, and a script can tell it apart
        traceback.print_exc()
        bug = f"{PROG}: internal error: {escape(_one_line(exc))} (a bug: please report it with the traceback above)"
        print(bug, file=sys.stderr)
        return EXIT_INTERNAL
