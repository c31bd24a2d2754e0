"""The UI in real headless Chromium over the real server and a registry from a real Ignite training."""

from __future__ import annotations

import hashlib
import http.server
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.conftest_browser import Page, Training, UiServer
from tests.helpers import ROOT, SCORES, attach, model, trainer_engine
from tracker_saver import TrackerSaver, models
from tracker_saver.cli.console import TIME_FORMAT
from tracker_saver.ui.app import CHART_STATES

pytestmark = pytest.mark.browser

XSS = "<img src=x onerror=alert(1)>"


def row_names(page) -> list[str]:
    return page.locator("#rows .record-name").all_text_contents()


def stored_name(ui_training: Training, record_id: str) -> str:
    with sqlite3.connect(ui_training.registry) as conn:
        return str(conn.execute("SELECT name FROM records WHERE id = ?", (int(record_id),)).fetchone()[0])


def chart_points(ui_training: Training, stream: str) -> list[models.Record]:
    records = models.find_models(stream=stream, states=list(CHART_STATES), registry=ui_training.registry)
    return [r for r in records if r.score is not None]


def open_page(browser_page: Page, ui_server: UiServer, query: str = "") -> object:
    page = browser_page.page
    page.goto(ui_server.url + "/" + query)
    page.wait_for_selector("#rows tr")
    return page


def test_table_shows_the_semantic_names_newest_first(browser_page, ui_server, ui_training):
    page = open_page(browser_page, ui_server)
    expected = [r.name for r in models.find_models(order_by="-created_at", registry=ui_training.registry)]
    assert row_names(page) == expected
    assert "best_model_4_val_acc=0.9000.pt" in expected
    assert page.locator("#range").text_content() == f"1–{len(expected)} of {len(expected)}"
    page.click("th button[data-key=score]")
    expect(page.locator("th[aria-sort]")).to_have_attribute("aria-sort", "ascending")
    expect(page.locator("#rows .record-name").first).to_have_text("best_model_1_val_acc=0.5000.pt")
    assert "order=score" in page.url
    assert browser_page.errors == []


def test_where_filter_shows_exactly_the_matching_records_and_the_url_restores_it(browser_page, ui_server, ui_training):
    page = open_page(browser_page, ui_server)
    page.fill("#f-where", "score>0.65 and global_step<=4")
    page.click("#apply")
    expected = {
        r.name for r in models.find_models(where=["score>0.65", "global_step<=4"], registry=ui_training.registry)
    }
    assert expected == {"best_model_2_val_acc=0.7000.pt", "best_model_4_val_acc=0.9000.pt"}
    expect(page.locator("#rows tr")).to_have_count(2)
    assert set(row_names(page)) == expected
    assert "where=score" in page.url
    page.reload()
    expect(page.locator("#rows tr")).to_have_count(2)
    assert set(row_names(page)) == expected
    assert page.input_value("#f-where") == "score>0.65 and global_step<=4"
    assert browser_page.errors == []


def test_rename_in_the_browser_persists_and_survives_one_more_epoch(browser_page, ui_server, ui_training):
    # The older of the two live records of the stream that saves every epoch: the next epoch evicts it.
    record = models.find_models(stream="model", states=["live"], order_by="created_at", registry=ui_training.registry)[
        0
    ]
    page = open_page(browser_page, ui_server)
    page.click(f"#rows tr[data-id='{record.id}']")
    page.wait_for_selector("#details:not([hidden])")
    page.fill("#d-name", "")
    page.click("#d-rename")
    page.wait_for_selector("#d-message:not([hidden])")
    assert "is empty" in page.text_content("#d-message")
    page.fill("#d-name", "x" * 256)
    page.click("#d-rename")
    expect(page.locator("#d-message")).to_contain_text("at most 255")
    assert stored_name(ui_training, record.id) == record.name
    page.fill("#d-name", "release candidate")
    page.click("#d-rename")
    expect(page.locator("#d-title")).to_have_text("release candidate")
    assert page.is_hidden("#d-message")
    assert stored_name(ui_training, record.id) == "release candidate"
    ui_training.epochs(1)  # the same saver saves into the record's stream and evicts it: the name stays
    assert models.get_model(record.id, registry=ui_training.registry).state.value == "evicted"
    assert stored_name(ui_training, record.id) == "release candidate"
    page.reload()
    expect(page.locator("#rows .record-name", has_text="release candidate")).to_have_count(1)
    assert browser_page.errors == [] and len(browser_page.failed_requests) == 2  # the two refused names


