"""Any text through every door (the saver, every CLI command's text arguments, every UI endpoint's fields).

Hypothesis draws text with lone surrogates, control characters, bidirectional controls and
invisible characters mixed into any Unicode. Each input gets either success, and then reads back
identical, or the one clear error (a ``ConfigError`` naming the field; one line and exit status
2 from the CLI; a 4xx with a one-line ``detail`` from the UI). Never a traceback, a 500, a
half-written record or a stream that later saves cannot use. Examples are bounded so the suite
stays fast; CI runs them derandomized (its Hypothesis profile).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

from tests.helpers import SCORES, attach, model, trainer_engine
from tracker_saver import TrackerSaver, get_model, resolve_model
from tracker_saver.cli.argparse_walk import actions
from tracker_saver.cli.main import build_parser, main
from tracker_saver.cli.reference import walk_commands
from tracker_saver.core.errors import ConfigError
from tracker_saver.core.records import UploadInfo
from tracker_saver.core.text import first_refused

#: Characters the text rule is about, drawn often: controls, surrogates, bidi, invisible, joiners.
_SHARP = list("\x00\x1b\r\n\t\x7f\x9b\ud800\udcff\u202e\u2066\u2028\u200b\ufeff\u200d/ .=_-é@")
TEXT = st.text(alphabet=st.one_of(st.characters(codec=None, categories=None), st.sampled_from(_SHARP)), max_size=12)
#: Text the rule allows, often: so that many examples get past the first name to the save itself.
PLAIN = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Cf", "Zl", "Zp")), min_size=1, max_size=12
)
EITHER = st.integers(0, 3).flatmap(lambda draw: TEXT if draw == 0 else PLAIN.filter(str.strip))
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _trained(root: Path) -> str:
    """A registry of a real training: best_model keeps 2 scored checkpoints of 4, run p/r; record 2 is live."""
    registry = str(root / "registry.db")
    saver = TrackerSaver(root / "out", project="p", run="r", registry=registry)
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=2, prefix="best", scores=SCORES)
    trainer.run([0], max_epochs=4)
    saver.close()
    return registry


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _trained(tmp_path_factory.mktemp("fuzz"))


# ------------------------------------------------------------------ the saver


def _rows(db: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT id, state, key, sha256, size FROM records ORDER BY id").fetchall()


def _files(folder: Path) -> set[str]:
    """The objects under ``folder`` but its owner objects (``.tracker_saver/``, never a checkpoint)."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and ".tracker_saver" not in p.parts}


@FUZZ
@given(project=EITHER, run=EITHER, prefix=EITHER, score_name=EITHER, name=EITHER, tag=EITHER, key=EITHER, value=EITHER)
def test_any_names_and_metadata_through_the_saver_save_identical_or_refuse_before_writing(
    project, run, prefix, score_name, name, tag, key, value, tmp_path
) -> None:
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    db, out = str(root / "registry.db"), root / "out"
    try:
        saver = TrackerSaver(out, project=project, run=run, registry=db)
    except ConfigError as exc:
        assert (
            first_refused(project) is not None
            or first_refused(run) is not None
            or not (project.strip() and run.strip())
        )
        assert str(exc).startswith(("project ", "run ")) and not root.joinpath("out").exists(), exc
        event("refused by TrackerSaver(...)")
        return
    labels = {"name": name or "n", "tag": tag or "t", "key": f"x-{key}", "value": value}

    def label(info: UploadInfo) -> UploadInfo:
        info.name, info.tags = labels["name"], [labels["tag"]]
        info.metadata[labels["key"]] = labels["value"]
        return info

    saver.add_pre_upload(label)
    trainer = Engine(lambda engine, batch: None)
    handler = Checkpoint({"model": model()}, saver, n_saved=1, filename_prefix=prefix, score_name=score_name or None,
                         score_function=(lambda engine: 0.5) if score_name else None)  # fmt: skip
    trainer.add_event_handler(Events.EPOCH_COMPLETED, handler)
    try:
        trainer.run([0], max_epochs=1)
    except ConfigError as exc:
        assert " holds U+" in str(exc) or "not a usable name" in str(exc), exc  # the one clear error
        assert _rows(db) == [] and _files(out) == set()  # refused before anything was written
        event("refused at the first save")
        labels.update(name="n", tag="t", key="x-k", value="v")  # the same saver and stream go on
        handler = Checkpoint({"model": model()}, saver, n_saved=1)
        trainer = Engine(lambda engine, batch: None)
        trainer.add_event_handler(Events.EPOCH_COMPLETED, handler)
        trainer.run([0], max_epochs=1)
    else:
        event("saved")
    (record,) = saver.records(live=True)
    saver.close()
    assert (record.project, record.run, record.name, record.tags) == (project, run, labels["name"], (labels["tag"],))
    assert record.metadata[labels["key"]] == labels["value"]
    assert (
        _files(out) == {record.key}
        and hashlib.sha256((out / (record.key or "")).read_bytes()).hexdigest() == record.sha256
    )


