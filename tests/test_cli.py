"""The `tracker-saver` command over real records: every command, help everywhere, one-line errors, fast start."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

import tracker_saver
from tests.helpers import ROOT, SCORES, attach, model, trainer_engine
from tracker_saver.cli.argparse_walk import LazySubcommands, actions
from tracker_saver.cli.console import LINEAGE_KEYS, TIME_FORMAT
from tracker_saver.cli.main import build_parser, main
from tracker_saver.cli.reference import reference_markdown, walk_commands
from tracker_saver.logs.upload import logs_prefix

BEST = ["best_model_6_val_acc=0.9500.pt", "best_model_4_val_acc=0.9000.pt"]


@pytest.fixture
def trained(local_target):
    """A real registry: 6 epochs of a score-based Ignite Checkpoint, n_saved=2, run p/r."""
    saver = local_target.saver()
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=2, prefix="best", scores=SCORES)
    trainer.run([0], max_epochs=6)
    saver.close()
    return local_target.registry


def _json(capsys, *argv: str):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _error(capsys, *argv: str) -> str:
    """The one line a failing command prints on stderr (exit status 2)."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    return err.strip()


def _cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracker_saver", *argv],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )  # fmt: skip


# ============================================================================ help and reference


def test_every_command_and_option_has_help(capsys) -> None:
    commands = list(walk_commands(build_parser()))
    paths = [" ".join(path) for path, _, _ in commands]
    for expected in ("models list", "models get", "models pin", "models alias", "runs list", "runs logs", "ui", "demo"):
        assert expected in paths
    for path, text, sub in commands:
        assert text, f"tracker-saver {' '.join(path)} has no help"
        assert all(action.help for action in actions(sub)), f"an option of {path} has no help"
        with pytest.raises(SystemExit) as done:
            main([*path, "--help"])
        assert done.value.code == 0
        assert f"usage: tracker-saver {' '.join(path)}" in capsys.readouterr().out


def test_the_reference_page_is_the_generated_one() -> None:
    page = (ROOT / "docs" / "cli-reference.md").read_text(encoding="utf-8")
    assert page == reference_markdown(), "docs/cli-reference.md is stale: run python scripts/cli_reference.py"
    for path, _, _ in walk_commands(build_parser()):
        assert f"## `tracker-saver {' '.join(path)}`" in page


