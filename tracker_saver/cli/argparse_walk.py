"""The one place that reads argparse's internals: a parser's actions, subcommands and usage groups.

argparse has no public way to list a parser's arguments or subcommands; the CLI reference
(:mod:`tracker_saver.cli.reference`) needs both. The internals read here (:data:`INTERNALS`):
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

from tracker_saver.core.errors import ConfigError

__all__ = ["INTERNALS", "actions", "options", "subcommands", "usage"]

#: Every argparse internal this module reads: ``(owner, attribute)``.
INTERNALS = (
    ("argparse.ArgumentParser", "_actions"),
    ("argparse.ArgumentParser", "_mutually_exclusive_groups"),
    ("argparse", "_SubParsersAction"),
    ("argparse._SubParsersAction", "_choices_actions"),
    ("argparse", "_HelpAction"),
)


def _changed(name: str) -> ConfigError:
    return ConfigError(
        f"this Python's argparse has no {name}: tracker_saver/cli/argparse_walk.py needs updating for it"
    )


def actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Every argument of ``parser`` in the order it was added, ``-h`` and subcommands included."""
    try:
        return list(parser._actions)
    except AttributeError:
        raise _changed("ArgumentParser._actions") from None


def _kinds() -> tuple[type[argparse._HelpAction], type[argparse._SubParsersAction[argparse.ArgumentParser]]]:
    try:
        return argparse._HelpAction, argparse._SubParsersAction
    except AttributeError as exc:
        raise _changed(f"argparse.{exc.name}") from None


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments of ``parser`` a user types: every action but ``-h`` and the subcommands."""
    return [a for a in actions(parser) if not isinstance(a, _kinds())]


def subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """The subcommands of ``parser`` in the order they were added: ``(name, its help, its parser)``."""
    for action in actions(parser):
        if isinstance(action, _kinds()[1]):
            try:
                helps = {a.dest: a.help or "" for a in action._choices_actions}
            except AttributeError:
                raise _changed("_SubParsersAction._choices_actions") from None
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def usage(parser: argparse.ArgumentParser, prog: str, width: int) -> str:
    """The usage line(s) of ``parser`` as ``prog``, wrapped at ``width``, without ``usage:``.

    Examples:
        >>> usage(argparse.ArgumentParser(), "demo", 80)
        'demo [-h]'
    """
    formatter = argparse.HelpFormatter(prog=prog, width=width)
    try:
        groups = parser._mutually_exclusive_groups
    except AttributeError:
        raise _changed("ArgumentParser._mutually_exclusive_groups") from None
    formatter.add_usage(None, actions(parser), groups, prefix="")
    return formatter.format_help().strip()