def test_an_alias_set_on_a_slot_record_opens_the_pin_it_went_on_which_outlives_eviction(
    browser_page, ui_server, ui_training
):
    record = models.find_models(stream="model", states=["live"], order_by="created_at", registry=ui_training.registry)
    page = open_page(browser_page, ui_server, f"?record={record[0].id}")
    page.wait_for_selector("#details:not([hidden])")
    page.fill("#d-alias", "production")
    page.click("#alias-form button")
    expect(page.locator("#d-aliases")).to_contain_text("production")  # the answer came, and the page shows it
    pinned = models.resolve_model("p@production", registry=ui_training.registry)
    assert pinned.state.value == "pinned" and pinned.metadata["pinned_from"] == record[0].id
    expect(page).to_have_url(f"{ui_server.url}/?record={pinned.id}")  # the record the alias names, not the slot's
    ui_training.epochs(1)  # the next epoch evicts the slot record: the alias stays on the pin
    assert models.get_model(record[0].id, registry=ui_training.registry).state.value == "evicted"
    assert models.resolve_model("p@production", registry=ui_training.registry).id == pinned.id
    assert browser_page.errors == [] and browser_page.failed_requests == []


def test_chart_shows_one_marker_per_checkpoint_and_updates_while_training(browser_page, ui_server, ui_training):
    page = open_page(browser_page, ui_server)
    points = chart_points(ui_training, "best_model")
    selector = "#chart circle.point[data-stream='best_model']"
    expect(page.locator(selector)).to_have_count(len(points))
    evicted = sum(r.state.value == "evicted" for r in points)
    assert page.locator("#chart circle.point.evicted").count() == evicted > 0
    assert page.locator("#chart circle.point.live").count() == len(points) - evicted > 0
    assert page.locator("#chart circle.point[data-stream='model']").count() == 0  # no score, no point
    assert "evicted" in page.text_content("#legend")
    ui_training.epochs(2)  # epoch 5 scores 0.4 (Ignite keeps no worse one), epoch 6 scores 0.95: one new point
    after = chart_points(ui_training, "best_model")
    assert len(after) == len(points) + 1
    expect(page.locator(selector)).to_have_count(len(after), timeout=10_000)
    assert page.locator("#chart circle.point.evicted").count() == sum(r.state.value == "evicted" for r in after)
    assert browser_page.errors == []


