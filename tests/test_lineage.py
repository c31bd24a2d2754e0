"""Lineage: each record says what made it (git, host, command, versions), secrets masked."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import tempfile
import textwrap
from pathlib import Path

import ignite
import pytest
import torch

from tests import forkserver
from tests.helpers import attach, model, trainer_engine
from tracker_saver import TrackerSaver, find_models
from tracker_saver.save.lineage import LINEAGE_KEYS, git_state, lineage, mask_command

SECRETS = ("hunter2", "AKIASECRET", "s3cr3t", "tok_123", "pw0rd")

TRAIN = textwrap.dedent(
    """
    import sys
    import torch
    from ignite.engine import Engine, Events
    from ignite.handlers import Checkpoint
    from tracker_saver import TrackerSaver

    output, registry, run = sys.argv[1:4]
    saver = TrackerSaver(output, project="lineage", run=run, registry=registry)
    trainer = Engine(lambda engine, batch: None)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": torch.nn.Linear(2, 1)}, saver, n_saved=2))
    trainer.run([0], max_epochs=2)
    saver.close()
    """
)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit holding train.py."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    (repo / "train.py").write_text(TRAIN)
    _git(repo, "add", "train.py")
    _git(repo, "commit", "-q", "-m", "train")
    return repo


def _train(repo: Path, tmp_path: Path, run: str) -> None:
    args = [
        str(tmp_path / "output"),
        str(tmp_path / "registry.db"),
        run,
        "--password=hunter2",
        "--aws-secret-access-key",
        "AKIASECRET",
        "--db",
        "postgres://me:s3cr3t@db.example.com/x",
        "api_token=tok_123",
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    # `python train.py ARGS` in the repository, as a process forked from the tests' fork server (torch
    # imported once): lineage reads this process's argv, folder and git state, none of them the server's.
    with tempfile.TemporaryFile(mode="w+") as out:
        proc = forkserver.spawn("train.py", args, env=env, cwd=repo, stdout=out, stderr=out)
        code = proc.wait(120)
        out.seek(0)
        assert code == 0, out.read()


def test_records_carry_the_commit_dirty_flag_masked_command_and_versions(repo: Path, tmp_path: Path) -> None:
    _train(repo, tmp_path, "clean")
    (repo / "train.py").write_text(TRAIN + "\n# an edit\n")
    (repo / "notes.txt").write_text("untracked files alone do not make a run dirty")
    _train(repo, tmp_path, "dirty")

    head = _git(repo, "rev-parse", "HEAD")
    records = find_models(project="lineage", registry=str(tmp_path / "registry.db"))
    assert len(records) == 4
    for record in records:
        meta = record.metadata
        assert meta["git_commit"] == head
        assert meta["git_dirty"] is (record.run == "dirty")
        assert meta["host"] == socket.gethostname()
        assert meta["python"] == platform.python_version()
        assert meta["torch"] == torch.__version__
        assert meta["ignite"] == ignite.__version__
        command = str(meta["command"])
        assert command.startswith("train.py ")
        assert "--password=*** --aws-secret-access-key ***" in command
        assert "postgres://***@db.example.com/x api_token=***" in command
        assert not any(secret in command for secret in SECRETS)
        assert "clearml_task_id" not in meta
    clean = find_models(project="lineage", where="git_dirty=False", registry=str(tmp_path / "registry.db"))
    assert {r.run for r in clean} == {"clean"} and len(clean) == 2
    by_commit = find_models(project="lineage", where=f"git_commit={head}", registry=str(tmp_path / "registry.db"))
    assert len(by_commit) == 4


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["t.py", "--aws-secret-access-key", "hunter2"], "t.py --aws-secret-access-key ***"),
        (["t.py", "--password=hunter2", "--lr=0.1"], "t.py --password=*** --lr=0.1"),
        (["t.py", "-api-key", "hunter2", "-v"], "t.py -api-key *** -v"),
        (["t.py", "db_password=hunter2", "epochs=3"], "t.py db_password=*** epochs=3"),
        (["t.py", "--url", "https://user:hunter2@host/p"], "t.py --url https://***@host/p"),
        (["t.py", "--opts", "token=hunter2 lr=0.1"], "t.py --opts 'token=*** lr=0.1'"),
        (["t.py", "--use-auth", "--lr", "0.1"], "t.py --use-auth --lr 0.1"),
    ],
)
def test_the_command_line_never_carries_a_secret(argv: list[str], shown: str) -> None:
    assert mask_command(argv) == shown
    assert "hunter2" not in mask_command(argv)


def test_outside_a_git_repository_the_git_keys_are_absent(tmp_path: Path) -> None:
    assert git_state(tmp_path) == {}
    script = tmp_path / "train.py"  # the script's folder counts, not the working folder
    script.write_text("")
    facts = lineage([str(script)])
    assert set(facts) <= set(LINEAGE_KEYS)
    assert "git_commit" not in facts


def test_without_git_installed_the_git_keys_are_absent(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert git_state(repo)["git_dirty"] is False
    monkeypatch.setenv("PATH", "")
    assert git_state(repo) == {}


def test_lineage_can_be_turned_off_and_callbacks_win_on_a_clash(tmp_path: Path) -> None:
    def rename_command(info):
        info.metadata["command"] = "set by the callback"
        return info

    on = TrackerSaver(tmp_path / "on", run="on", registry=tmp_path / "reg.db", pre_upload=[rename_command])
    off = TrackerSaver(tmp_path / "off", run="off", registry=tmp_path / "reg.db", lineage=False)
    for saver in (on, off):
        net = model()
        trainer = trainer_engine(net)
        attach(trainer, saver, {"model": net}, n_saved=1)
        trainer.run([0], max_epochs=1)
    (with_lineage,) = on.records()
    (without,) = off.records()
    assert with_lineage.metadata["command"] == "set by the callback"
    assert with_lineage.metadata["host"] == socket.gethostname()
    assert not set(LINEAGE_KEYS) & set(without.metadata)
    with pytest.raises(ValueError, match="lineage='no'"):
        TrackerSaver(tmp_path / "x", registry=tmp_path / "reg.db", lineage="no")  # type: ignore[arg-type]


@pytest.mark.clearml
def test_a_run_under_a_clearml_task_records_the_task_id(clearml_task, tmp_path: Path) -> None:
    saver = TrackerSaver(tmp_path / "out", run="r", registry=tmp_path / "reg.db")
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=1)
    trainer.run([0], max_epochs=1)
    assert [r.metadata["clearml_task_id"] for r in saver.records()] == [str(clearml_task.id)]
