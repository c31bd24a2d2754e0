"""What each save cost is on its record: real Ignite Checkpoint, real SQLite, sync and async; CLI and stats."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from ignite.handlers import Checkpoint

from tests.helpers import ROOT, SCORES, Target, attach, model, trainer_engine
from tests.waiting import when_waiting
from tracker_saver import CallbackError, RecordNotFoundError, find_models, run_stats
from tracker_saver.cli.console import rate_text
from tracker_saver.cli.main import main
from tracker_saver.core.records import TIMING_KEYS, RecordState, UploadInfo

SAVED = [RecordState.LIVE, RecordState.EVICTED]
TYPES = {
    "save_blocked_s": float,
    "save_durable_s": float,
    "save_bytes": int,
    "save_mb_s": float,
    "save_background": bool,
}


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """The installed entry point's module, in a new process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "tracker_saver", *argv],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


class _Timed:
    """Wraps a real ``Checkpoint``: the wall time of each call, as the training loop sees it."""

    def __init__(self, handler: Checkpoint) -> None:
        self.handler, self.walls = handler, []

    def __call__(self, engine) -> None:
        start = time.perf_counter()
        self.handler(engine)
        self.walls.append(time.perf_counter() - start)


def _train(
    target, epochs: int, *, pre=(), post=(), around: Callable[[Any], Any] = contextlib.nullcontext, **options
) -> tuple[_Timed, list]:
    """``epochs`` saves of a score stream (n_saved=2) through a real Checkpoint; the records, oldest first.

    The training runs inside ``around(saver)``.
    """
    from ignite.engine import Events

    saver = target.saver(pre_upload=pre, post_upload=post, **options)
    net = model()
    trainer = trainer_engine(net)
    timed = _Timed(
        Checkpoint(
            {"model": net},
            saver,
            n_saved=2,
            filename_prefix="best",
            score_function=lambda e: SCORES[e.state.epoch - 1],
            score_name="val_acc",
            global_step_transform=lambda e, _: e.state.epoch,
        )
    )
    trainer.add_event_handler(Events.EPOCH_COMPLETED, timed)
    saver.attach(trainer)
    with around(saver):
        trainer.run([0], max_epochs=epochs)
    saver.close()
    return timed, find_models(states=SAVED, order_by="id", registry=target.registry)


def test_every_sync_save_records_typed_timings_in_the_registry(local_target):
    timed, records = _train(local_target, 4)
    assert len(records) == len(timed.walls) == 4  # each epoch's score beat the worst one kept
    for record, wall in zip(records, timed.walls, strict=True):
        meta = record.metadata
        assert {k: type(meta[k]) for k in TIMING_KEYS} == TYPES, record.name
        assert meta["save_background"] is False
        assert meta["save_bytes"] == record.size > 0
        # Synchronous: the training thread waited for the whole save, which Checkpoint's call contains.
        assert 0 < meta["save_blocked_s"] == meta["save_durable_s"] <= wall
        assert meta["save_mb_s"] > 0
    # Evicted records keep what their save cost: the history of a run's saves is complete.
    assert {r.state for r in records} == {RecordState.LIVE, RecordState.EVICTED}


def test_an_async_save_blocks_only_for_its_snapshot_and_is_durable_after_the_upload(local_target):
    """The first save's upload is held (a post-upload callback on the worker) until the second save
    waits for max_pending's one slot; nothing is timed against a number."""
    uploads: list[str] = []
    release = threading.Event()
    marks: dict[str, float] = {}

    def hold_the_first(info: UploadInfo) -> None:
        uploads.append(info.filename)
        if len(uploads) == 1:
            release.wait()
            marks["uploaded"] = time.perf_counter()

    def second_waits() -> None:
        marks["waiting"] = time.perf_counter()
        release.set()

    def around(saver: Any) -> Any:
        return when_waiting(saver._background._slots, second_waits)

    timed, records = _train(local_target, 3, post=[hold_the_first], around=around, async_upload=True, max_pending=1)
    first, second, third = (r.metadata for r in records)
    assert all(m["save_background"] is True for m in (first, second, third))
    # The first save only copied its tensors and returned: its upload, held until the second save
    # was waiting, is durable time, not blocked.
    assert first["save_blocked_s"] <= timed.walls[0]
    assert first["save_blocked_s"] < first["save_durable_s"]
    # The second waited for the slot until the first's upload was done: that wait blocked training.
    assert "waiting" in marks and second["save_blocked_s"] >= marks["uploaded"] - marks["waiting"]
    assert second["save_blocked_s"] < second["save_durable_s"]
    assert all(m["save_bytes"] == r.size for m, r in zip((first, second, third), records, strict=True))


def test_a_pre_upload_callback_cannot_forge_what_a_save_cost(local_target):
    def forge(info: UploadInfo) -> UploadInfo:
        info.metadata["save_blocked_s"] = 0.0
        return info

    saver = local_target.saver(pre_upload=[forge])
    with pytest.raises(
        CallbackError, match=r"\.forge set metadata save_blocked_s of 'model_1\.pt': .*give your key another name"
    ):
        saver({"model": torch.nn.Linear(2, 1).state_dict()}, "model_1.pt", {"basename": "model"})
    assert saver.records() == [] and local_target.counts() == {}  # refused before anything was written
    saver.close()


def test_a_post_upload_callback_value_is_replaced_by_the_measured_one(local_target):
    def overwrite(info: UploadInfo) -> None:
        info.metadata.update(save_durable_s=-1.0, save_background=True)

    _, records = _train(local_target, 1, post=[overwrite])
    meta = records[0].metadata
    assert meta["save_durable_s"] > 0 and meta["save_background"] is False


