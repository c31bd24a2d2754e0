"""Every CLI error in the CLI's words: one ``tracker-saver: error:`` line naming the flag as typed, and an exit
status that tells a usage error, a refused gate, a failed check and a bug apart (docs/cli.md's table)."""

from __future__ import annotations

import re
import signal
import socket
from pathlib import Path

import pytest

from tests.helpers import ROOT, attach, model, trainer_engine
from tracker_saver import find_models, set_alias
from tracker_saver.cli.main import main


@pytest.fixture
def scored(local_target) -> str:
    """A real registry: 3 epochs of a score-based Checkpoint (scores 0.5, 0.7, 0.6), n_saved=3."""
    saver = local_target.saver()
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=3, prefix="best", scores=[0.5, 0.7, 0.6])
    trainer.run([0], max_epochs=3)
    saver.close()
    return str(local_target.registry)


def one_error(capsys, argv: list[str], status: int = 2) -> str:
    assert main(argv) == status
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("tracker-saver: error: ")
    return err.strip()


def test_prune_without_a_rule_names_the_options_as_typed(scored, capsys) -> None:
    assert one_error(capsys, ["prune", "--dry-run", "--registry", scored]) == (
        "tracker-saver: error: prune needs --keep-last N or --older-than AGE (or both), "
        "e.g. --keep-last 1000 or --older-than 30d"
    )


def test_ui_on_a_busy_port_is_one_error_line_and_a_usage_exit_not_uvicorns(scored, capsys) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        err = one_error(capsys, ["ui", "--registry", scored, "--port", str(port)])
    assert err == (
        f"tracker-saver: error: --port {port}: cannot listen on 127.0.0.1:{port} (Address already in use): "
        "stop what listens there, or pass another --port"
    )


def test_a_gate_metric_one_letter_off_gets_did_you_mean(scored, capsys) -> None:
    first = find_models(project="p", registry=scored)[0]
    err = one_error(capsys, ["models", "alias", first.id, "production", "--if-better", "scor", "--registry", scored])
    assert re.fullmatch(
        rf"tracker-saver: error: --if-better 'scor': record {first.id} \('best_model_1_val_acc=0.5000.pt'\) has no "
        r"'scor': did you mean 'score'\? \(its numeric metadata: .*\bscore\b.*\)",
        err,
    ), err


def exit_statuses_documented() -> dict[int, str]:
    text = (ROOT / "docs" / "cli.md").read_text()
    table = text[text.index("| exit status |") :].split("\n\n")[0]
    return {int(m[1]): m[2] for m in re.finditer(r"^\| (\d+) \| (.+)$", table, re.M)}


def test_each_documented_exit_status_is_what_its_case_exits_with(
    scored, capsys, monkeypatch, tmp_path, pythons_sigint_handler
) -> None:
    """The bug (70) is a stand-in, a command whose function raises what none should (no real bug is known);
    Ctrl-C (130) is a real SIGINT sent while the command runs."""
    records = find_models(project="p", registry=scored)
    set_alias(records[1].id, "production", registry=scored)  # score 0.7
    Path(records[0].uri.removeprefix("file://")).write_bytes(b"not the checkpoint")
    cases = {
        0: ["runs", "list", "--registry", scored],
        1: ["fsck", "--registry", scored],  # a live record's bytes changed
        2: ["prune", "--registry", scored],  # neither --keep-last nor --older-than
        3: ["models", "alias", records[2].id, "production", "--if-better", "score", "--registry", scored],
    }
    ran = {status: main(argv) for status, argv in cases.items()}
    import tracker_saver.find

    monkeypatch.setattr(tracker_saver.find, "run_summaries", lambda records: 1 / 0)
    ran[70] = main(["runs", "list", "--registry", scored])
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        "tracker-saver: internal error: division by zero (a bug: please report it with the traceback above)"
    )
    monkeypatch.setattr(tracker_saver.find, "run_summaries", lambda records: signal.raise_signal(signal.SIGINT))
    ran[130] = main(["runs", "list", "--registry", scored])  # a real Ctrl-C, while the command runs
    documented = exit_statuses_documented()
    assert documented.pop(141)  # the reader going away: test_cli's real pipe
    assert ran == {status: status for status in documented}


def test_a_mistyped_option_gets_the_closest_option_as_did_you_mean(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["models", "list", "--registry", ":memory:", "--sotr", "-score"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "tracker-saver: error: unrecognized arguments: --sotr -score: did you mean '--sort'? "
        "(see `tracker-saver --help`)\n"
    )
