"""MLflow's OWN web UI (served by the session's ``mlflow server``) in headless Chromium, after a
real Ignite training through ``TrackerSaver`` into the MLflow registry (issue 28).

The page checked (mlflow 3.17)::

    {tracking_uri}/#/experiments/{experiment_id}/models?workflowType=machine_learning

the experiment's "Models" tab in MLflow's "Model training" mode (without ``workflowType`` the UI
opens in its GenAI mode, where the same table is called "Agent versions"). One row per record,
its ``row-id`` the LoggedModel id; pinned left: ``Model name`` (the codec's name,
``best_model_4_val_acc=0_9000``), ``Status`` (``Ready`` for live, empty for evicted: issue 54) and
``Created``; then ``Logged from``, ``Source run`` (the run's name), ``Registered models``,
``Dataset``, one column per metric (``global_step``, ``score``, ``priority``, ``size``,
``save_*``; their order varies) and per param (``basename``, ``command``, ``git_commit``…). The
grid renders only the columns in view: the page is 5120 px wide so that every one is rendered.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.conftest_browser import Page
from tests.helpers import SCORES, Target, attach, model, trainer_engine

pytestmark = [pytest.mark.mlflow, pytest.mark.browser]

#: The score column's cells: their ``col-id`` is ``metrics.{"metricKey":"score"}``, its quotes HTML-escaped
#: (``&quot;``) in the body's cells but not in the header's.
SCORE_CELL = '[col-id^="metrics."][col-id*="score"]'


def test_mlflows_own_models_page_shows_the_semantic_names_scores_and_status(
    mlflow_server: str, browser_page: Page, tmp_path: Path
) -> None:
    from mlflow import MlflowClient

    from tracker_saver import find_models
    from tracker_saver.core.records import RecordState
    from tracker_saver.integrations.mlflow.codec import STATUS, model_name
    from tracker_saver.integrations.mlflow.registry import MLflowRegistry

    registry = MLflowRegistry(mlflow_server, experiment_prefix=f"ui{uuid.uuid4().hex[:8]}-", timeout=20)
    target = Target(output_uri=str(tmp_path / "out"), registry=registry)
    saver = target.saver()
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=2, prefix="best", scores=SCORES)
    attach(trainer, saver, {"model": net}, n_saved=2)
    trainer.run([0], max_epochs=4)  # scores 0.5 0.7 0.6 0.9: best keeps epochs 4 and 2
    saver.close()

    records = find_models(project="p", run="r", states=["live", "evicted"], registry=registry)
    assert {r.state for r in records} == {RecordState.LIVE, RecordState.EVICTED} and len(records) == 8
    names = {r.id: model_name(r.filename) for r in records}
    assert "best_model_4_val_acc=0_9000" in names.values()
    experiment = MlflowClient(mlflow_server).get_experiment_by_name(registry.experiment_prefix + "p")

    page = browser_page.page
    page.set_viewport_size({"width": 5120, "height": 1000})
    page.goto(f"{mlflow_server}/#/experiments/{experiment.experiment_id}/models?workflowType=machine_learning")
    expect(page.get_by_role("heading", name="Models")).to_be_visible()
    left, center = page.locator(".ag-pinned-left-cols-container"), page.locator(".ag-center-cols-container")
    expect(left.locator("[role=row]")).to_have_count(len(records))
    for record in records:
        row = left.locator(f'[row-id="{record.id}"]')
        expect(row.locator('[col-id="name"]')).to_contain_text(names[record.id])
        shown = {"READY": "Ready", "UNSPECIFIED": ""}[STATUS[record.state]]  # MLflow shows no status for evicted
        expect(row.locator('[col-id="status"]')).to_have_text(shown)
        if record.stream == "best_model":
            assert record.score is not None
            expect(center.locator(f'[row-id="{record.id}"] {SCORE_CELL}')).to_have_text(f"{record.score:g}")
    live_best = [r for r in records if r.stream == "best_model" and r.state is RecordState.LIVE]
    assert sorted(r.score for r in live_best if r.score is not None) == [0.7, 0.9]