# ------------------------------------------------------------------ every CLI command


#: Commands with no text door to fuzz here: they train (demo), import a ClearML session (sync) or serve (ui).
_NOT_FUZZED = {("demo",), ("sync",), ("ui",)}
#: Arguments that are paths on this machine, not text for records: a fixed registry, destination and
#: output folder (fuzzed, `streams take-over`'s OUTPUT_URI wrote owner objects into the working folder).
_PATHS = {"registry", "dest", "download", "output_uri"}
#: What each positional gets when another argument is fuzzed.
_DEFAULTS = {"ref": "2", "name": "kept", "tags": "t", "alias_name": "prod", "project_name": "p", "project_run": "p/r",
             "project": "p", "run": "r", "stream": "model", "from_id": "none"}  # fmt: skip


#: Every command's parser, by its path (``("models", "list")``).
PARSERS = {
    tuple(path): parser
    for path, _, parser in walk_commands(build_parser())
    if not any(isinstance(a, argparse._SubParsersAction) for a in actions(parser)) and tuple(path) not in _NOT_FUZZED
}


def _takes_text(action: argparse.Action) -> bool:
    stores = isinstance(action, (argparse._StoreAction, argparse._AppendAction))
    return stores and action.dest not in _PATHS and (action.type in (None, str) or action.dest == "project_run")


#: Every (command, text argument) pair of the parser: options and positionals that take text.
CLI_DOORS = [(path, action) for path, parser in PARSERS.items() for action in actions(parser) if _takes_text(action)]


def _argv(path: tuple[str, ...], fuzzed: argparse.Action, text: str, registry: str, dest: str) -> list[str]:
    options, positionals = ["--registry", registry], []
    for action in actions(PARSERS[path]):
        value = text if action is fuzzed else None
        if action.option_strings:
            if value is None and action.required:
                value = _DEFAULTS[action.dest]
            if value is not None:
                options.append(f"{action.option_strings[0]}={value}")  # a value may start with '-'
        elif action.dest == "dest":
            positionals.append(dest)
        elif action.dest == "output_uri" and value is None:  # a folder of the test's (streams take-over)
            positionals.append(dest + "output")
        elif isinstance(action, (argparse._StoreAction, argparse._AppendAction)):
            positionals.append(value if value is not None else _DEFAULTS[action.dest])
    return [*path, *options, *(["--", *positionals] if positionals else [])]


def test_the_cli_fuzz_reaches_every_command_with_text_arguments() -> None:
    commands = {path for path, _ in CLI_DOORS}
    assert {("models", "list"), ("models", "rename"), ("models", "tag"), ("models", "unalias"), ("runs", "stats"),
            ("runs", "logs"), ("fsck",), ("repair",), ("events",), ("prune",)} <= commands  # fmt: skip
    assert len(commands) == 19 and len(CLI_DOORS) >= 35


def _cli_answers(
    door: tuple[tuple[str, ...], argparse.Action], text: str, registry: str, dest: str, capsys: Any
) -> int:
    """Run one command with ``text`` in one argument; check its answer; its exit status."""
    path, fuzzed = door
    before = get_model("2", registry=registry)
    argv = _argv(path, fuzzed, text, registry, dest)
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's own exit (a value it refuses): still one line, status 2
        status = exc.code
    out, err = capsys.readouterr()
    assert status in (0, 1, 2, 3), f"{argv}: exit status {status}\n{err}"  # 3: a gate refused the move (docs/cli.md)
    assert err.count("\n") <= 1 and "Traceback" not in err, f"{argv}:\n{err}"
    assert first_refused(out + err, allow="\n") is None, f"{argv} printed raw control text: {(out + err)!r}"
    if status == 2:
        assert err.startswith("tracker-saver"), err
    after = get_model("2", registry=registry)
    edit = path[-1] if fuzzed.dest in ("name", "tags", "alias_name") else None
    if edit == "rename" and status == 0:
        assert after.name == text  # reads back identical
    elif edit == "tag" and status == 0:
        assert text in after.tags
    elif edit == "alias" and status == 0:  # on record 2, or on the pinned copy of it that the alias made
        named = resolve_model(f"{before.project}@{text}", registry=registry)
        assert text in named.aliases and "2" in (named.id, str(named.metadata.get("pinned_from")))
    elif status != 0 and edit is not None:
        assert (after.name, after.tags, after.aliases) == (before.name, before.tags, before.aliases)
    return int(status or 0)


#: One text of each kind the rule refuses, and the empty text.
REFUSED_KINDS = ["bad\udcffbyte", "\x1b[1A\rfake", "\x1b]8;;http://evil.example/\x1b\\", "gpj\u202eexe", "a\x00b", "a\u2028b",
                 "be\u200bst", ""]  # fmt: skip


def test_every_cli_text_argument_answers_every_kind_of_refused_text(registry, tmp_path_factory, capsys) -> None:
    dest = str(tmp_path_factory.mktemp("dest")) + "/"
    for door in CLI_DOORS:
        for text in REFUSED_KINDS:
            _cli_answers(door, text, registry, dest, capsys)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(door=st.sampled_from(CLI_DOORS), text=EITHER)
