"""The one place that reads argparse's internals: a parser's actions, subcommands and usage groups.

argparse has no public way to list a parser's arguments or subcommands; the CLI reference
(:mod:`tracker_saver.cli.reference`) needs both. The internals read here (:data:`INTERNALS`):
``ArgumentParser._actions`` (every argument, in order), ``ArgumentParser._mutually_exclusive_groups``
(for the usage line), ``argparse._SubParsersAction`` and its ``_choices_actions`` (one
pseudo-action per subcommand, carrying its help), and ``argparse._HelpAction``. It also holds
:class:`LazySubcommands`, which builds a subcommand's parser only when the command line names
it, through ``_SubParsersAction``'s ``_name_parser_map`` (its ``choices``) and ``_get_subactions``.
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
from collections.abc import Callable, Iterator
from typing import Any

from tracker_saver.core.errors import ConfigError

__all__ = ["INTERNALS", "LazySubcommands", "actions", "options", "subcommands", "usage"]

#: Every argparse internal this module reads: ``(owner, attribute)``.
INTERNALS = (
    ("argparse.ArgumentParser", "_actions"),
    ("argparse.ArgumentParser", "_mutually_exclusive_groups"),
    ("argparse", "_SubParsersAction"),
    ("argparse._SubParsersAction", "_choices_actions"),
    ("argparse._SubParsersAction", "_name_parser_map"),
    ("argparse._SubParsersAction", "_get_subactions"),
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
            if isinstance(action, LazySubcommands):
                action.build_all()
            try:
                helps = {a.dest: a.help or "" for a in action._choices_actions}
            except AttributeError:
                raise _changed("_SubParsersAction._choices_actions") from None
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


class LazySubcommands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """``add_subparsers(action=LazySubcommands)``: a subcommand's parser is built when it is chosen.

    :meth:`add_lazy` names a subcommand and the function that adds its parser (with
    ``add_parser``, as usual). Parsing builds only the chosen one's; a name that is not one is
    refused with every name, as argparse does; the help that lists the subcommands, and
    :func:`subcommands`, build them all first, so ``--help`` and the CLI reference read the same.

    Examples:
        >>> parser = argparse.ArgumentParser(prog="demo")
        >>> group = parser.add_subparsers(action=LazySubcommands, dest="command")
        >>> group.add_lazy("run", lambda: group.add_parser("run", help="run it").add_argument("--fast"))
        >>> parser.parse_args(["run", "--fast", "yes"]).fast
        'yes'
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._builders: dict[str, Callable[[], object]] = {}

    def add_lazy(self, name: str, build: Callable[[], object]) -> None:
        """Name the subcommand ``name``; ``build()`` adds its parser when it is first needed.

        One ``build`` may add several subcommands (pass it for each of their names): it runs once.
        """
        self._name_parser_map[name] = None  # a choice now, in its place among the others
        self._builders[name] = build

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        """``_SubParsersAction.add_parser``; for a name :meth:`add_lazy` gave, the parser takes its place."""
        parser: argparse.ArgumentParser
        if name not in self._builders:
            parser = super().add_parser(name, **kwargs)
            return parser
        del self._builders[name]
        order = list(self._name_parser_map)
        del self._name_parser_map[name]  # argparse refuses a name it has: the placeholder goes first
        parser = super().add_parser(name, **kwargs)
        placed = {key: self._name_parser_map[key] for key in order}
        self._name_parser_map.clear()  # the same dict is ``choices``: reordered in place
        self._name_parser_map.update(placed)
        return parser

    def build(self, name: str) -> None:
        """Build ``name``'s parser, if :meth:`add_lazy` gave it and it is not built yet."""
        if (build := self._builders.get(name)) is not None:
            build()
            if name in self._builders:
                raise ConfigError(f"the builder given for subcommand {name!r} did not add its parser")

    def build_all(self) -> None:
        """Build every subcommand's parser not built yet, in the order they were named."""
        for name in list(self._name_parser_map):
            self.build(name)

    def _get_subactions(self) -> list[argparse.Action]:
        # The help's list of subcommands: every one is built, then listed in the order named.
        self.build_all()
        order = {name: i for i, name in enumerate(self._name_parser_map)}
        return sorted(super()._get_subactions(), key=lambda action: order.get(action.dest, len(order)))

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, *rest: Any) -> None:
        self.build(values[0])  # the chosen subcommand only
        super().__call__(parser, namespace, values, *rest)


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