def test_a_name_with_markup_is_shown_as_text_and_runs_nothing(browser_page, ui_server, ui_training):
    record = models.find_models(stream="model", states=["live"], registry=ui_training.registry)[0]
    models.rename_model(record.id, XSS, registry=ui_training.registry)
    models.add_tags(record.id, ["<script>alert(2)</script>"], registry=ui_training.registry)
    page = open_page(browser_page, ui_server, f"?record={record.id}")
    expect(page.locator("#d-title")).to_have_text(XSS)
    page.wait_for_timeout(500)  # an injected onerror would have fired by now
    assert XSS in row_names(page)
    assert page.locator("img").count() == 0 and page.locator("script").count() == 1  # only app.js
    assert "<script>alert(2)</script>" in page.text_content("#d-tags")
    assert browser_page.dialogs == []
    assert browser_page.errors == [] and browser_page.failed_requests == []
    response = page.request.get(ui_server.url + "/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert response.headers["x-content-type-options"] == "nosniff"


def test_the_details_panel_shows_created_as_the_table_and_the_cli_do(browser_page, ui_server, ui_training):
    record = models.find_models(stream="best_model", states=["live"], registry=ui_training.registry)[0]
    when = time.strftime(TIME_FORMAT, time.localtime(record.created_at))  # `models show` and the CLI's tables
    page = open_page(browser_page, ui_server, f"?record={record.id}")
    expect(page.locator("#d-title")).to_have_text(record.name)
    terms, values = page.locator("#d-fields dt").all_text_contents(), page.locator("#d-fields dd").all_text_contents()
    fields = dict(zip(terms, values, strict=True))
    assert fields["created"] == when
    assert page.locator(f"#rows tr[data-id='{record.id}'] td.created").text_content() == when
    panel = page.text_content("#details") or ""
    assert str(int(record.created_at)) not in panel  # no raw epoch, not even in the metadata table
    assert "created_at" not in page.locator("#d-metadata th").all_text_contents()
    assert browser_page.errors == []


def test_the_details_panel_and_the_chart_show_what_each_save_cost(browser_page, ui_server, ui_training):
    record = models.find_models(stream="best_model", states=["live"], registry=ui_training.registry)[0]
    blocked = record.metadata["save_blocked_s"]
    page = open_page(browser_page, ui_server, f"?record={record.id}")
    expect(page.locator("#d-title")).to_have_text(record.name)
    terms, values = page.locator("#d-fields dt").all_text_contents(), page.locator("#d-fields dd").all_text_contents()
    fields = dict(zip(terms, values, strict=True))
    shown = f"{blocked * 1000:.1f} ms" if blocked < 1 else f"{blocked:.2f} s"  # as `models show` prints it
    assert fields["save blocked"] == shown
    assert fields["save durable"].endswith(("ms", " s")) and fields["save throughput"].endswith(" MB/s")
    assert fields["saved by"] == "the training thread"
    assert not {"save_blocked_s", "save_background"} & set(page.locator("#d-metadata th").all_text_contents())
    tip = page.locator(f"#chart circle.point[data-id='{record.id}'] title").text_content() or ""
    assert f"save: blocked {shown}, durable " in tip
    assert browser_page.errors == []


def test_download_button_saves_verified_bytes_and_refuses_corrupted_ones(
    browser_page, ui_server, ui_training, tmp_path
):
    record = models.find_models(stream="best_model", states=["live"], registry=ui_training.registry)[0]
    page = open_page(browser_page, ui_server, f"?record={record.id}")
    expect(page.locator("#d-title")).to_have_text(record.name)
    with page.expect_download() as download:
        page.click("#d-download")
    saved = tmp_path / "saved.pt"
    download.value.save_as(saved)
    assert download.value.suggested_filename == record.name
    assert hashlib.sha256(saved.read_bytes()).hexdigest() == record.sha256
    assert record.uri is not None
    path = Path(record.uri.removeprefix("file://"))
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    downloads: list[object] = []
    page.on("download", lambda d: downloads.append(d))
    page.click("#d-download")
    expect(page.locator("#d-message")).to_contain_text("overwritten or corrupted")
    page.wait_for_timeout(300)
    assert downloads == []
    assert browser_page.errors == [] and len(browser_page.failed_requests) == 1  # the refused download


def test_screenshot_of_the_models_view_with_details(browser_page, ui_server, ui_training, tmp_path):
    """The screenshot in docs/ui.md: TRACKER_SAVER_SCREENSHOT=docs/img/ui.png writes it there."""
    best = models.resolve_model("p/r/best_model@best", registry=ui_training.registry)
    models.set_alias(best.id, "production", registry=ui_training.registry)
    models.add_tags(best.id, ["candidate"], registry=ui_training.registry)
    page = open_page(browser_page, ui_server, f"?record={best.id}")
    page.wait_for_selector("#details:not([hidden]) #d-history tbody tr")
    page.wait_for_selector("#chart circle.point")
    target = Path(os.environ.get("TRACKER_SAVER_SCREENSHOT") or tmp_path / "ui.png")
    if not target.is_absolute():
        target = ROOT / target
    target.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(target), full_page=True)
    data = target.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000
    assert browser_page.errors == []


def boxes_overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and (a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"])
    )