def test_any_text_in_any_cli_argument_succeeds_and_reads_back_or_is_one_clear_line(
    door, text, registry, tmp_path_factory, capsys
) -> None:
    status = _cli_answers(door, text, registry, str(tmp_path_factory.mktemp("dest")) + "/", capsys)
    event(f"exit status {status}")


# ------------------------------------------------------------------ every UI endpoint


def _url(text: str) -> str:
    """``text`` in a URL as a client sends it: UTF-8, percent-encoded (a lone surrogate as its raw bytes)."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def _json_body(**fields: Any) -> dict[str, Any]:
    """A JSON body as bytes; ``json.dumps`` escapes a lone surrogate as ``\\udXXX``, as any JSON client may."""
    return {"content": json.dumps(fields).encode(), "headers": {"Content-Type": "application/json"}}


#: Each door: the endpoint (method, path as the schema names it) and the request carrying the text.
UI_DOORS: dict[str, tuple[str, str, Callable[[str], tuple[str, dict[str, Any]]]]] = {
    "list": ("GET", "/api/models", lambda t: (f"/api/models?project={_url(t)}&run={_url(t)}&stream={_url(t)}", {})),
    "list where": ("GET", "/api/models", lambda t: (f"/api/models?where=name%3D{_url(t)}", {})),
    "list order": ("GET", "/api/models", lambda t: (f"/api/models?order_by={_url(t)}", {})),
    "chart": ("GET", "/api/chart", lambda t: (f"/api/chart?project={_url(t)}&where={_url(t)}", {})),
    "show": ("GET", "/api/models/{record_id}", lambda t: (f"/api/models/{_url(t)}", {})),
    "rename": ("PATCH", "/api/models/{record_id}", lambda t: ("/api/models/2", _json_body(name=t))),
    "tag": ("POST", "/api/models/{record_id}/tags", lambda t: ("/api/models/2/tags", _json_body(tags=[t]))),
    "untag": ("DELETE", "/api/models/{record_id}/tags", lambda t: (f"/api/models/2/tags?tag={_url(t)}", {})),
    "alias": ("POST", "/api/models/{record_id}/aliases", lambda t: ("/api/models/2/aliases", _json_body(alias=t))),
    "unalias": (
        "DELETE",
        "/api/models/{record_id}/aliases/{alias}",
        lambda t: (f"/api/models/2/aliases/{_url(t)}", {}),
    ),
    "pin": ("POST", "/api/models/{record_id}/pin", lambda t: (f"/api/models/{_url(t)}/pin", {})),
    "unpin": ("DELETE", "/api/models/{record_id}/pin", lambda t: (f"/api/models/{_url(t)}/pin", {})),
    "download": ("GET", "/api/models/{record_id}/download", lambda t: (f"/api/models/{_url(t)}/download", {})),
}


@pytest.fixture(scope="module")
def ui(registry: str) -> Any:
    from fastapi.testclient import TestClient

    from tracker_saver.ui.app import create_app

    return TestClient(create_app(registry), raise_server_exceptions=False)


def test_the_ui_fuzz_reaches_every_endpoint(ui) -> None:
    endpoints = {(method.upper(), path) for path, item in ui.app.openapi()["paths"].items() for method in item}
    assert {(method, path) for method, path, _ in UI_DOORS.values()} == endpoints


def _ui_answers(door: str, text: str, ui: Any, registry: str) -> int:
    """Send one request with ``text`` in one field; check the answer; its status."""
    method, _, request = UI_DOORS[door]
    url, body = request(text)
    before = get_model("2", registry=registry)
    response = ui.request(method, url, **body)
    assert response.status_code < 500, f"{door} {text!r}: {response.status_code} {response.text}"
    if response.status_code >= 400:
        detail = response.json()["detail"]
        assert isinstance(detail, str) and "\n" not in detail and first_refused(detail) is None, detail
        if door in ("rename", "tag", "alias"):
            after = get_model("2", registry=registry)
            assert (after.name, after.tags, after.aliases) == (before.name, before.tags, before.aliases)
    elif door == "rename":
        assert response.json()["name"] == text == get_model("2", registry=registry).name  # reads back identical
    elif door in ("tag", "alias"):
        assert text in response.json()["tags" if door == "tag" else "aliases"]
    return int(response.status_code)


def test_every_ui_field_answers_every_kind_of_refused_text(ui, registry) -> None:
    for door in UI_DOORS:
        for text in REFUSED_KINDS:
            _ui_answers(door, text, ui, registry)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(door=st.sampled_from(sorted(UI_DOORS)), text=EITHER)
def test_any_text_in_any_ui_field_succeeds_and_reads_back_or_is_a_one_line_4xx(door, text, ui, registry) -> None:
    event(f"HTTP {_ui_answers(door, text, ui, registry)}")
