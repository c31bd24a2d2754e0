"""Bad inputs at the models commands' door: ``tracker-saver models`` and the functions it calls.

The CLI is a thin layer over the public API (each command calls a function a user could call), so a
bad record id, name or tag is one row whether it comes from ``rename_model``/``add_tags`` or from
the shell; the shell adds bytes that are not UTF-8, which must give one error line, never a traceback.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.bad_inputs import (
    RULE,
    Row,
    World,
    case,
    fit,
    raises,
    row_of,
    run_cli,
)
from tracker_saver import (
    rename_model,
)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World.under(tmp_path)


@pytest.fixture
def row(request: pytest.FixtureRequest) -> Row:
    return row_of(request)


NAMES = "Record ids, names and tags"


@case(
    group=NAMES,
    id="record-id-not-a-number",
    input='rename_model("best", "v2")  # SQLite record ids are integers',
    error="RecordNotFoundError",
    message="record id 'best' is not a SQLite record id (an integer): see `tracker-saver models list` for ids",
    left="the registry as it was",
)
def test_a_record_id_that_is_not_a_number_is_refused_on_sqlite(row: Row, world: World) -> None:
    fit(world.saver())
    before = world.snapshot()
    with raises(row):
        rename_model("best", "v2", registry=world.db)
    assert world.snapshot() == before


@case(
    group=NAMES,
    id="rename-to-nothing",
    input='rename_model(id, "  ")',
    error="ConfigError",
    message="new name '  ' for record … is empty: give a non-empty name",
    left="the record with its name as it was",
)
def test_a_rename_to_blank_text_is_refused_keeping_the_name(row: Row, world: World) -> None:
    saver = world.saver()
    fit(saver)
    (record,) = saver.records(live=True)
    with raises(row):
        rename_model(record.id, "  ", registry=world.db)
    assert saver.registry.records.get(record.id).name == "model_1.pt"


@case(
    group=NAMES,
    id="tag-with-an-osc-8-link",
    input='add_tags(id, ["ok\\x1b]8;;http://evil.example/\\x1b\\\\"])  # the same from the CLI and the UI',
    error="ConfigError",
    message="tag of record … 'ok\\x1b]8;;http://evil.example/\\x1b\\\\' holds U+001B (ESC) at character 3, a control "
    "character, which can rewrite what a terminal shows: remove it " + RULE,
    left="the record with its tags as they were",
)
def test_a_tag_holding_a_terminal_link_is_refused_keeping_the_tags(row: Row, world: World) -> None:
    from tracker_saver import add_tags

    saver = world.saver()
    fit(saver)
    (record,) = saver.records(live=True)
    with raises(row):
        add_tags(record.id, ["ok\x1b]8;;http://evil.example/\x1b\\"], registry=world.db)
    assert saver.registry.records.get(record.id).tags == ()


@case(
    group=NAMES,
    id="rename-with-a-bidi-override",
    input='rename_model(id, "model\\u202egpj.exe")  # shows as model‮gpj.exe, read right to left',
    error="ConfigError",
    message="new name for record …: 'model\\u202egpj.exe' holds U+202E at character 6, a bidirectional control, which "
    "reorders how the text around it is shown: remove it " + RULE,
    left="the record with its name as it was (joiners such as U+200D, which emoji need, are allowed)",
)
def test_a_rename_with_a_bidi_override_is_refused_and_a_joiner_is_allowed(row: Row, world: World) -> None:
    saver = world.saver()
    fit(saver)
    (record,) = saver.records(live=True)
    with raises(row):
        rename_model(record.id, "model\u202egpj.exe", registry=world.db)
    assert rename_model(record.id, "🧑\u200d🔬 ship it", registry=world.db).name == "🧑\u200d🔬 ship it"


@case(
    group=NAMES,
    id="cli-rename-not-utf8",
    input="tracker-saver models rename ID $'bad\\xffbyte'  # tag, list --name and --where alike",
    error="ConfigError",
    message="tracker-saver: error: new name for record …: 'bad\\udcffbyte' holds U+DCFF at character 4, a lone surrogate: "
    "the text is not valid UTF-8 (bytes Python could not decode): pass it as UTF-8 text " + RULE,
    left="the record as it was; one line on stderr, exit status 2 (before the fix: a traceback)",
)
def test_arguments_that_are_not_utf8_get_one_error_line_and_exit_status_2(
    row: Row, world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    fit(world.saver())
    before = world.snapshot()
    bad = os.fsdecode(b"bad\xffbyte")  # what Python makes of the bytes a shell passes
    status, out, err = run_cli(["--registry", str(world.db), "models", "rename", "1", bad], capsys)
    assert (status, out) == (2, "") and re.fullmatch(row.pattern() + "\n", err), err
    for argv in (["tag", "1", bad], ["list", "--name", bad], ["list", "--where", f"name={bad}"]):
        status, out, err = run_cli(["--registry", str(world.db), "models", *argv], capsys)
        assert (status, out, err.count("\n")) == (2, "", 1) and "holds U+DCFF" in err, err
    assert world.snapshot() == before
