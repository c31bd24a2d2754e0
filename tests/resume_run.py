"""One training process for the resume tests: run it as a subprocess, read its JSON line.

Usage: python -m tests.resume_run CONFIG_JSON, where CONFIG has output_uri, registry,
storage_options, run, epochs (max_epochs) and mode: "restore" (resume() the handlers and the
trainer) or "fresh" (a new Checkpoint that knows nothing of earlier records).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tests.helpers import SCORES, Target, attach, model, spec_registry, trainer_engine
from tracker_saver import TrackerSaver, resume


class RecordingSaver(TrackerSaver):
    """Logs Ignite's calls in order, so two runs' eviction sequences can be compared."""

    events: list[list[str]]

    def __call__(self, checkpoint: Any, filename: str, metadata: Any = None) -> None:
        super().__call__(checkpoint, filename, metadata)
        self.events.append(["save", filename])

    def remove(self, filename: str) -> None:
        super().remove(filename)
        self.events.append(["remove", filename])


def main(config: dict[str, Any]) -> dict[str, Any]:
    target = Target(config["output_uri"], spec_registry(config), config.get("storage_options") or {},
                    config.get("saver_options") or {})  # fmt: skip
    max_seen: dict[str, int] = {}

    def count_objects(info: Any) -> None:
        for stream, n in target.counts(config["run"]).items():
            max_seen[stream] = max(max_seen.get(stream, 0), n)

    saver = RecordingSaver(
        target.output_uri, project="p", run=config["run"], registry=target.registry,
        storage_options=target.storage_options, post_upload=[count_objects], **target.saver_options,
    )  # fmt: skip
    saver.events = []
    net = model()
    opt = __import__("torch").optim.SGD(net.parameters(), lr=0.1)
    trainer = trainer_engine(net)
    best = attach(trainer, saver, {"model": net}, n_saved=2, prefix="best", scores=SCORES)
    last = attach(trainer, saver, {"model": net, "optimizer": opt, "trainer": trainer}, n_saved=1)
    # Not yet full when the first process stops: only adoption keeps its records from reuse.
    every = attach(trainer, saver, {"model": net}, n_saved=6, prefix="every")
    loaded = None
    if config["mode"] == "restore":
        record = resume(saver, {"model": net, "optimizer": opt, "trainer": trainer}, [best, last, every])
        loaded = record.filename if record else None
    trainer.run([0, 1, 2], max_epochs=config["epochs"])
    return {
        "events": saver.events,
        "max_objects": max_seen,
        "loaded": loaded,
        "weight_sum": float(sum(p.sum() for p in net.parameters())),
        "saved_best": [f for _, f in best._saved],
        "saved_last": [f for _, f in last._saved],
        "saved_every": [f for _, f in every._saved],
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
