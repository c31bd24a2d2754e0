"""The one place that reads argparse's internals: a parser's actions, subcommands and usage groups.

argparse has no public way to list a parser's arguments or subcommands; the CLI reference
(:mod:`tracker_saver.cli_reference`) needs both. The internals read here (:data:`INTERNALS`):
``ArgumentParser._actions`` (every argument, in order), ``ArgumentParser._mutually_exclusive_groups``
(for the usage line), ``argparse._SubParsersAction`` and its ``_choices_actions`` (one
pseudo-action per subcommand, carrying its help), and ``argparse._HelpAction``.
``tests/test_argparse_walk.py`` checks each against the installed Python, so an upgrade that
changes one fails there, naming the attribute, rather than as a wrong reference page.

Examples:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="demo")
    >>> _ = parser.add_argument("--depth", help="how deep")
    >>> [a.dest for a in options(parser)]
    ['depth']
    >>> _ = parser.add_subparsers().add_parser("run", help="run it")
    >>> [(name, text) for name, text, _ in subcommands(parser)]
    [('run', 'run it')]
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

from tracker_saver.errors import ConfigError

__all__ = ["INTERNALS", "actions", "options", "subcommands", "usage"]

#: Every argparse internal this module reads: ``(owner, attribute)``.
INTERNALS = (
    ("argparse.ArgumentParser", "_actions"),
    ("argparse.ArgumentParser", "_mutually_exclusive_groups"),
    ("argparse", "_SubParsersAction"),
    ("argparse._SubParsersAction", "_choices_actions"),
    ("argparse", "_HelpAction"),
)


def _read(owner: object, name: str, where: str) -> Any:
    try:
        return getattr(owner, name)
    except AttributeError:
        raise ConfigError(
            f"this Python's argparse has no {where}.{name}: tracker_saver/argparse_walk.py needs updating for it"
        ) from None


def actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Every argument of ``parser`` in the order it was added, ``-h`` and subcommands included."""
    return list(_read(parser, "_actions", "ArgumentParser"))


def _is(action: argparse.Action, name: str) -> bool:
    return isinstance(action, _read(argparse, name, "argparse"))


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments of ``parser`` a user types: every action but ``-h`` and the subcommands."""
    return [a for a in actions(parser) if not (_is(a, "_HelpAction") or _is(a, "_SubParsersAction"))]


def subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """The subcommands of ``parser`` in the order they were added: ``(name, its help, its parser)``."""
    for action in actions(parser):
        if _is(action, "_SubParsersAction"):
            helps = {a.dest: a.help or "" for a in _read(action, "_choices_actions", "_SubParsersAction")}
            choices: dict[str, argparse.ArgumentParser] = action.choices  # type: ignore[assignment]
            for name, sub in choices.items():
                yield name, helps.get(name, ""), sub


def usage(parser: argparse.ArgumentParser, prog: str, width: int) -> str:
    """The usage line(s) of ``parser`` as ``prog``, wrapped at ``width``, without ``usage:``.

    Examples:
        >>> usage(argparse.ArgumentParser(), "demo", 80)
        'demo [-h]'
    """
    formatter = argparse.HelpFormatter(prog=prog, width=width)
    groups = _read(parser, "_mutually_exclusive_groups", "ArgumentParser")
    formatter.add_usage(None, actions(parser), groups, prefix="")
    return formatter.format_help().strip()
