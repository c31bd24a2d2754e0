"""What a person sees and changes in MLflow's own web app (3.17, served by the suite's ``mlflow server``),
driven in headless Chromium after one real Ignite training (issue 54).

The training (module-scoped, shared by every test here): 3 epochs of a scored stream ``best_model``
(``n_saved=2``) and a plain stream ``model`` (``n_saved=1``); then the alias ``production`` on
``best_model_2…`` and a rename of ``best_model_3…`` to ``the one we ship``; then 3 more epochs. So
the experiment holds live, evicted, renamed, aliased and pinned checkpoints (``best_model_2…`` left
its slot holding the alias, so it was kept as a pin and the alias moved to it).

Pages: the experiment's Models tab (``#/experiments/{id}/models?workflowType=machine_learning``),
a model's page (``#/experiments/{id}/models/{model id}``: no tags, a title fixed at creation, and a
Description that tracker_saver writes) and the run's page. Every edit is made with the page's own
controls; what tracker_saver reads back is checked through ``find_models``, fsck and a saver's start.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mlflow", reason="MLflow tests need mlflow: pip install 'mlflow>=3.9,<4' (the mlflow extra)")
from playwright.sync_api import expect  # noqa: E402

from tests.conftest_browser import Page  # noqa: E402
from tests.helpers import SCORES, Target, attach, model, trainer_engine  # noqa: E402
from tracker_saver import find_models, rename_model, set_alias  # noqa: E402
from tracker_saver.core.records import Record, RecordState  # noqa: E402
from tracker_saver.integrations.mlflow.registry import MLflowRegistry  # noqa: E402

pytestmark = [pytest.mark.mlflow, pytest.mark.browser]

#: Where the docs' pictures go (``TRACKER_SAVER_SCREENSHOTS=docs/img`` writes them; unset, none is taken).
SHOTS = "TRACKER_SAVER_SCREENSHOTS"


@dataclass
class Trained:
    registry: MLflowRegistry
    target: Target
    experiment_id: str
    url: str  # the experiment in MLflow's web app
    run_id: str  # the MLflow run the training saved into

    def records(self, **query: Any) -> list[Record]:
        return find_models(project="p", registry=self.registry, **query)

    def one(self, **query: Any) -> Record:
        (found,) = self.records(**query)
        return found


@pytest.fixture(scope="module")
def trained(mlflow_server: str, tmp_path_factory: pytest.TempPathFactory) -> Trained:
    from mlflow import MlflowClient

    registry = MLflowRegistry(mlflow_server, experiment_prefix=f"web{uuid.uuid4().hex[:8]}-", timeout=20)
    target = Target(output_uri=str(tmp_path_factory.mktemp("webapp") / "out"), registry=registry)
    saver, net = target.saver(), model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=2, prefix="best", scores=SCORES)
    attach(trainer, saver, {"model": net}, n_saved=1)
    trainer.run([0], max_epochs=3)  # best keeps epochs 2 (0.7) and 3 (0.6)
    saver.flush()
    live = {r.filename.split("_val")[0]: r for r in find_models(project="p", live=True, registry=registry)}
    set_alias(live["best_model_2"].id, "production", registry=registry)
    rename_model(live["best_model_3"].id, "the one we ship", registry=registry)
    trainer.run([0], max_epochs=6)  # scores 0.9 0.4 0.95: best keeps epochs 4 and 6; 2 is pinned for its alias
    saver.close()
    exp = MlflowClient(mlflow_server).get_experiment_by_name(registry.experiment_prefix + "p")
    url = f"{mlflow_server}/#/experiments/{exp.experiment_id}"
    (run,) = MlflowClient(mlflow_server).search_runs([exp.experiment_id])
    return Trained(registry, target, str(exp.experiment_id), url, str(run.info.run_id))


@pytest.fixture(scope="module")
def browser(chromium: Any) -> Iterator[Page]:
    """One page for the module, 1600 x 900 as in the issue, MLflow's assistant panel closed once."""
    page = Page(chromium)
    page.page.set_viewport_size({"width": 1600, "height": 900})
    yield page
    page.context.close()


def _models_tab(trained: Trained, page: Any) -> Any:
    page.goto(f"{trained.url}/models?workflowType=machine_learning")
    expect(page.get_by_role("heading", name="Models")).to_be_visible()
    rows = page.locator(".ag-pinned-left-cols-container [role=row]")
    expect(rows).to_have_count(len(trained.records()))
    return rows