def test_run_stats_gives_count_percentiles_and_throughput_per_stream_and_in_all(local_target):
    saver = local_target.saver()
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=2, prefix="best", scores=SCORES)
    attach(trainer, saver, {"model": net}, n_saved=1)
    trainer.run([0], max_epochs=6)
    saver.close()
    *streams, total = run_stats("p", "r", registry=local_target.registry)
    assert [s.stream for s in streams] == ["best_model", "model"] and total.stream is None
    for row in (*streams, total):
        records = find_models(
            project="p",
            run="r",
            stream=row.stream,
            states=SAVED + [RecordState.REVIVED],
            registry=local_target.registry,
        )
        blocked = [r.metadata["save_blocked_s"] for r in records]
        durable = [r.metadata["save_durable_s"] for r in records]
        assert row.count == len(records) and row.background == 0
        assert row.blocked_p50_s == pytest.approx(np.percentile(blocked, 50))
        assert row.blocked_p95_s == pytest.approx(np.percentile(blocked, 95))
        assert row.durable_p95_s == pytest.approx(np.percentile(durable, 95))
        assert row.mb_s_p50 == pytest.approx(np.median([r.metadata["save_mb_s"] for r in records]))
        assert row.bytes_total == sum(r.size for r in records)
    assert total.count == sum(s.count for s in streams) == 6 + 5  # model: every epoch; best: all but epoch 5
    with pytest.raises(RecordNotFoundError, match=r"run p/nope has no records: see `tracker-saver runs list`"):
        run_stats("p", "nope", registry=local_target.registry)


def test_runs_stats_and_models_show_print_the_timings_through_the_real_command(local_target):
    _train(local_target, 3, async_upload=True)
    done = _cli("runs", "stats", "p/r", "--registry", local_target.registry)
    assert done.returncode == 0, done.stderr
    header, row = done.stdout.splitlines()[1], done.stdout.splitlines()[3]
    assert [c.strip() for c in header.strip("│").split("│")] == [
        "stream", "saves", "background", "blocked p50", "blocked p95", "durable p50", "durable p95", "MB/s p50",
        "slots", "archive", "pins", "objects",
    ]  # fmt: skip
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells[:3] == ["best_model", "3", "3"] and all(c.endswith(("ms", " s")) for c in cells[3:7])
    assert cells[8:] == ["2", "0", "0", "2"]  # n_saved=2 slots, no archive, no pin: 2 objects
    assert "(all)" not in done.stdout  # one stream: its row is the run's
    rows = json.loads(_cli("runs", "stats", "p/r", "--json", "--registry", local_target.registry).stdout)
    assert [r["stream"] for r in rows] == ["best_model", None] and rows[-1]["count"] == rows[-1]["background"] == 3
    # A small checkpoint's throughput keeps its digits: not "0.0" MB/s.
    assert cells[7] == rate_text(rows[0]["mb_s_p50"]) and float(cells[7].lstrip("<")) > 0, cells

    missing = _cli("runs", "stats", "p/other", "--registry", local_target.registry)
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.strip() == (
        "tracker-saver: error: run p/other has no records: see `tracker-saver runs list` for the runs and their projects"
    )
    assert _cli("runs", "stats", "just-a-run", "--registry", local_target.registry).returncode == 2

    shown = _cli("models", "show", "p/r/best_model@latest", "--registry", local_target.registry)
    assert shown.returncode == 0, shown.stderr
    section = shown.stdout.split("save (what it cost):\n")[1].splitlines()[:5]
    assert [line.split()[0] for line in section] == ["blocked", "durable", "bytes", "throughput", "background"]
    assert section[4].split()[1] == "yes" and "MB/s" in section[3]
    assert "save_blocked_s" not in shown.stdout  # shown once, in its section, not again as raw metadata


def test_a_run_saved_before_timings_were_kept_has_zero_timed_saves(local_target, capsys):
    _train(local_target, 1)
    import sqlite3

    with sqlite3.connect(local_target.registry) as conn:  # as a registry written by an older tracker_saver
        conn.execute(f"DELETE FROM metadata WHERE key IN ({','.join('?' * len(TIMING_KEYS))})", TIMING_KEYS)
    assert main(["runs", "stats", "p/r", "--registry", local_target.registry]) == 0
    out = capsys.readouterr().out
    assert "no save of p/r has timings" in out
    assert run_stats("p", "r", registry=local_target.registry)[-1].blocked_p50_s is None


@pytest.mark.clearml
def test_the_clearml_registry_keeps_the_timings_typed(clearml_server, clearml_project, tmp_path):
    target = Target(output_uri=str(tmp_path / "output"), registry=f"clearml:{clearml_project}")
    saver = target.saver(async_upload=True)
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=1)
    trainer.run([0], max_epochs=2)
    saver.close()
    records = find_models(project="p", run="r", registry=target.registry)  # read back from the server
    assert len(records) == 2
    for record in records:
        assert {k: type(record.metadata[k]) for k in TIMING_KEYS} == TYPES, record.name
        assert record.metadata["save_background"] is True and record.metadata["save_bytes"] == record.size
        assert 0 < record.metadata["save_blocked_s"] < record.metadata["save_durable_s"]


def test_a_pinned_copy_carries_no_timings_of_its_own(local_target):
    from tracker_saver import pin_model

    _, records = _train(local_target, 1)
    pinned = pin_model(records[0].id, registry=local_target.registry)
    assert not set(TIMING_KEYS) & set(pinned.metadata)  # a pin is no save
    assert set(TIMING_KEYS) <= set(records[0].metadata) and pinned.metadata["pinned_from"] == records[0].id
