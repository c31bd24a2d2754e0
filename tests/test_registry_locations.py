"""One registry story: SQLAlchemy's URL forms, errors that say where the registry is, folders made as output_uri's."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tracker_saver import ConfigError, TrackerSaver
from tracker_saver.cli.main import main
from tracker_saver.registry import open_registry


def made_registry(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    open_registry(path).close()
    return path


@pytest.fixture
def fresh_home(tmp_path, monkeypatch) -> Path:
    """A user with no registry yet, working in an empty folder."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TRACKER_SAVER_REGISTRY", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


@pytest.mark.parametrize("spelled", ["sqlite:/tmp/x.db", "sqlite://tmp/x.db"])
def test_a_sqlite_url_with_one_or_two_slashes_is_refused_with_the_accepted_forms_and_no_mkdir(
    fresh_home, spelled
) -> None:
    with pytest.raises(
        ConfigError, match=r"not a SQLite URL: write sqlite:///RELATIVE/PATH or sqlite:////ABSOLUTE"
    ) as e:
        TrackerSaver(fresh_home / "out", registry=spelled)
    assert "sqlite:////tmp/x.db" in str(e.value) and "mkdir" not in str(e.value)
    assert list(fresh_home.iterdir()) == []  # nothing made, not even a folder named 'sqlite:'


def test_a_relative_sqlite_url_that_finds_nothing_names_the_absolute_registry_it_may_have_meant(
    fresh_home, tmp_path, capsys
) -> None:
    absolute = made_registry(tmp_path / "runs" / "x.db")
    relative = str(absolute).lstrip("/")
    assert main(["--registry", f"sqlite:///{relative}", "models", "list"]) == 2
    assert capsys.readouterr().err == (
        f"tracker-saver: error: no registry at {relative} (relative to the current folder): for {absolute}: "
        f"--registry sqlite:///{absolute} or --registry {absolute}\n"
    )


@pytest.mark.parametrize("left", ["registry.db", "demo-output/registry.db"])
def test_the_cli_that_finds_no_default_registry_names_the_one_the_demo_or_quickstart_left_here(
    fresh_home, capsys, left
) -> None:
    made_registry(fresh_home / left)
    assert main(["models", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tracker-saver: error: no registry at {fresh_home.parent}/home/.tracker_saver/registry.db:")
    assert err.endswith(f"./{left} exists: --registry ./{left}\n")
    assert main(["--registry", f"./{left}", "models", "list", "--json"]) == 0


def test_the_api_says_registry_equals_where_the_cli_says_dash_dash_registry(fresh_home) -> None:
    from tracker_saver import RegistryError, find_models

    made_registry(fresh_home / "registry.db")
    with pytest.raises(RegistryError, match=r"\./registry\.db exists: registry='\./registry\.db'$"):
        find_models()


def test_a_registry_folder_is_created_at_any_depth_as_output_uris_are(fresh_home) -> None:
    registry = fresh_home / "team" / "vision" / "runs" / "registry.db"
    TrackerSaver(fresh_home / "a" / "b" / "out", registry=registry).close()
    assert registry.is_file()


def test_a_saver_logs_once_which_registry_it_uses(fresh_home, caplog) -> None:
    caplog.set_level(logging.INFO, logger="tracker_saver.save.saver")
    TrackerSaver(fresh_home / "out", project="p", run="r", registry="registry.db").close()
    lines = [r.getMessage() for r in caplog.records if r.name == "tracker_saver.save.saver"]
    assert lines == [
        f"p/r: records in registry sqlite:///{fresh_home}/registry.db, checkpoints at file://{fresh_home}/out"
    ]
