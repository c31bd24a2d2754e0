"""A training process for the preemption tests: ``python -m tests.preempt_trainer CONFIG_JSON``.

CONFIG has ``output_uri``, ``registry`` (a SQLite path), ``storage_options``, ``saver_options``
(e.g. ``{"async_upload": true, "timeout": 6}``), ``grace`` and ``every`` (a checkpoint every
``every`` iterations). It trains until killed (or ``iterations``, default 10,000), the way users
attach preemption: ``saver.attach(trainer, save_on_sigterm=checkpoint, sigterm_grace=grace)``;
with ``"attach": false`` it attaches nothing and never closes the saver, so only the ``atexit``
flush stands between its background saves and the end of the process. Each
iteration sleeps 20 ms (a training step's compute, without burning a CPU) and prints
``{"iteration": n}``, so the test knows where training was. ``hold`` (``{"iteration": 30}``)
stops training after that iteration: the saver is flushed (every save so far is durable), the
process prints ``{"held": 30}`` and waits for a line on stdin; a test takes the gateway down
there, so no save races its outage. ``debug_log`` (a
path) gets faulthandler's tracebacks and a line once the at-exit flush returned, for a
failure's message (stderr stays as a user sees it: no logging is configured).
"""

from __future__ import annotations

import atexit
import faulthandler
import json
import sys
import threading
import time
from typing import Any

import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

from tracker_saver import TrackerSaver


def main(config: dict[str, Any]) -> None:
    if config.get("debug_log"):
        sink = open(config["debug_log"], "a", buffering=1)  # noqa: SIM115 (open until the process ends)
        faulthandler.enable(sink)
        # Registered first, so it runs after the saver's at-exit flush: it says the flush returned.
        atexit.register(lambda: sink.write(f"at exit, after the flush: threads {threading.enumerate()}\n"))
    torch.manual_seed(0)
    net = torch.nn.Linear(256, 1024)  # 1 MiB of weights

    def step(engine: Engine, batch: Any) -> None:
        with torch.no_grad():
            for p in net.parameters():
                p.add_(0.01)
        time.sleep(0.02)

    trainer = Engine(step)
    saver = TrackerSaver(
        config["output_uri"],
        project="p",
        run="r",
        registry=config["registry"],
        storage_options=config.get("storage_options") or {},
        **config.get("saver_options", {}),
    )
    checkpoint = Checkpoint({"model": net, "trainer": trainer}, saver, n_saved=2)
    trainer.add_event_handler(Events.ITERATION_COMPLETED(every=config["every"]), checkpoint)
    if config.get("attach", True):
        saver.attach(trainer, save_on_sigterm=checkpoint, sigterm_grace=config["grace"])

    @trainer.on(Events.ITERATION_COMPLETED)
    def report(engine: Engine) -> None:
        print(json.dumps({"iteration": engine.state.iteration}), flush=True)
        hold = config.get("hold")
        if hold and engine.state.iteration == hold["iteration"]:
            saver.flush()
            print(json.dumps({"held": engine.state.iteration}), flush=True)
            sys.stdin.readline()

    trainer.run(range(config.get("iterations", 10_000)), max_epochs=1)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
