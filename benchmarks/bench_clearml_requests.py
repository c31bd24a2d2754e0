"""What validating a ClearML request costs the saver: the SDK's way against the bounded session's.

Every request the ClearML registry sends goes through ``Session.validate_request``. The SDK's
calls ``jsonschema.validate``, which checks the request class's schema against JSON Schema's
metaschema before validating the request, every time; the registry's session
(:func:`tracker_saver.integrations.clearml.internals.bounded_session_class`) checks each
class's schema once and validates each request alone. Side by side in one run:

* per request kind a save sends (``models.get_all``, ``models.create``, ``models.edit``,
  ``models.add_or_update_metadata``): the CPU of one validation, each way (median of ``--repeats``);
* per save: the CPU of ``Checkpoint.__call__`` with a ``TrackerSaver`` on the ClearML stand-in
  (in this process, so its CPU counts too), ``--saves`` saves each way, the rounds interleaved.

Prints a table, then one JSON line::

    python benchmarks/bench_clearml_requests.py --repeats 200 --saves 30
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_save import clearml_env  # noqa: E402
from tracker_saver.integrations.clearml import internals  # noqa: E402

WAYS = ("sdk", "ours")


def _requests() -> dict[str, Any]:
    """One request of each kind a save sends, as the registry builds them."""
    from clearml.backend_api.services import models

    return {
        "models.get_all": models.GetAllRequest(project=["p"], tags=["a"], only_fields=["id", "name", "metadata"]),
        "models.create": models.CreateRequest(
            uri="file:///out/slot-0", name="best_model_3.pt", project="p", tags=["tracker_saver"], comment="{}"
        ),
        "models.edit": models.EditRequest(model="m1", name="best_model_3.pt", comment="{}"),
        "models.add_or_update_metadata": models.AddOrUpdateMetadataRequest(
            model="m1", metadata=[{"key": "state", "type": "str", "value": "live"}]
        ),
    }


def _validators(way: str) -> Callable[[Any], None]:
    if way == "sdk":
        return lambda request: request.validate()  # what Session.validate_request does
    return lambda request: None if internals.validate_once(request) else request.validate()


def per_request(repeats: int) -> dict[str, dict[str, float]]:
    """Microseconds of CPU per validation, by request kind and way."""
    out: dict[str, dict[str, float]] = {}
    for kind, request in _requests().items():
        out[kind] = {}
        for way in WAYS:
            validate = _validators(way)
            validate(request)  # ours: the class's schema is checked here, once
            times = []
            for _ in range(repeats):
                start = time.process_time()
                validate(request)
                times.append(time.process_time() - start)
            out[kind][way] = statistics.median(times) * 1e6
    return out


@contextlib.contextmanager
def _sdk_validation(way: str) -> Iterator[None]:
    """The registry's sessions validate the SDK's way (``sdk``) or as shipped (``ours``)."""
    if way == "ours":
        yield
        return
    shipped = internals.validate_once
    internals.validate_once = lambda _request: False  # type: ignore[assignment]  # the SDK's own check
    try:
        yield
    finally:
        internals.validate_once = shipped


def per_save(saves: int, work: Path) -> dict[str, float]:
    """Milliseconds of CPU per ``Checkpoint.__call__`` (median), by way; the rounds interleaved."""
    import torch
    from ignite.engine import Engine
    from ignite.handlers import Checkpoint

    from tracker_saver import TrackerSaver
    from tracker_saver.integrations.clearml.registry import ClearMLRegistry

    model = torch.nn.Linear(16, 4)
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    checkpoints = {}
    for way in WAYS:
        with _sdk_validation(way):
            registry = ClearMLRegistry(project_root=f"bench-{way}")
            saver = TrackerSaver(str(work / way), registry=registry, project="bench", run=way)
            checkpoints[way] = (Checkpoint({"model": model}, saver, n_saved=2), Engine(lambda e, b: None), saver)
    for i in range(saves):
        for way in WAYS:
            checkpoint, engine, _ = checkpoints[way]
            engine.state.iteration = engine.state.epoch = i + 1
            with _sdk_validation(way):
                start = time.process_time()
                checkpoint(engine)
                times[way].append(time.process_time() - start)
    for _, _, saver in checkpoints.values():
        saver.close()
    return {way: statistics.median(t[1:]) * 1000 for way, t in times.items()}  # the first opens the stream


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=200, help="validations per request kind and way")
    parser.add_argument("--saves", type=int, default=30, help="saves per way")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-clearml-requests-") as tmp:
        with clearml_env(Path(tmp) / "clearml") as env:
            os.environ.update(env)  # before the SDK reads its configuration, once for this process
            requests = per_request(args.repeats)
            saves = per_save(args.saves, Path(tmp))
    print(f"{'request':32} {'SDK µs':>9} {'ours µs':>9} {'ratio':>7}")
    for kind, row in requests.items():
        print(f"{kind:32} {row['sdk']:9.1f} {row['ours']:9.1f} {row['sdk'] / row['ours']:6.1f}x")
    print(f"{'CPU per save (ms)':32} {saves['sdk']:9.2f} {saves['ours']:9.2f} {saves['sdk'] / saves['ours']:6.2f}x")
    result = {"bench": "clearml_requests", "validate_us": requests, "save_cpu_ms": saves,
              "repeats": args.repeats, "saves": args.saves}  # fmt: skip
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
