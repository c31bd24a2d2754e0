"""TrackerSaver with records in a real MLflow tracking server, used as an MLflow user would:
under an active run (``mlflow.start_run``), later without it, and through the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

mlflow = pytest.importorskip("mlflow", reason="MLflow tests need mlflow: pip install -e '.[mlflow]' -c constraints.txt")

from tests import forkserver  # noqa: E402
from tests.helpers import ROOT, SCORES, attach, model, trainer_engine  # noqa: E402
from tracker_saver import ConfigError, TrackerSaver, find_models  # noqa: E402
from tracker_saver.integrations.mlflow.registry import MLflowRegistry  # noqa: E402

pytestmark = pytest.mark.mlflow


def _train(saver: TrackerSaver, epochs: int) -> None:
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=2, prefix="best", scores=SCORES)
    trainer.run([0], max_epochs=epochs)
    saver.close()


@pytest.fixture
def experiment(mlflow_uri: str) -> str:
    """A fresh experiment, set as MLflow's current one; its name is the records' project."""
    name = f"e{uuid.uuid4().hex[:10]}"
    mlflow.set_tracking_uri(mlflow_uri)
    mlflow.set_experiment(name)
    return name


def test_under_an_active_run_every_checkpoint_is_a_model_of_that_run(
    mlflow_uri: str, experiment: str, tmp_path: Path
) -> None:
    with mlflow.start_run(run_name="r1") as run:
        saver = TrackerSaver(tmp_path / "out", registry=MLflowRegistry())  # $MLFLOW_TRACKING_URI
        assert (saver.project, saver.run) == (experiment, "r1")
        _train(saver, epochs=4)
    client = mlflow.MlflowClient(mlflow_uri)
    models = client.search_logged_models([run.info.experiment_id])
    assert len(models) == 4 and {m.source_run_id for m in models} == {run.info.run_id}
    assert client.get_run(run.info.run_id).data.tags["tracker_saver.run"] == "r1"
    live = find_models(project=experiment, run="r1", live=True, order_by="-score", registry=f"mlflow:{mlflow_uri}")
    assert [r.score for r in live] == sorted(SCORES[:4], reverse=True)[:2]
    assert len(list((tmp_path / "out").rglob("*.pt"))) == 2
    assert {r.metadata["mlflow_run_id"] for r in live} == {run.info.run_id}  # lineage, on every record


def test_a_later_process_without_the_active_run_saves_into_the_same_run(
    mlflow_uri: str, experiment: str, tmp_path: Path
) -> None:
    with mlflow.start_run(run_name="r1") as run:
        _train(TrackerSaver(tmp_path / "out", registry="mlflow"), epochs=2)
    assert mlflow.active_run() is None
    # A restart names the project and run itself: it finds the run by its tracker_saver.run tag.
    later = TrackerSaver(tmp_path / "out", registry=f"mlflow:{mlflow_uri}", project=experiment, run="r1")
    _train(later, epochs=2)
    models = mlflow.MlflowClient(mlflow_uri).search_logged_models([run.info.experiment_id])
    assert len(models) == 4 and {m.source_run_id for m in models} == {run.info.run_id}


def test_async_saves_under_an_active_run_keep_n_saved_and_every_record(
    mlflow_uri: str, experiment: str, tmp_path: Path
) -> None:
    with mlflow.start_run(run_name="r1") as run:
        _train(TrackerSaver(tmp_path / "out", registry="mlflow", async_upload=True), epochs=5)
    records = find_models(project=experiment, run="r1", order_by="created_at", registry="mlflow")
    assert sorted(r.score for r in records if r.state.loadable) == sorted(SCORES[:5])[-2:]
    assert {r.state.value for r in records} == {"live", "evicted"}, records  # nothing left pending
    assert len(list((tmp_path / "out").rglob("*.pt"))) == 2
    assert all(r.metadata["save_background"] is True for r in records if r.state.loadable)
    assert {r.metadata["mlflow_run_id"] for r in records} == {run.info.run_id}  # lineage


def test_no_active_run_and_no_project_is_a_config_error_before_anything_is_written(
    mlflow_uri: str, tmp_path: Path
) -> None:
    assert mlflow.active_run() is None
    with pytest.raises(ConfigError, match=r"no active MLflow run.*mlflow\.start_run.*project= and run="):
        TrackerSaver(tmp_path / "out", registry=f"mlflow:{mlflow_uri}")
    assert not (tmp_path / "out").exists()


def test_the_cli_lists_and_gets_the_records_of_an_mlflow_run(mlflow_uri: str, experiment: str, tmp_path: Path) -> None:
    with mlflow.start_run(run_name="r1"):
        _train(TrackerSaver(tmp_path / "out", registry="mlflow"), epochs=3)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": mlflow_uri}

    def cli(*argv: str, uri: str = mlflow_uri) -> subprocess.CompletedProcess[str]:
        # A new process, forked from the tests' fork server (mlflow and torch imported once there):
        # a fresh interpreter's imports cost about 2.3 s of CPU per command here.
        args = ["--registry", "mlflow", *argv]
        return forkserver.run("tracker_saver", args, env={**env, "MLFLOW_TRACKING_URI": uri}, timeout=120)

    listed = cli("models", "list", "--project", experiment, "--live", "--json")
    assert listed.returncode == 0, listed.stderr
    names = sorted(r["name"] for r in json.loads(listed.stdout))
    assert names == sorted(r.name for r in find_models(project=experiment, live=True, registry="mlflow"))
    assert len(names) == 2
    got = cli("models", "get", f"{experiment}/r1/best_model@best", str(tmp_path / "best.pt"))
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "best.pt").stat().st_size > 0
    # A tracking URI without its scheme: one line naming the fix, no traceback.
    wrong = cli("models", "list", "--project", experiment, uri="127.0.0.1:5000")
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr, wrong.stderr
    assert "MLFLOW_TRACKING_URI=http://HOST:PORT" in wrong.stderr and len(wrong.stderr.splitlines()) == 1


def test_the_ui_lists_and_shows_the_records_of_an_mlflow_run(mlflow_uri: str, experiment: str, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from tracker_saver.ui.app import create_app

    with mlflow.start_run(run_name="r1"):
        _train(TrackerSaver(tmp_path / "out", registry="mlflow"), epochs=3)
    client = TestClient(create_app(f"mlflow:{mlflow_uri}"), raise_server_exceptions=False)
    body = client.get("/api/models", params={"project": experiment, "state": "live", "order_by": "-score"}).json()
    expected = find_models(project=experiment, live=True, order_by="-score", registry="mlflow")
    assert [i["name"] for i in body["items"]] == [r.name for r in expected] and body["total"] == 2
    detail = client.get(f"/api/models/{body['items'][0]['id']}")
    assert detail.status_code == 200, detail.text
    assert detail.json()["record"]["score"] == expected[0].score
