"""The CLI's ``streams`` commands: hand a stream at an output_uri to this registry, deliberately (``take-over``).

A thin face over :func:`tracker_saver.save.ownership.take_over`; ``cli.main`` registers it with
:func:`add_streams_commands`. For when the registry that owns a stream is gone for good (a
laptop lost, a tracker server retired): the refusal of a saver names the owner's id to pass.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from tracker_saver.cli.shared import URI_HELP, open_cli_registry
from tracker_saver.core.text import escape

__all__ = ["add_streams_commands"]

TAKE_OVER_HELP = (
    "hand a run's streams (or one) at an output_uri over to this registry (their owner registry is gone for good)"
)


def add_streams_commands(commands: Any, command: Callable[..., argparse.ArgumentParser], parents: list[Any]) -> None:
    """The ``streams`` command group.

    Examples:
        >>> parser = argparse.ArgumentParser(); sub = parser.add_subparsers()
        >>> add_streams_commands(sub, lambda g, n, h, f, p: g.add_parser(n), [])
    """
    streams = commands.add_parser(
        "streams", help="who owns a stream's objects at an output_uri", description="Streams.", parents=parents
    )
    group = streams.add_subparsers(dest="streams_command", required=True, metavar="SUBCOMMAND", help="what to do")
    take = command(group, "take-over", TAKE_OVER_HELP, _cmd_take_over, parents)
    take.add_argument("output_uri", metavar="OUTPUT_URI", help=f"where the stream's objects are {URI_HELP}")
    take.add_argument("--project", required=True, help="the stream's project")
    take.add_argument("--run", help="the stream's run (left out: every run of the project)")
    take.add_argument(
        "--stream", help="the stream (Ignite's basename, e.g. best_model; left out: every stream of the run)"
    )
    take.add_argument(
        "--from",
        dest="from_id",
        required=True,
        metavar="REGISTRY_ID",
        help="the id of the registry that owns it now, as the refusal printed it ('none': no owner recorded)",
    )


def _cmd_take_over(args: argparse.Namespace) -> int:
    from tracker_saver.core.errors import ConfigError
    from tracker_saver.core.records import StreamId
    from tracker_saver.save.ownership import take_over, take_over_run
    from tracker_saver.storage import open_storage

    if args.stream is not None and args.run is None:
        raise ConfigError("--stream needs --run: pass the stream's run, or leave --stream out to take the whole run")
    registry = open_cli_registry(args)
    storage = open_storage(args.output_uri)
    from_id = None if args.from_id == "none" else args.from_id
    if args.stream is not None:
        stream = StreamId(storage.uri, args.project, args.run, args.stream)
        taken = [(stream, take_over(storage, registry, stream, from_id=from_id))]
    else:  # every stream of the run (or project) in one step, or none: a refusal lists each one refused
        taken = take_over_run(storage, registry, args.project, args.run, from_id=from_id)
    for stream, owner in taken:
        print(escape(f"stream {stream.label} is now owned by {owner.describe()}"))
    if not taken:
        print(escape(f"every stream there is owned by {registry.uri} already"))
    return 0
