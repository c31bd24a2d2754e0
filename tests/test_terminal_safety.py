"""No byte a record holds reaches a terminal raw: ESC written into SQLite, MLflow and ClearML, then every command.

Another writer (a tracker's web UI, a script with its SDK, another program on the SQLite file)
may store names, tags, metadata and stream names that break the text rule. Each backend gets
escape sequences planted as that writer would, bypassing tracker_saver, and then every
``tracker-saver`` command that reads records runs in-process: its output (stdout and stderr
together) must hold no 0x1b byte, and show each planted text escaped.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

from tests.helpers import model
from tracker_saver import TrackerSaver
from tracker_saver.cli.main import main

#: What the other writer plants: an OSC 8 link, a retitle, cursor moves, colours.
NAME = "best\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\"
TAG = "tag\x1b[1A\rfake"
KEY = "k\x1b[2J"
VALUE = "v\x1b]0;owned\x07"


def _train(saver: TrackerSaver) -> None:
    """Two epochs, n_saved=1: one evicted record and one live, each with a slot history."""
    trainer = Engine(lambda engine, batch: None)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": model()}, saver, n_saved=1))
    trainer.run([0], max_epochs=2)
    saver.close()


def _commands(project: str, run: str, ref: str, dest: Path) -> list[list[str]]:
    """Every command that shows records, runs or a report, and every edit that echoes a record."""
    return [
        ["models", "list", "--project", project],
        ["models", "list", "--project", project, "--json"],
        ["models", "show", ref],
        ["models", "history", ref],
        ["models", "get", ref, str(dest) + "/"],
        ["models", "tag", ref, "ok"],
        ["models", "untag", ref, "ok"],
        ["models", "alias", ref, "production"],
        ["models", "unalias", project, "production"],
        ["models", "pin", ref],
        ["models", "rename", ref, NAME],  # refused: the rule, in one escaped line
        ["models", "tag", ref, TAG],
        ["models", "list", "--name", NAME],
        ["runs", "list", "--project", project],
        ["runs", "stats", f"{project}/{run}"],
        ["runs", "logs", f"{project}/{run}"],
        ["fsck", "--project", project],
        ["repair", "--project", project, "--dry-run"],
    ]


def _run_every_command(
    registry: str, project: str, run: str, ref: str, dest: Path, capsys: pytest.CaptureFixture[str]
) -> str:
    """Run every command; each one's output holds no ESC. Returns all output."""
    dest.mkdir()
    shown = []
    for argv in _commands(project, run, ref, dest):
        status = main(["--registry", registry, *argv])
        out, err = capsys.readouterr()
        assert "\x1b" not in out + err, f"{argv}: a raw ESC reached the terminal:\n{out}{err}"
        assert status in (0, 1, 2) and err.count("\n") <= 1, f"{argv} exited {status}:\n{err}"
        shown.append(out + err)
    return "\n".join(shown)


def _assert_shown_escaped(output: str, *planted: str) -> None:
    for text in planted:
        escaped = text.encode("unicode_escape").decode("ascii")
        assert escaped in output or escaped.replace("\\", "\\\\") in output, f"{text!r} is not shown escaped"


def test_escapes_planted_in_sqlite_never_reach_the_terminal(tmp_path: Path, capsys) -> None:
    db = tmp_path / "registry.db"
    _train(TrackerSaver(tmp_path / "out", project="p", run="r", registry=db))
    stream = "model\x1b[31m"
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:  # another program, straight into the file
        conn.execute("UPDATE records SET name = ?, stream = ?", (NAME, stream))
        conn.execute("INSERT INTO tags (record_id, tag) SELECT id, ? FROM records", (TAG,))
        conn.execute(
            "INSERT INTO metadata (record_id, key, type, num, text) SELECT id, ?, 'str', NULL, ? FROM records",
            (KEY, VALUE),
        )
    output = _run_every_command(str(db), "p", "r", "2", tmp_path / "dest", capsys)
    _assert_shown_escaped(output, NAME, TAG, KEY, VALUE, stream)


@pytest.mark.mlflow
def test_escapes_planted_in_mlflow_never_reach_the_terminal(mlflow_uri: str, tmp_path: Path, capsys) -> None:
    from mlflow import MlflowClient

    project = f"term-{uuid.uuid4().hex[:8]}"
    saver = TrackerSaver(tmp_path / "out", project=project, run="r", registry=f"mlflow:{mlflow_uri}")
    _train(saver)
    (live,) = saver.records(live=True)
    client = MlflowClient(mlflow_uri)
    for record in saver.records():  # as a script with MLflow's own client would
        tags = client.get_logged_model(record.id).tags
        metadata = {**json.loads(tags["tracker_saver.metadata"]), KEY: VALUE}
        planted = {"name": NAME, "tags": [TAG], "metadata": metadata}
        client.set_logged_model_tags(record.id, {f"tracker_saver.{k}": json.dumps(v) for k, v in planted.items()})
    output = _run_every_command(f"mlflow:{mlflow_uri}", project, "r", live.id, tmp_path / "dest", capsys)
    _assert_shown_escaped(output, NAME, TAG, KEY, VALUE)


@pytest.mark.clearml
def test_escapes_planted_in_clearml_never_reach_the_terminal(clearml_standin, tmp_path: Path, capsys) -> None:
    project = f"term-{uuid.uuid4().hex[:8]}"
    saver = TrackerSaver(tmp_path / "out", project=project, run="r", registry="clearml")
    _train(saver)
    (live,) = saver.records(live=True)
    edit: Callable[..., None] = clearml_standin.edit_model
    for record in saver.records():  # as ClearML's web UI would
        edit(record.id, name=NAME, tags=[*clearml_standin.models[record.id]["tags"], TAG])
    output = _run_every_command("clearml", project, "r", live.id, tmp_path / "dest", capsys)
    _assert_shown_escaped(output, NAME, TAG)
