"""The CLI's history commands, ``events`` and ``prune``: a registry's events, webhooks, old records deleted.

A thin face over :mod:`tracker_saver.lifecycle`; ``cli.main`` registers both with
:func:`add_history_commands`. Standard library and the pure core only at module level: each
command imports the API it calls when it runs.

Examples:
    >>> from tracker_saver.cli.main import build_parser
    >>> build_parser().parse_args(["prune", "--keep-last", "1000", "--dry-run"]).keep_last
    1000
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from tracker_saver.cli.shared import URI_HELP, dump, open_cli_registry, wants_json
from tracker_saver.cli.webhook_options import add_webhook_options, webhook_of
from tracker_saver.core.errors import ConfigError
from tracker_saver.core.jsonout import dumps
from tracker_saver.core.text import escape
from tracker_saver.core.wording import plural

__all__ = ["add_history_commands"]

EVENTS_HELP = "list the registry's events (alias moves, pins, unpins, renames, records becoming live)"
PRUNE_HELP = "delete old evicted and failed records from the registry (never live, pinned, aliased or renamed)"


def add_history_commands(commands: Any, command: Callable[..., argparse.ArgumentParser], parents: list[Any]) -> None:
    """The ``events`` and ``prune`` commands.

    Examples:
        >>> parser = argparse.ArgumentParser(); sub = parser.add_subparsers()
        >>> add_history_commands(sub, lambda g, n, h, f, p: g.add_parser(n), [])
    """
    events = command(commands, "events", EVENTS_HELP, _cmd_events, parents)
    events.add_argument("--project", help="only this project's events")
    events.add_argument("--after", type=int, default=0, metavar="SEQ", help="only events after this seq (default: 0)")
    events.add_argument("--follow", action="store_true", help="keep printing new events as they come (Ctrl-C ends)")
    events.add_argument(
        "--interval", type=float, default=1.0, metavar="SECONDS", help="with --follow: seconds between reads (1)"
    )
    add_webhook_options(events)
    events.add_argument(
        "--dead",
        action="store_true",
        help="list the events a webhook's receiver refused, set aside so that later ones flow "
        "(with --webhook: send that webhook's again)",
    )
    prune = command(commands, "prune", PRUNE_HELP, _cmd_prune, parents)
    prune.add_argument("--keep-last", type=int, metavar="N", help="keep the newest N history records of each stream")
    prune.add_argument("--older-than", metavar="AGE", help="delete only records older than AGE, e.g. 30d, 12h, 90m")
    prune.add_argument("--dry-run", action="store_true", help="print what would be deleted; delete nothing")
    prune.add_argument("--project", help="only this project's streams")
    prune.add_argument("--run", help="only this run's streams")
    prune.add_argument("--stream", help="only this stream (Ignite's basename)")
    prune.add_argument("--output-uri", metavar="URI", help=f"only streams at this output_uri {URI_HELP}")


def _cmd_events(args: argparse.Namespace) -> int:
    from tracker_saver.lifecycle.events import follow
    from tracker_saver.registry.events import history_of

    log = history_of(open_cli_registry(args), "tracker-saver events")
    if args.dead:
        return _dead(args, log)
    if args.webhook is not None:
        relay = _relay(args, log)
        if not args.follow:
            return _deliver_once(relay)
        relay.start(args.interval)

    def wait() -> bool:
        if args.follow:
            time.sleep(args.interval)
        return bool(args.follow)

    for event in follow(log, wait=wait, after=args.after, project=args.project):
        if wants_json(args):  # one object a line (JSON Lines): what a follower reads as it comes
            print(dumps(event.to_dict()), flush=True)
        else:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(event.time))
            what = f"{event.project}@{event.alias}" if event.alias else f"record {event.record_id}"
            print(
                escape(f"{event.seq:>6}  {stamp}  {event.type:<15} {what}  {_change(event.before, event.after)}"),
                flush=True,
            )
    return 0


def _relay(args: argparse.Namespace, log: Any) -> Any:
    """The relay to the webhook that ``--webhook`` and its secret options name."""
    from tracker_saver.lifecycle.webhooks import Relay

    return Relay(log, webhook_of(args))


def _deliver_once(relay: Any) -> int:
    """``events --webhook`` without ``--follow``: send what is due, say what is left; 1 if something is."""
    sent = relay.pump()
    box = relay.log.outbox(relay.webhook.endpoint, relay.webhook.shown)
    left = f"{plural(len(box.events), 'event')} left" + (f" (last try: {box.error})" if box.error else "")
    dead = len(relay.log.dead(relay.webhook.endpoint))
    aside = f"; {plural(dead, 'event')} set aside (tracker-saver events --dead)" if dead else ""
    print(escape(f"sent {plural(sent, 'event')} to {relay.webhook.shown}; {left}{aside}"))
    return 1 if box.events else 0


def _dead(args: argparse.Namespace, log: Any) -> int:
    """``events --dead``: the set-aside events, oldest first; with ``--webhook``, that webhook's sent again."""
    if args.webhook is not None:
        relay = _relay(args, log)
        sent = relay.resend_dead()
        left = len(log.dead(relay.webhook.endpoint))
        if wants_json(args):
            dump({"webhook": relay.webhook.shown, "resent": sent, "left": left})
        else:
            print(
                escape(f"sent {plural(sent, 'set-aside event')} again to {relay.webhook.shown}; {left} still set aside")
            )
        return 1 if left else 0
    dead = log.dead()
    if wants_json(args):
        dump([d.to_dict() for d in dead])
        return 0
    if not dead:
        print("no event is set aside")
    for d in dead:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(d.time))
        e = d.event
        what = f"{e.project}@{e.alias}" if e.alias else f"record {e.record_id}"
        print(
            escape(
                f"{e.seq:>6}  {stamp}  {e.type:<15} {what}  {d.shown}: {d.error} after {plural(d.attempts, 'try', 'tries')}"
            )
        )
    return 0


def _change(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    """What an event changed, in a few words: ``record 3 ('a.pt') -> record 7 ('b.pt')``, ``name 'a' -> 'b'``."""
    if before is not None and after is not None and before.get("record_id", after["record_id"]) == after["record_id"]:
        return ", ".join(f"{k} {v!r} -> {after.get(k)!r}" for k, v in before.items() if v != after.get(k))
    show = [f"record {side['record_id']} ({side['name']!r})" if side else "-" for side in (before, after)]
    return " -> ".join(show)


def _cmd_prune(args: argparse.Namespace) -> int:
    from tracker_saver.lifecycle.retention import Retention, parse_age
    from tracker_saver.registry import Query
    from tracker_saver.registry.events import history_of

    if args.keep_last is None and args.older_than is None:  # Retention's own words are a Python caller's
        raise ConfigError(
            "prune needs --keep-last N or --older-than AGE (or both), e.g. --keep-last 1000 or --older-than 30d"
        )
    rule = Retention(
        keep_last=args.keep_last, older_than=None if args.older_than is None else parse_age(args.older_than)
    )
    log = history_of(open_cli_registry(args), "tracker-saver prune")
    scope = Query(project=args.project, run=args.run, stream=args.stream, output_uri=args.output_uri)
    pruned = log.prune(scope, rule, dry_run=args.dry_run)
    if wants_json(args):
        dump({"dry_run": args.dry_run, "deleted": [p.record_id for p in pruned]})
        return 0
    streams = {p.stream for p in pruned}
    verb = "would delete" if args.dry_run else "deleted"
    print(escape(f"{verb} {plural(len(pruned), 'record')} of {plural(len(streams), 'stream')}"))
    return 0