def _model_page(trained: Trained, page: Any, record: Record) -> Any:
    url = f"{trained.url}/models/{record.id}"
    if page.url == url:
        page.reload()  # the same route again: MLflow's app would show what it read before
    else:
        page.goto(url)
    description = page.get_by_test_id("note-view-outer-container").first
    expect(description).to_contain_text("Written by tracker_saver")
    return description


def _shot(page: Any, name: str) -> None:
    """A small PNG for the docs (1200 x 700, 64 colours), only when asked: the suite writes no files."""
    import io
    import os

    from PIL import Image

    folder = os.environ.get(SHOTS)
    if not folder:
        return
    close = page.get_by_role("button", name="Close")  # MLflow's assistant panel, a third of the page
    if close.count() and close.first.is_visible():
        close.first.click()
    page.set_viewport_size({"width": 1200, "height": 700})
    page.wait_for_timeout(500)  # the grid lays its columns out again
    image = Image.open(io.BytesIO(page.screenshot())).convert("RGB").quantize(64)
    image.save(Path(folder) / f"mlflow-{name}.png", optimize=True)
    page.set_viewport_size({"width": 1600, "height": 900})


def test_an_evicted_checkpoint_shows_no_failure_in_the_models_tab(trained: Trained, browser: Page) -> None:
    page = browser.page
    _models_tab(trained, page)
    left = page.locator(".ag-pinned-left-cols-container")
    for record in trained.records():
        status = left.locator(f'[row-id="{record.id}"] [col-id="status"]')
        if record.state is RecordState.EVICTED:
            expect(status).to_have_text("")  # MLflow's "no status": neither Ready nor a red Failed
        else:
            expect(status).to_have_text("Ready")
    _shot(page, "models")
    evicted = trained.one(states=["evicted"], name="model_1.pt")
    expect(_model_page(trained, page, evicted)).to_contain_text("evicted: not loadable")


def test_a_rename_shows_on_the_models_page(trained: Trained, browser: Page) -> None:
    renamed = trained.one(name="the one we ship")
    description = _model_page(trained, browser.page, renamed)
    expect(description).to_contain_text("the one we ship · evicted")
    expect(description).to_contain_text(f"file {renamed.filename}")


def test_the_alias_shows_on_the_pinned_copy_whose_name_is_its_own(trained: Trained, browser: Page) -> None:
    page = browser.page
    pinned = trained.one(states=["pinned"])
    assert pinned.aliases == ("production",)
    rows = _models_tab(trained, page)
    names = rows.locator('[col-id="name"] a').all_inner_texts()
    assert len(names) == len(set(names)), names  # the pin's row never reads the same as its original's
    expect(page.locator(f'[row-id="{pinned.id}"] [col-id="name"] a')).to_have_text("pinned-best_model_2_val_acc=0_7000")
    expect(_model_page(trained, page, pinned)).to_contain_text("aliases: production")
    _shot(page, "pinned")


def test_step_and_score_are_the_only_metric_columns_and_the_save_timings_none(trained: Trained, browser: Page) -> None:
    page = browser.page
    page.set_viewport_size({"width": 5120, "height": 900})  # the grid renders only the columns in view: all of them
    try:
        _models_tab(trained, page)
        headers = page.locator(".ag-header-row-column .ag-header-cell[col-id^='metrics.']")
        expect(headers).to_have_count(2)  # MLflow orders them as it likes: only these two, so both come first
        assert sorted(text.strip() for text in headers.all_inner_texts()) == ["global_step", "score"]
    finally:
        page.set_viewport_size({"width": 1600, "height": 900})
    best = trained.one(live=True, stream="best_model", where="save_bytes>0 and priority>0.92")  # still read
    assert best.metadata["save_bytes"] == best.size


def test_a_models_page_says_where_its_bytes_are(trained: Trained, browser: Page) -> None:
    page = browser.page
    live = trained.one(live=True, stream="best_model", where="score>0.92")
    description = _model_page(trained, page, live)
    expect(description).to_contain_text(f"{live.name} · live")
    expect(description).to_contain_text(f"bytes at {live.uri}")
    _shot(page, "model")


def test_the_runs_page_lists_every_checkpoint_and_none_as_failed(trained: Trained, browser: Page) -> None:
    page = browser.page
    page.goto(f"{trained.url}/runs/{trained.run_id}")
    expect(page.get_by_text(f"Logged models ({len(trained.records())})")).to_be_visible()
    expect(page.get_by_text("pinned-best_model_2_val_acc=0_7000", exact=True)).to_be_visible()
    expect(page.get_by_text("Ready", exact=True)).to_have_count(len(trained.records(states=["live", "pinned"])))
    expect(page.get_by_text("Failed", exact=True)).to_have_count(0)


