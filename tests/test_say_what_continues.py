"""Say what continues: a saver that starts on an earlier process's live checkpoints says so once, at INFO.

The earlier process is a saver closed in this process: what it leaves in the registry and at
output_uri is what an exited process leaves (the claim released, the records live), and the new
saver reads only those, so one process keeps the test cheap.
"""

from __future__ import annotations

import logging
import queue
from typing import Any

import pytest

from tests.helpers import SCORES, Target, attach, model, trainer_engine
from tests.test_webhooks import SECRET, serve, stop
from tracker_saver import find_models, rename_model, set_alias
from tracker_saver.registry.webhooks import Webhook


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
        assert (
            "webhook http://127.0.0.1:" in caplog.text and "3 earlier events in its outbox are not sent" in caplog.text
        )
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
