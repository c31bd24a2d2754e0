"""The `tracker-saver` command: list/show/rename/tag over real records, help everywhere, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import SCORES, attach, model, trainer_engine
from tracker_saver.cli import build_parser, main


@pytest.fixture
def trained(local_target):
    saver = local_target.saver()
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=2, prefix="best", scores=SCORES)
    trainer.run([0], max_epochs=6)
    return local_target.registry


def _subcommands(parser):
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, sub in action.choices.items():
                yield [name]
                for rest in _subcommands(sub):
                    yield [name, *rest]


def test_every_command_has_help(capsys) -> None:
    commands = list(_subcommands(build_parser()))
    assert ["models", "list"] in commands and ["demo"] in commands
    for command in commands:
        with pytest.raises(SystemExit) as done:
            main([*command, "--help"])
        assert done.value.code == 0
        assert "usage: tracker-saver" in capsys.readouterr().out


def test_models_list_filters_sorts_and_prints_a_table(trained, capsys) -> None:
    assert (
        main(["--registry", trained, "models", "list", "--project", "p", "--where", "score>0.65", "--sort", "-score"])
        == 0
    )
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "best_model_" in line]
    assert [line.split("│")[2].strip() for line in lines] == [
        "best_model_6_val_acc=0.9500.pt",
        "best_model_4_val_acc=0.9000.pt",
        "best_model_2_val_acc=0.7000.pt",
    ]
    assert "state" in out and "score" in out


def test_models_list_json_and_live(trained, capsys) -> None:
    main(["--registry", trained, "models", "list", "--live", "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["name"] for r in rows) == ["best_model_4_val_acc=0.9000.pt", "best_model_6_val_acc=0.9500.pt"]
    assert {r["state"] for r in rows} == {"live"} and all(isinstance(r["metadata"]["slot"], int) for r in rows)


def test_rename_then_show(trained, capsys) -> None:
    main(["--registry", trained, "models", "list", "--json", "--sort", "-score", "--limit", "1"])
    top = json.loads(capsys.readouterr().out)[0]
    assert main(["--registry", trained, "models", "rename", top["id"], "the one we ship"]) == 0
    assert "the one we ship" in capsys.readouterr().out
    main(["--registry", trained, "models", "show", top["id"], "--json"])
    shown = json.loads(capsys.readouterr().out)
    assert shown["name"] == "the one we ship" and shown["filename"] == top["filename"]
    assert main(["--registry", trained, "models", "tag", top["id"], "prod"]) == 0
    assert "prod" in capsys.readouterr().out


def test_errors_are_one_line_without_a_traceback(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tracker_saver", "--registry", str(tmp_path / "r.db"), "models", "rename", "42", "x"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"tracker-saver: error: record 42 does not exist in sqlite:///{tmp_path}/r.db: see `tracker-saver models list` for ids"
    ]


def test_a_bad_where_expression_is_one_clear_line(tmp_path, capsys) -> None:
    assert main(["--registry", str(tmp_path / "r.db"), "models", "list", "--where", "score>>"]) == 2
    assert "is not 'KEY OP VALUE'" in capsys.readouterr().err


def test_the_registry_comes_from_the_environment(trained, monkeypatch, capsys) -> None:
    monkeypatch.setenv("TRACKER_SAVER_REGISTRY", trained)
    main(["models", "list", "--json"])
    assert len(json.loads(capsys.readouterr().out)) == 5