def test_help_and_listing_import_neither_torch_nor_ignite_nor_rich_nor_fsck(trained) -> None:
    probe = (
        "import sys, contextlib, io\n"
        "from tracker_saver.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert main(['models', 'list', '--registry', {trained!r}, '--json']) == 0\n"
        "print(sorted(m for m in ('torch', 'ignite', 'rich', 'tracker_saver.fsck') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_models_list_builds_only_its_own_parsers() -> None:
    parser = build_parser()
    assert parser.parse_args(["models", "list", "--limit", "2"]).limit == 2

    def built(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        (group,) = [a for a in actions(parser) if isinstance(a, LazySubcommands)]
        return {name: sub for name, sub in group.choices.items() if sub is not None}

    assert list(built(parser)) == ["models"]
    assert list(built(built(parser)["models"])) == ["list"]


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"tracker-saver {version('tracker-saver')}\n"
    assert _cli("--version").stdout.strip() == f"tracker-saver {tracker_saver.__version__}"


# ============================================================================ models list


def test_models_list_filters_sorts_and_prints_project_state_and_aliases(trained, capsys) -> None:
    argv = ["--registry", trained, "models", "list", "--project", "p", "--where", "score>0.65", "--sort", "-score"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "project" in line)
    for column in ("id", "project", "run", "stream", "name", "state", "aliases", "score"):
        assert column in header
    rows = [[cell.strip() for cell in line.split("│")] for line in out.splitlines() if "best_model_" in line]
    assert [row[5] for row in rows] == [*BEST, "best_model_2_val_acc=0.7000.pt"]
    assert [row[6] for row in rows] == ["live", "live", "evicted"]
    assert rows[0][2] == "p" and "best" in rows[0][7] and "latest" in rows[0][7]


def test_global_options_go_after_the_command_too(trained, capsys) -> None:
    before = _json(capsys, "--registry", trained, "models", "list")
    after = _json(capsys, "models", "list", "--registry", trained)
    assert before == after and len(after) == 5
    assert isinstance(after[0]["id"], str)  # JSON ids are strings, as in the UI's API


def test_models_list_live_json(trained, capsys) -> None:
    rows = _json(capsys, "models", "list", "--live", "--registry", trained)
    assert sorted(r["name"] for r in rows) == sorted(BEST)
    assert {r["state"] for r in rows} == {"live"} and all(isinstance(r["metadata"]["slot"], int) for r in rows)


def test_find_by_filename_name_tag_and_alias(trained, capsys) -> None:
    by_file = _json(capsys, "models", "list", "--registry", trained, "--filename", BEST[0])
    assert [r["filename"] for r in by_file] == [BEST[0]]
    record_id = str(by_file[0]["id"])
    assert main(["models", "rename", record_id, "the one we ship", "--registry", trained]) == 0
    assert main(["models", "tag", record_id, "prod", "candidate", "--registry", trained]) == 0
    capsys.readouterr()
    assert [r["id"] for r in _json(capsys, "models", "list", "--registry", trained, "--name", "the one we ship")] == [
        by_file[0]["id"]
    ]
    assert [r["id"] for r in _json(capsys, "models", "list", "--registry", trained, "--tag", "prod")] == [
        by_file[0]["id"]
    ]
    best = _json(capsys, "models", "list", "--registry", trained, "--project", "p", "--run", "r", "--alias", "best")
    assert [r["filename"] for r in best] == [BEST[0]]


def test_limit_and_offset_page_through_records(trained, capsys) -> None:
    every = [r["id"] for r in _json(capsys, "models", "list", "--registry", trained)]
    page = [r["id"] for r in _json(capsys, "models", "list", "--registry", trained, "--limit", "2", "--offset", "2")]
    assert page == every[2:4]
    assert main(["models", "list", "--registry", trained, "--limit", "2"]) == 0
    assert "records 1-2 of 5: --offset 2 for more" in capsys.readouterr().out


def test_where_on_a_record_field_as_the_docs_show(trained, capsys) -> None:
    rows = _json(capsys, "models", "list", "--registry", trained, "--where", f"name!={BEST[0]}")
    assert len(rows) == 4 and BEST[0] not in [r["name"] for r in rows]


# ============================================================================ one record


def test_show_prints_fields_aliases_and_lineage(trained, capsys) -> None:
    assert main(["models", "show", "p/r/best_model@best", "--registry", trained]) == 0
    out = capsys.readouterr().out
    assert BEST[0] in out
    assert "aliases" in out and "best" in out
    shown = _json(capsys, "models", "show", "p/r/best_model@best", "--registry", trained)
    assert shown["filename"] == BEST[0] and "best" in shown["aliases"]
    lineage = [key for key in LINEAGE_KEYS if key in shown["metadata"]]
    assert "torch" in lineage and "git_commit" in lineage
    section = out.split("lineage:\n")[1].split("metadata:\n")[0]
    assert [line.split()[0] for line in section.splitlines()] == lineage
    assert "sha256" not in out.split("metadata:\n")[1]  # a field is not repeated as metadata
    values = dict(line.split(None, 1) for line in section.splitlines())
    assert values["torch"] == torch.__version__ and values["host"] == socket.gethostname()  # no Python quotes
    assert values["git_dirty"] in ("yes", "no")


def test_show_prints_created_at_as_the_table_does_and_json_keeps_seconds(trained, capsys) -> None:
    record = _json(capsys, "models", "show", "p/r/best_model@best", "--registry", trained)
    assert isinstance(record["id"], str) and isinstance(record["created_at"], float)
    when = time.strftime(TIME_FORMAT, time.localtime(record["created_at"]))
    assert main(["models", "show", record["id"], "--registry", trained]) == 0
    assert f"created_at   {when}\n" in capsys.readouterr().out
    assert main(["models", "list", "--registry", trained, "--filename", record["filename"]]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line.split("│") for line in lines if "created" in line)
    (row,) = [line.split("│") for line in lines if record["filename"] in line]
    assert row[[cell.strip() for cell in header].index("created")].strip() == when


def test_get_streams_the_object_and_verifies_it(trained, tmp_path, capsys) -> None:
    out = _json(capsys, "models", "get", "p/r/best_model@best", str(tmp_path / "dl"), "--registry", trained)
    path = Path(out["path"])
    assert path.parent == tmp_path / "dl" or path == tmp_path / "dl"
    data = path.read_bytes()
    assert hashlib.sha256(data).hexdigest() == out["record"]["sha256"] and len(data) == out["record"]["size"]


def test_get_into_a_folder_names_the_file_a_safe_slug_with_the_checkpoints_extension(
    trained: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = (str(r["id"]) for r in _json(capsys, "models", "list", "--registry", trained, "--live"))
    for ref, name in ((first, "runner-up"), (second, "quickstart_ the one we ship")):
        assert main(["models", "rename", ref, name, "--registry", trained]) == 0
    capsys.readouterr()
    for ref, expected in ((first, "runner-up.pt"), (second, "quickstart_the_one_we_ship.pt")):
        out = _json(capsys, "models", "get", ref, str(tmp_path / "dl") + "/", "--registry", trained)
        assert Path(out["path"]) == tmp_path / "dl" / expected
    assert sorted(p.name for p in (tmp_path / "dl").iterdir()) == ["quickstart_the_one_we_ship.pt", "runner-up.pt"]


def test_get_refuses_a_corrupted_object_and_leaves_no_file(trained, local_target, tmp_path, capsys) -> None:
    record = _json(capsys, "models", "show", "p/r/best_model@best", "--registry", trained)
    slot_file = Path(local_target.output_uri) / record["key"]
    slot_file.write_bytes(b"x" * record["size"])  # same size, other bytes
    dest = tmp_path / "model.pt"
    err = _error(capsys, "models", "get", str(record["id"]), str(dest), "--registry", trained)
    assert err.startswith("tracker-saver: error: ") and "sha256" in err
    assert not dest.exists() and list(tmp_path.glob("model.pt*")) == []


def test_rename_tag_untag_then_show(trained, capsys) -> None:
    top = _json(capsys, "models", "list", "--registry", trained, "--sort", "-score", "--limit", "1")[0]
    ref = str(top["id"])
    assert main(["--registry", trained, "models", "rename", ref, "the one we ship"]) == 0
    assert f"record {ref} is now named 'the one we ship'" in capsys.readouterr().out
    assert main(["--registry", trained, "models", "tag", ref, "prod", "v2"]) == 0
    assert "tags: prod, v2" in capsys.readouterr().out
    assert main(["--registry", trained, "models", "untag", ref, "v2"]) == 0
    assert "tags: prod" in capsys.readouterr().out
    shown = _json(capsys, "--registry", trained, "models", "show", ref)
    assert shown["name"] == "the one we ship" and shown["filename"] == top["filename"] and shown["tags"] == ["prod"]


def test_alias_then_unalias(trained, capsys) -> None:
    ref = str(_json(capsys, "models", "list", "--registry", trained, "--filename", BEST[1])[0]["id"])
    assert main(["models", "alias", ref, "production", "--registry", trained]) == 0
    assert f"record {ref} ({BEST[1]!r}) pinned as record " in capsys.readouterr().out
    pinned = _json(capsys, "models", "show", "p@production", "--registry", trained)
    assert pinned["filename"] == BEST[1] and pinned["state"] == "pinned"
    assert main(["models", "alias", str(pinned["id"]), "staging", "--registry", trained]) == 0
    assert capsys.readouterr().out.strip() == f"p@staging is now record {pinned['id']} ({BEST[1]!r})"
    assert main(["models", "unalias", "p", "staging", "--registry", trained]) == 0
    assert capsys.readouterr().out.strip() == "alias p@staging removed"
    assert main(["models", "unalias", "p", "production", "--registry", trained]) == 0
    assert "stays pinned with no alias" in capsys.readouterr().out
    assert "p@production" in _error(capsys, "models", "show", "p@production", "--registry", trained)


def test_pin_then_unpin(trained, local_target, capsys) -> None:
    pinned = _json(capsys, "models", "pin", "p/r/best_model@best", "--registry", trained)
    assert pinned["state"] == "pinned" and "/+pinned/" in pinned["key"]
    assert (Path(local_target.output_uri) / pinned["key"]).exists()
    rows = _json(capsys, "models", "list", "--registry", trained, "--state", "pinned")
    assert [r["id"] for r in rows] == [pinned["id"]]
    assert main(["models", "list", "--registry", trained, "--state", "pinned"]) == 0
    assert "pinned" in capsys.readouterr().out
    assert main(["models", "unpin", str(pinned["id"]), "--registry", trained]) == 0
    assert "unpinned" in capsys.readouterr().out
    assert not (Path(local_target.output_uri) / pinned["key"]).exists()


def test_history_lists_every_record_of_a_slot_oldest_first(trained, capsys) -> None:
    rows = _json(capsys, "models", "history", "p/r/best_model@latest", "--registry", trained)
    assert len(rows) >= 2 and len({r["metadata"]["slot"] for r in rows}) == 1
    assert [r["created_at"] for r in rows] == sorted(r["created_at"] for r in rows)


# ============================================================================ runs


def test_runs_list_counts_streams_records_and_live(trained, capsys) -> None:
    rows = _json(capsys, "runs", "list", "--registry", trained)
    assert [(r["project"], r["run"], r["streams"], r["records"], r["live"]) for r in rows] == [
        ("p", "r", ["best_model"], 5, 2)
    ]
    assert main(["runs", "list", "--registry", trained]) == 0
    out = capsys.readouterr().out
    assert "last save" in out and "best_model" in out


def test_runs_logs_lists_and_downloads_a_runs_logs(trained, local_target, tmp_path, capsys) -> None:
    assert main(["runs", "logs", "p/r", "--registry", trained]) == 0
    assert capsys.readouterr().out.strip() == "p/r has no logs"
    log_file = Path(local_target.output_uri) / logs_prefix("p", "r") / "train.log"
    log_file.parent.mkdir(parents=True)
    log_file.write_text("epoch 1: loss 0.5\n")
    rows = _json(capsys, "runs", "logs", "p/r", "--registry", trained)
    assert [(r["name"], r["size"]) for r in rows] == [("train.log", 18)]
    assert main(["runs", "logs", "p/r", "--registry", trained]) == 0
    assert "train.log" in capsys.readouterr().out
    paths = _json(capsys, "runs", "logs", "p/r", "--download", str(tmp_path / "dl"), "--registry", trained)
    assert [Path(p).read_text() for p in paths] == ["epoch 1: loss 0.5\n"]


def test_runs_logs_needs_project_slash_run(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["runs", "logs", "just-a-run"])
    assert "argument PROJECT/RUN: 'just-a-run' is not PROJECT/RUN, e.g. mnist/r1" in capsys.readouterr().err


def test_counts_of_one_read_in_the_singular(trained: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fsck", "--registry", trained]) == 0
    assert capsys.readouterr().out.strip().endswith("1 stream checked: no problems")


def test_a_reader_that_stops_early_gets_no_traceback(trained) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracker_saver", "models", "list", "--registry", trained, "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # as `| head -0` does before the CLI has written anything
    err = proc.stderr.read()
    assert proc.wait(60) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err, err


# ============================================================================ bad input: one clear line


def test_a_registry_typo_is_an_error_not_an_empty_registry(tmp_path, capsys) -> None:
    typo = tmp_path / "regsitry.db"
    for argv in (
        ["models", "list"],
        ["models", "show", "1"],
        ["runs", "list"],
        ["fsck"],
        ["models", "rename", "1", "x"],
        ["models", "tag", "1", "x"],
        ["models", "get", "1", str(tmp_path / "x.pt")],
        ["runs", "logs", "p/r"],
        ["runs", "stats", "p/r"],
        ["ui"],
    ):
        assert _error(capsys, *argv, "--registry", str(typo)) == (
            f"tracker-saver: error: no registry at {typo}: check the path, or pass --registry PATH, the file the "
            "saver wrote (or set TRACKER_SAVER_REGISTRY)"
        )
    assert not typo.exists()


def test_a_number_comparison_with_text_names_the_bad_value(trained, capsys) -> None:
    assert _error(capsys, "models", "list", "--registry", trained, "--where", "score>abc") == (
        "tracker-saver: error: where score>'abc': > compares numbers, and 'abc' is not a number: give a number "
        "(e.g. 'score>0.9'), or use = or != to compare text"
    )


def test_a_negative_limit_is_refused(trained, capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["models", "list", "--registry", trained, "--limit", "-1"])
    assert done.value.code == 2
    assert capsys.readouterr().err == (
        "tracker-saver models list: error: argument --limit: '-1' is not a count: use a whole number, 0 or more "
        "(see `tracker-saver models list --help`)\n"
    )


@pytest.mark.parametrize(
    ("typed", "meant"), [(["modles", "list"], "models"), (["models", "lst"], "list"), (["runs", "lits"], "list")]
)
def test_a_mistyped_command_gets_the_closest_one(capsys, typed: list[str], meant: str) -> None:
    with pytest.raises(SystemExit) as done:
        main(typed)
    assert done.value.code == 2
    assert (
        f"invalid choice: '{typed[-1] if meant == 'list' else typed[0]}': did you mean '{meant}'?"
        in capsys.readouterr().err
    )


def test_a_list_that_matches_nothing_says_so(trained, capsys) -> None:
    assert main(["models", "list", "--registry", trained, "--project", "nope"]) == 0
    assert capsys.readouterr().out == "0 records match\n"
    assert main(["models", "list", "--registry", trained, "--limit", "2", "--offset", "10"]) == 0
    assert capsys.readouterr().out == "no records past --offset 10: the query matches 5 records\n"  # all but epoch 5


def test_a_long_listing_comes_page_by_page_and_a_page_that_needs_wider_columns_opens_a_new_table(
    tmp_path, capsys
) -> None:
    from tests.contracts.records import live
    from tracker_saver.registry.sqlite import SQLiteRegistry

    registry = SQLiteRegistry(tmp_path / "r.db")
    with registry.atomic():
        ids = [live(registry, f"m_{i}.pt", slot=i).id for i in range(350)]  # m_99.pt, then m_100.pt: wider
    registry.close()

    def listing(*argv: str) -> tuple[list[str], str]:
        assert main(["models", "list", "--registry", str(tmp_path / "r.db"), *argv]) == 0
        out = capsys.readouterr().out
        return [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│")], out

    assert listing()[0] == ["id", *ids[:100], "id", *ids[100:]]  # pages of 100, 200, 50: two tables
    first_cells, out = listing("--offset", "120", "--limit", "150")
    assert first_cells == ["id", *ids[120:270]]
    assert out.endswith("┘\nrecords 121-270 of 350: --offset 270 for more\n")


@pytest.mark.parametrize("command", ["fsck", "repair"])
def test_fsck_of_a_run_that_does_not_exist_says_nothing_matched_and_exits_2(trained, capsys, command) -> None:
    assert _error(capsys, command, "--registry", trained, "--run", "nope") == (
        "tracker-saver: error: no records match --run nope: nothing was checked; see `tracker-saver runs list` "
        "for the runs and their projects"
    )
    assert main([command, "--registry", trained, "--run", "r"]) == 0  # the run that exists: checked, clean


def test_an_or_in_a_where_expression_says_it_is_not_supported(trained, capsys) -> None:
    error = _error(capsys, "--registry", trained, "models", "list", "--where", "a>1 or b<2")
    assert "'a>1 or b<2' joins conditions with 'or'" in error and "use 'in'" in error


def test_a_bad_where_expression_is_one_clear_line(trained, capsys) -> None:
    assert "is not 'KEY OP VALUE'" in _error(capsys, "--registry", trained, "models", "list", "--where", "score>>")


def test_a_missing_record_is_one_line_without_a_traceback(trained) -> None:
    done = _cli("--registry", trained, "models", "rename", "42", "x")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"tracker-saver: error: record 42 does not exist in sqlite:///{trained}: see `tracker-saver models list` for ids"
    ]


def test_clearml_without_a_configuration_is_one_line(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLEARML_", "TRAINS_"))}
    env.update(HOME=str(tmp_path), CLEARML_CONFIG_FILE=str(tmp_path / "clearml.conf"), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "tracker_saver", "models", "list", "--registry", "clearml"],
        capture_output=True, text=True, cwd=ROOT, env=env,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "tracker-saver: error: ClearML is not configured on this machine: run `clearml-init`, or set "
        "CLEARML_API_HOST, CLEARML_API_ACCESS_KEY and CLEARML_API_SECRET_KEY"
    ]


def test_ui_without_the_extra_says_how_to_install_it(trained, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "tracker_saver.ui", None)  # what a missing extra looks like
    assert _error(capsys, "ui", "--registry", trained) == (
        "tracker-saver: error: tracker-saver ui needs fastapi and uvicorn: pip install 'fastapi>=0.110.1' 'uvicorn>=0.30' (the ui extra)"
    )


def test_ui_serves_the_registry_it_is_given(trained) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "tracker_saver", "ui", "--registry", trained, "--port", str(port)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stderr is not None
        said = server.stderr.readline()  # once it listens it says so (or it exits with its error)
        assert said.startswith(f"tracker-saver UI at http://127.0.0.1:{port}/"), said + server.stderr.read()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as page:
            assert page.status == 200
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_ui_refuses_a_port_that_is_not_one(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["ui", "--port", "99999"])
    assert "'99999' is not a TCP port: use a number from 1 to 65535" in capsys.readouterr().err


def test_the_registry_comes_from_the_environment(trained, monkeypatch, capsys) -> None:
    monkeypatch.setenv("TRACKER_SAVER_REGISTRY", trained)
    assert len(_json(capsys, "models", "list")) == 5