@pytest.mark.parametrize("width", [1024, 1400, 1920])
def test_the_details_panel_never_covers_the_created_column(browser_page, ui_server, ui_training, width):
    # Names people type (DESIGN: "resnet (lr=0.1) [v2]: #3") make the table wider than p/r does.
    saver = TrackerSaver(
        ui_training.target.output_uri,
        project="mnist-sweeps",
        run="resnet50 (lr=0.1, wd=1e-4) [v2]: #3",
        registry=ui_training.registry,
    )
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=2, prefix="best_validation", scores=SCORES)
    trainer.run([0], max_epochs=3)
    saver.close()
    record = models.find_models(project="mnist-sweeps", states=["live"], registry=ui_training.registry)[0]
    page = browser_page.page
    page.set_viewport_size({"width": width, "height": 900})
    page = open_page(browser_page, ui_server, f"?record={record.id}")
    page.wait_for_selector("#details:not([hidden]) #d-history tbody tr")
    header = page.locator("#models th:has(button[data-key=created_at])")
    column = header.evaluate("th => th.cellIndex + 1")
    created = page.locator(f"#rows td:nth-child({column})")
    expect(created).to_have_count(models.count_models(registry=ui_training.registry))
    panel, table = page.locator("#details").bounding_box(), page.locator("#models").bounding_box()
    assert panel is not None and table is not None and panel["width"] >= 300
    assert not boxes_overlap(table, panel), f"the table at {table} is under the panel at {panel}"
    assert page.evaluate("document.documentElement.scrollWidth") <= width  # no sideways scrolling
    cells = [header, *created.all()]
    for cell in cells:
        cell.scroll_into_view_if_needed()  # the same page position for both boxes: a sticky panel moves
        box, panel = cell.bounding_box(), page.locator("#details").bounding_box()
        assert box is not None and panel is not None
        assert not boxes_overlap(box, panel), f"{cell.text_content()!r} at {box} is under the panel at {panel}"
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, f"{box} is outside the {width} px window"
        # Nothing else covers it either: the cell itself is what a click at its centre reaches.
        centre = {"x": box["x"] + box["width"] / 2, "y": box["y"] + box["height"] / 2}
        assert cell.evaluate("(el, p) => el.contains(document.elementFromPoint(p.x, p.y))", centre)
    assert browser_page.errors == []


class OtherSite:
    """A page on another site (``http://localhost:PORT``, the UI being at ``http://127.0.0.1:PORT``), served for real."""

    def __init__(self) -> None:
        class Page(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = b"<!doctype html><title>another site</title><p>nothing to see</p>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
        self.url = f"http://localhost:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_page_on_another_site_can_neither_rename_nor_pin_nor_download(browser_page, ui_server, ui_training):
    record = models.find_models(stream="best_model", states=["live"], registry=ui_training.registry)[0]
    target = f"{ui_server.url}/api/models/{record.id}"
    other = OtherSite()
    page = browser_page.page
    answered: dict[str, int] = {}
    page.on("response", lambda r: answered.update({f"{r.request.method} {r.url}": r.status}))
    downloads: list[object] = []
    page.on("download", lambda d: downloads.append(d))
    try:
        page.goto(other.url)
        # A rename needs a PATCH with JSON: the browser asks first (CORS preflight), the UI never allows it.
        tried = page.evaluate(
            """async (url) => {
                try {
                    const r = await fetch(url, {method: "PATCH", headers: {"Content-Type": "application/json"},
                                                body: JSON.stringify({name: "owned"})});
                    return r.status;
                } catch (e) { return String(e); }
            }""",
            target,
        )
        assert "Failed to fetch" in str(tried)
        # What a page can send without asking: a no-cors POST, and a form's POST. The server refuses both.
        page.evaluate(
            """(url) => fetch(url + "/tags", {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"},
                                              body: '{"tags": ["owned"]}'})""",
            target,
        )
        with page.expect_navigation() as pinned:
            page.evaluate(
                """(url) => { const f = document.createElement("form"); f.method = "POST"; f.action = url + "/pin";
                              document.body.append(f); f.submit(); }""",
                target,
            )
        assert pinned.value is not None and pinned.value.status == 403
        assert answered[f"POST {target}/tags"] == 403
        # A link to the download (the browser sends Sec-Fetch-Site: cross-site and the other site as Referer).
        page.goto(other.url)
        with page.expect_navigation() as fetched:
            page.evaluate("(url) => { location.href = url + '/download'; }", target)
        assert fetched.value is not None and fetched.value.status == 403
        assert "cross-origin request refused" in page.text_content("body")
    finally:
        other.close()
    assert downloads == []
    after = models.get_model(record.id, registry=ui_training.registry)
    assert (after.name, after.tags) == (record.name, record.tags)
    assert models.count_models(states=["pinned"], registry=ui_training.registry) == 0
