"""A registry spec is read in one place (``parse_registry``): kinds, paths, typos and missing folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracker_saver import ConfigError, TrackerSaver
from tracker_saver.registry import BACKENDS, RegistrySpec, open_registry, parse_registry
from tracker_saver.registry.shared import shared_registry


@pytest.mark.parametrize(
    ("spec", "kind", "location"),
    [
        ("clearml", "clearml", None),
        ("clearml:team/ckpts", "clearml", "team/ckpts"),
        ("mlflow", "mlflow", None),
        ("mlflow:http://127.0.0.1:5000", "mlflow", "http://127.0.0.1:5000"),
        (":memory:", "sqlite", ":memory:"),
        ("sqlite:////tmp/any-name", "sqlite", "/tmp/any-name"),
        ("/tmp/runs/registry.db", "sqlite", "/tmp/runs/registry.db"),
        ("/tmp/runs/registry.sqlite", "sqlite", "/tmp/runs/registry.sqlite"),
    ],
)
def test_each_spelling_reads_as_its_kind_and_location(spec: str, kind: str, location: str | None) -> None:
    assert parse_registry(spec) == RegistrySpec(kind, location)
    assert kind in BACKENDS


def test_the_environment_then_the_default_name_the_registry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert parse_registry(None) == RegistrySpec("sqlite", str(Path("~/.tracker_saver/registry.db").expanduser()))
    monkeypatch.setenv("TRACKER_SAVER_REGISTRY", str(tmp_path / "team.db"))
    assert parse_registry(None) == parse_registry("sqlite") == RegistrySpec("sqlite", str(tmp_path / "team.db"))
    monkeypatch.setenv("TRACKER_SAVER_REGISTRY", "mlflow")
    assert parse_registry(None).kind == "mlflow" and parse_registry("sqlite").kind == "sqlite"


@pytest.mark.parametrize(
    ("typo", "meant"), [("mlfow", "mlflow"), ("clearm", "clearml"), ("MLflow", "mlflow"), ("sqlit", "sqlite")]
)
def test_a_kind_one_letter_off_is_refused_with_did_you_mean(typo: str, meant: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ConfigError, match=f"registry '{typo}' is neither a registry kind nor a registry file: did you mean '{meant}'"
    ):
        TrackerSaver(tmp_path / "out", registry=typo)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no file named after the typo, no output folder


def test_a_new_file_without_a_registry_suffix_is_refused_unless_asked_for(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"names no registry file: .* ends in \.db, \.sqlite or \.sqlite3 .*sqlite:///"
    ):
        parse_registry(str(tmp_path / "registry"))
    assert parse_registry(f"sqlite:///{tmp_path}/registry") == RegistrySpec("sqlite", f"{tmp_path}/registry")
    existing = tmp_path / "old-registry"
    open_registry(f"sqlite:///{existing}").close()
    assert parse_registry(str(existing)) == RegistrySpec("sqlite", str(existing))  # an existing file is taken as named


def test_one_location_is_one_shared_registry_whatever_its_spelling(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    assert shared_registry(str(path)) is shared_registry(f"sqlite:///{path}")


@pytest.mark.clearml
@pytest.mark.mlflow
def test_a_clearml_saver_with_the_mlflow_registry_saves_under_the_tasks_project(
    clearml_server, clearml_project: str, mlflow_uri: str, tmp_path: Path
) -> None:
    # No MLflow run is active: the task alone names the project and the run (issue 43, case 1).
    from ignite.engine import Engine
    from ignite.handlers import Checkpoint

    from tests.conftest_clearml import init_task
    from tests.helpers import model
    from tracker_saver import find_models
    from tracker_saver.clearml import ClearMLSaver

    (tmp_path / "out").mkdir()  # ClearML refuses a missing local output_uri
    task = init_task(clearml_project, "to-mlflow")
    try:
        saver = ClearMLSaver(output_uri=str(tmp_path / "out"), registry="mlflow")
        Checkpoint({"model": model()}, saver, n_saved=1)(Engine(lambda e, b: None))
        saver.close()
    finally:
        task.close()
    assert (saver.project, saver.run) == (clearml_project, f"to-mlflow.{task.id}")
    assert [r.name for r in find_models(project=clearml_project, registry="mlflow")] == ["model_0.pt"]