def test_notes_typed_into_the_description_are_kept_through_the_next_change(trained: Trained, browser: Page) -> None:
    page, live = browser.page, trained.one(live=True, filename="best_model_4_val_acc=0.9000.pt")
    _model_page(trained, page, live)
    sent: list[str] = []
    page.on("request", lambda request: sent.append(f"{request.method} {request.url}"))
    page.get_by_role("button", name="Edit description").click()
    editor = page.locator("textarea")
    editor.press("Control+End")
    editor.type("ready for the demo")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_test_id("note-view-outer-container").first).to_contain_text("ready for the demo")
    assert f"PATCH {trained.url.split('/#')[0]}/ajax-api/2.0/mlflow/logged-models/{live.id}/tags" in sent
    rename_model(live.id, "demo", registry=trained.registry)
    description = _model_page(trained, page, live)
    expect(description).to_contain_text("demo · live")
    expect(description).to_contain_text("ready for the demo")
    assert trained.one(name="demo").id == live.id
    assert _our_ui(trained).get(f"/api/models/{live.id}").json()["record"]["name"] == "demo"


def _our_ui(trained: Trained) -> Any:
    """tracker_saver's own UI app over the same registry, in this process (no server of its own)."""
    from fastapi.testclient import TestClient

    from tracker_saver.ui.app import create_app

    return TestClient(create_app(trained.registry))


def test_register_model_on_the_page_leaves_every_record_as_it_was(trained: Trained, browser: Page) -> None:
    """MLflow's "Register model" makes a registered model version of the LoggedModel: MLflow's own,
    which tracker_saver neither reads nor needs. The records read back exactly as before."""
    page, live = browser.page, trained.one(live=True, stream="best_model", where="score>0.92")
    before = trained.records()
    _model_page(trained, page, live)
    sent: list[str] = []
    page.on("request", lambda request: sent.append(f"{request.method} {request.url.split('/mlflow/')[-1]}"))
    page.get_by_role("button", name="Register model").click()
    dialog = page.get_by_role("dialog", name="Register model")
    dialog.locator("#selectedModel").click()
    page.locator(".du-bois-light-select-item-option").filter(has_text="Create New Model").click()
    dialog.get_by_placeholder("Input a model name").fill(f"ship-{trained.experiment_id}")
    dialog.get_by_role("button", name="Register").click()
    expect(dialog).to_be_hidden()
    assert "POST registered-models/create" in sent and "POST model-versions/create" in sent, sent
    assert trained.records() == before


def test_a_live_checkpoint_deleted_on_the_page_leaves_an_orphan_that_fsck_names_and_repair_reclaims(
    trained: Trained, browser: Page, capsys: pytest.CaptureFixture[str]
) -> None:
    from tracker_saver.cli.main import main
    from tracker_saver.fsck import check, repair

    page, live = browser.page, trained.one(live=True, stream="model")
    _model_page(trained, page, live)
    page.get_by_role("button", name="More actions").click()
    page.get_by_role("menuitem", name="Delete").click()
    page.get_by_role("dialog", name="Delete logged model").get_by_role("button", name="Delete").click()
    expect(page.get_by_role("dialog", name="Delete logged model")).to_be_hidden()
    assert trained.records(live=True, stream="model") == []
    assert _our_ui(trained).get(f"/api/models/{live.id}").status_code == 404
    capsys.readouterr()
    assert main(["models", "show", live.id, "--registry", f"mlflow:{trained.registry.tracking_uri}"]) == 2
    assert f"record {live.id} does not exist" in capsys.readouterr().err  # the CLI reads the delete back too
    orphans = [f for f in check(trained.registry, project="p").problems if f.kind == "orphan"]
    assert [f.key for f in orphans] == [live.key]
    said: list[str] = []
    repair(trained.registry, project="p", delete_orphans=True, echo=said.append)
    assert said == [f"delete orphan {live.uri} ({orphans[0].detail})"]
    assert [f for f in check(trained.registry, project="p").problems if f.kind == "orphan"] == []
    saver, net = trained.target.saver(), model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=1)
    trainer.run([0], max_epochs=1)
    saver.close()
    (again,) = trained.records(live=True, stream="model")
    assert (again.filename, again.slot) == ("model_1.pt", live.slot)
    assert trained.target.counts()["model"] == 1
