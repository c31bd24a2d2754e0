"""Say what continues: a saver that starts on an earlier process's live checkpoints says so once, at INFO.

The earlier process is a saver closed in this process: what it leaves in the registry and at
output_uri is what an exited process leaves (the claim released, the records live), and the new
saver reads only those, so one process keeps the test cheap.
"""

from __future__ import annotations

import logging
import queue
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SCORES, Target, attach, model, train, trainer_engine
from tests.test_webhooks import SECRET, serve, stop
from tracker_saver import StreamOwnedError, TrackerSaver, find_models, rename_model, set_alias
from tracker_saver.cli.main import main
from tracker_saver.core.records import StreamId
from tracker_saver.lifecycle.webhooks import Webhook
from tracker_saver.registry import open_registry
from tracker_saver.save.ownership import read_owner, take_over_run
from tracker_saver.storage import open_storage


def _train(target: Target, epochs: int) -> None:
    saver = target.saver()
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=2)
    attach(trainer, saver, {"model": net}, n_saved=1, prefix="best", scores=SCORES)
    trainer.run([0], max_epochs=epochs)
    saver.close()


def _continuing(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and "continues run" in r.getMessage()]


def test_a_second_saver_on_the_same_run_says_once_which_run_it_continues_and_what_it_replaces(
    local_target: Target, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tracker_saver")
    _train(local_target, 3)
    assert _continuing(caplog) == []  # the first saver found nothing to continue
    live = find_models(project="p", live=True, registry=local_target.registry)
    renamed = next(r for r in live if r.stream == "model")
    rename_model(renamed.id, "nu best so far", registry=local_target.registry)
    set_alias(next(r for r in live if r.stream == "best_model").id, "production", registry=local_target.registry)
    caplog.clear()
    _train(local_target, 1)
    assert _continuing(caplog) == [
        f"p/r continues run 'r' at {renamed.output_uri}: its next saves replace 3 live checkpoints of an earlier process "
        "(best_model: 1, model: 2), oldest first; an aliased one is kept as a pin, a renamed one is not "
        f"(record {renamed.id} ('nu best so far'): to keep one, `tracker-saver models pin ID` or alias it first)"
    ]


def test_a_savers_webhook_sends_the_events_from_its_own_start_unless_asked_for_the_backlog(
    local_target: Target, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tracker_saver")
    arrived: queue.Queue[dict[str, Any]] = queue.Queue()
    server = serve(0, arrived.put)
    url = f"http://127.0.0.1:{server.server_address[1]}/events"
    try:
        _train_run(local_target, "a", 1, webhook=Webhook(url, SECRET))  # the URL's outbox is made here
        assert arrived.get(timeout=30)["after"]["run"] == "a"
        _train_run(local_target, "b", 3)  # no webhook: 3 events wait in the URL's outbox
        _train_run(local_target, "c", 2, webhook=Webhook(url, SECRET))
        assert [arrived.get(timeout=30)["after"]["run"] for _ in range(2)] == ["c", "c"]
        assert arrived.empty()
        assert "webhook http://127.0.0.1:" in caplog.text and "3 earlier events in its outbox not sent" in caplog.text
        _train_run(local_target, "b", 1)  # one more waits
        _train_run(local_target, "d", 1, webhook=Webhook(url, SECRET, backlog=True))
        assert [arrived.get(timeout=30)["after"]["run"] for _ in range(2)] == ["b", "d"]
    finally:
        stop(server)


def _train_run(target: Target, run: str, epochs: int, **options: Any) -> None:
    saver = target.saver(run=run, **options)
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=2)
    trainer.run([0], max_epochs=epochs)
    saver.close()


def _two_streams(saver: TrackerSaver) -> None:
    """One epoch of two streams of run p/r (``model`` and ``best_model``) through ``saver``, closed after."""
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=1)
    attach(trainer, saver, {"model": net}, n_saved=1, prefix="best", scores=SCORES)
    trainer.run([0], max_epochs=1)
    saver.close()


def test_take_over_without_stream_hands_the_whole_run_over_in_one_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, alice, bob = str(tmp_path / "shared"), str(tmp_path / "alice.db"), str(tmp_path / "bob.db")
    _two_streams(TrackerSaver(out, project="p", run="r", registry=alice))
    refused_saver = TrackerSaver(out, project="p", run="r", registry=bob)
    with pytest.raises(StreamOwnedError, match=r"\(the run's streams it owns: best_model, model\)") as refused:
        _two_streams(refused_saver)
    refused_saver.close()
    argv = shlex.split(str(refused.value).split("hand the stream over: `", 1)[1].split("`", 1)[0])
    assert "--stream" not in " ".join(argv)
    assert main([*argv[1:], "--registry", bob]) == 0
    assert capsys.readouterr().out.count("is now owned by sqlite:///") == 2
    _two_streams(TrackerSaver(out, project="p", run="r", registry=bob))  # before: refused on the second stream


def test_a_take_over_refusal_lists_every_stream_another_registry_owns_and_changes_nothing(tmp_path: Path) -> None:
    out, alice, carol, bob = (str(tmp_path / name) for name in ("shared", "alice.db", "carol.db", "bob.db"))
    train(TrackerSaver(out, project="p", run="r", registry=alice), {"model": model()}).save_handler.close()
    for prefix in ("a", "b"):
        train(
            TrackerSaver(out, project="p", run="r", registry=carol), {"model": model()}, prefix=prefix
        ).save_handler.close()
    storage = open_storage(out)
    alice_id = open_registry(alice).claims.registry_id("p")
    with pytest.raises(StreamOwnedError, match=r"2 of the 3 streams of run p/r at .* are not owned by") as refused:
        take_over_run(storage, open_registry(bob), "p", "r", from_id=alice_id)
    assert "p/r/a_model at " in str(refused.value) and "p/r/b_model at " in str(refused.value)
    owner = read_owner(storage, StreamId(storage.uri, "p", "r", "model"))
    assert owner is not None and owner.registry_id == alice_id  # nothing changed
