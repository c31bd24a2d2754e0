"""The argparse shim (tracker_saver/cli/argparse_walk.py) against the installed Python: every internal
it reads must exist with the shape it relies on, so a Python upgrade that changes one fails here,
naming the attribute, rather than as a wrong or missing CLI reference page."""

from __future__ import annotations

import argparse
import functools

import pytest

from tracker_saver.cli.argparse_walk import INTERNALS, actions, options, subcommands, usage
from tracker_saver.core.errors import ConfigError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="demo")
    parser.add_argument("--registry", help="where records live")
    commands = parser.add_subparsers(dest="command")
    run = commands.add_parser("run", help="run it")
    either = run.add_mutually_exclusive_group()
    either.add_argument("--fast", action="store_true", help="quickly")
    either.add_argument("--slow", action="store_true", help="slowly")
    run.add_argument("path", help="what to run")
    commands.add_parser("stop", help="stop it")
    return parser


def _owner(dotted: str) -> object:
    return functools.reduce(getattr, dotted.split(".")[1:], argparse)


def _instance(owner: str) -> object:
    parser = _parser()
    if owner == "argparse":
        return argparse
    if owner == "argparse.ArgumentParser":
        return parser
    (sub,) = [a for a in parser._actions if type(a).__name__ == "_SubParsersAction"]
    return sub


@pytest.mark.parametrize(("owner", "name"), INTERNALS, ids=[f"{o}.{n}" for o, n in INTERNALS])
def test_every_internal_the_shim_reads_exists_in_this_python(owner: str, name: str) -> None:
    assert hasattr(_instance(owner), name), (
        f"this Python's argparse has no {owner}.{name}: update tracker_saver/cli/argparse_walk.py"
    )


def test_the_actions_are_every_argument_in_the_order_added() -> None:
    parser = _parser()
    found = actions(parser)
    assert all(isinstance(a, argparse.Action) for a in found), "ArgumentParser._actions holds non-Actions"
    assert [a.dest for a in found] == ["help", "registry", "command"], "ArgumentParser._actions changed order"


def test_the_options_leave_out_help_and_the_subcommands() -> None:
    assert [a.dest for a in options(_parser())] == ["registry"], "argparse._HelpAction or _SubParsersAction changed"


def test_every_subcommand_comes_with_its_help_and_parser() -> None:
    found = list(subcommands(_parser()))
    assert [(name, text) for name, text, _ in found] == [("run", "run it"), ("stop", "stop it")], (
        "argparse._SubParsersAction._choices_actions no longer carries each subcommand's help"
    )
    assert all(isinstance(sub, argparse.ArgumentParser) for _, _, sub in found)
    assert [a.dest for a in options(found[0][2])] == ["fast", "slow", "path"]


def test_the_usage_shows_a_mutually_exclusive_group_as_argparse_does() -> None:
    (_, _, run), _ = subcommands(_parser())
    assert usage(run, "demo run", 100) == "demo run [-h] [--fast | --slow] path", (
        "ArgumentParser._mutually_exclusive_groups no longer drives the usage line"
    )
    assert run.format_usage() == f"usage: {usage(run, 'demo run', 100)}\n"


def test_a_missing_internal_is_a_config_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = _parser()  # (building a parser needs _HelpAction itself)
    monkeypatch.delattr(argparse, "_HelpAction")
    with pytest.raises(
        ConfigError, match=r"argparse has no argparse\._HelpAction: tracker_saver/cli/argparse_walk\.py"
    ):
        options(parser)
    del parser._mutually_exclusive_groups
    with pytest.raises(ConfigError, match=r"no ArgumentParser\._mutually_exclusive_groups"):
        usage(parser, "demo", 100)
