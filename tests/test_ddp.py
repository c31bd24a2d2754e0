"""Distributed training (gloo, 2 CPU processes): only the saving rank does I/O, and no rank hangs.

Each test runs a real gloo process group of 2 ranks, each a process of its own started as
``torchrun`` starts it (``tests.ddp_rank``: the rank in the environment, ``idist.initialize``),
forked from the tests' fork server (``tests.forkserver``: torch imported once, not by each rank).
``examples/ddp.py`` (tests/test_examples.py) runs the other launcher, ``idist.Parallel``'s
``spawn``. The workers are module-level functions that write what they saw to
``<tmp>/rank<r>.json``; a worker catches its own training error and reports it there, so the test
sees every rank's outcome. The process group has a short timeout, so a collective that one rank
never joins fails the test in seconds instead of hanging it.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import ignite.distributed as idist
import pytest
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint
from torch.distributed import TCPStore

from tests import forkserver
from tests.ddp_rank import GROUP_TIMEOUT
from tests.helpers import process_env
from tracker_saver import RecordState, TrackerSaver, find_models, resume
from tracker_saver.core.errors import ConfigError, RegistryError, StorageError, TrackerSaverError
from tracker_saver.save.distributed import open_for_reading, peer_error

#: Seconds both ranks may take; a rank left waiting in a collective fails at ``GROUP_TIMEOUT`` first.
RANKS_TIMEOUT_S = 180


def _parallel(worker: Any, *args: Any) -> None:
    """Run ``worker(local_rank, *args)`` on 2 gloo ranks; fail with their output if either fails.

    This process holds the group's store (as torchrun's agent does) on a port the system chose,
    so two tests starting groups at once never race for a port. A rank left waiting in a
    collective fails at ``GROUP_TIMEOUT`` with gloo's own timeout error, which no test expects:
    that, not a wall-clock assert (flaky on a loaded machine), catches a hang.
    """
    store = TCPStore("127.0.0.1", 0, world_size=2, is_master=True, wait_for_workers=False, timeout=GROUP_TIMEOUT)
    env = {**process_env(), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port), "WORLD_SIZE": "2"}
    env["TORCHELASTIC_USE_AGENT_STORE"] = "True"
    target = [f"{worker.__module__}:{worker.__name__}", json.dumps(args)]
    with contextlib.ExitStack() as stack:
        outputs = [stack.enter_context(tempfile.TemporaryFile(mode="w+")) for _ in range(2)]
        ranks = [
            forkserver.spawn("tests.ddp_rank", target, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                             stdout=outputs[r], stderr=outputs[r])
            for r in range(2)
        ]  # fmt: skip
        try:
            codes = [rank.wait(RANKS_TIMEOUT_S) for rank in ranks]
        except subprocess.TimeoutExpired:
            codes = [None, None]
        finally:
            for rank in ranks:
                rank.kill()
                rank.wait()
        for output in outputs:
            output.seek(0)
        failed = [f"rank {r} exited {codes[r]}:\n{outputs[r].read()[-4000:]}" for r in range(2) if codes[r] != 0]
    assert not failed, "\n".join(failed)


def _report(folder: str, **seen: Any) -> None:
    (Path(folder) / f"rank{idist.get_rank()}.json").write_text(json.dumps(seen))


def _reports(folder: Path) -> list[dict[str, Any]]:
    return [json.loads((folder / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def _trainer(net: torch.nn.Module) -> Engine:
    """Every iteration all-reduces (as DDP's backward does) and changes the weights alike on all ranks."""

    def step(engine: Engine, batch: Any) -> None:
        idist.all_reduce(torch.ones(1))
        with torch.no_grad():
            for p in net.parameters():
                p.add_(0.01)

    return Engine(step)


# -- only the saving rank writes ------------------------------------------------------------
def _train_with_rank_paths(local_rank: int, root: str) -> None:
    rank = idist.get_rank()
    # Rank 1 is given paths of its own: if it wrote anything, it would be there.
    saver = TrackerSaver(f"{root}/output{rank}", project="p", run="ddp", registry=f"{root}/registry{rank}.db")
    torch.manual_seed(0)
    net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
    trainer = _trainer(net)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": net}, saver, n_saved=2))
    trainer.run([0, 1], max_epochs=3)
    _report(root, registry_opened=saver._registry is not None, pipeline=saver._pipeline is not None)
    saver.close()


def test_only_the_saving_rank_writes_and_a_ddp_model_is_saved_unwrapped(tmp_path: Path) -> None:
    _parallel(_train_with_rank_paths, str(tmp_path))
    rank0, rank1 = _reports(tmp_path)
    assert rank0 == {"registry_opened": True, "pipeline": True}
    assert rank1 == {"registry_opened": False, "pipeline": False}
    assert not (tmp_path / "output1").exists()
    assert not list(tmp_path.glob("registry1.db*"))
    records = find_models(project="p", run="ddp", registry=str(tmp_path / "registry0.db"))
    assert [r.state for r in records] == [RecordState.EVICTED, RecordState.LIVE, RecordState.LIVE]
    assert [r.name for r in records] == ["model_2.pt", "model_4.pt", "model_6.pt"]
    objects = sorted(p.name for p in (tmp_path / "output0" / "p" / "ddp").iterdir())
    assert objects == ["model.slot0.pt", "model.slot1.pt"]  # footprint: n_saved
    state = torch.load(tmp_path / "output0" / "p" / "ddp" / "model.slot0.pt", weights_only=True)
    assert sorted(state) == ["bias", "weight"]  # unwrapped, as Ignite saves: no "module." prefix


# -- a failure on the saving rank reaches every rank ----------------------------------------
def _fail_on_epoch_2(info: Any) -> Any:
    if info.metadata["global_step"] == 2:
        raise RuntimeError("the upload quota is exhausted")
    return info


def _train_until_a_save_fails(local_rank: int, root: str, async_upload: bool, save_on_rank: int) -> None:
    saver = TrackerSaver(
        f"{root}/output",
        project="p",
        run="fail",
        registry=f"{root}/registry.db",
        async_upload=async_upload,
        save_on_rank=save_on_rank,
    )
    saver.add_pre_upload(_fail_on_epoch_2)
    net = torch.nn.Linear(2, 1)
    trainer = _trainer(net)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": net}, saver, n_saved=1))
    saver.attach(trainer)
    try:
        trainer.run([0], max_epochs=2)
    except Exception as exc:
        _report(root, error=type(exc).__name__, message=str(exc), epoch=trainer.state.epoch)
    else:
        _report(root, error=None)
    # Both ranks still meet here: neither was left behind in a collective.
    idist.barrier()


def test_a_failed_save_on_rank_0_raises_a_clear_error_on_every_rank(tmp_path: Path) -> None:
    _parallel(_train_until_a_save_fails, str(tmp_path), False, 0)
    rank0, rank1 = _reports(tmp_path)
    assert rank0["error"] == rank1["error"] == "CallbackError"
    assert "the upload quota is exhausted" in rank0["message"]
    assert rank1["message"].startswith("the checkpoint save of 'model_2.pt' failed on rank 0: CallbackError: ")
    assert "the upload quota is exhausted" in rank1["message"]
    assert rank1["message"].endswith("see rank 0's traceback for the cause")
    assert rank0["epoch"] == rank1["epoch"] == 2
    records = find_models(project="p", run="fail", registry=str(tmp_path / "registry.db"))
    assert [r.state for r in records] == [RecordState.LIVE]  # the last good checkpoint is kept


def test_an_async_save_failure_on_rank_1_reaches_every_rank_at_the_flush(tmp_path: Path) -> None:
    _parallel(_train_until_a_save_fails, str(tmp_path), True, 1)
    rank0, rank1 = _reports(tmp_path)
    assert rank0["error"] == rank1["error"] == "CallbackError"
    assert rank0["message"].startswith("the background checkpoint saves failed on rank 1: CallbackError: ")
    assert "the upload quota is exhausted" in rank0["message"] and "in the background" not in rank0["message"]
    assert "the upload quota is exhausted" in rank1["message"]


# -- single-process checks of the distributed arguments --------------------------------------
@pytest.mark.parametrize("save_on_rank", [-1, "0", True, 1.0])
def test_a_save_on_rank_that_is_not_a_rank_is_refused(tmp_path: Path, save_on_rank: Any) -> None:
    with pytest.raises(ConfigError, match=rf"save_on_rank={save_on_rank!r} is not a rank of this run"):
        TrackerSaver(tmp_path / "out", registry=tmp_path / "reg.db", save_on_rank=save_on_rank)
    assert not (tmp_path / "out").exists()


def test_a_peer_error_keeps_the_saving_rank_error_class_where_it_can() -> None:
    what = "the checkpoint save of 'model_2.pt'"
    assert type(peer_error("StorageError", "disk full", src=0, what=what)) is StorageError
    # StreamBusyError needs a holder it cannot carry across: its base class stands in.
    assert type(peer_error("StreamBusyError", "busy", src=0, what=what)) is RegistryError
    assert type(peer_error("RuntimeError", "boom", src=0, what=what)) is TrackerSaverError


# -- a restart resumes on both ranks ---------------------------------------------------------
def _train_or_resume(local_rank: int, root: str, max_epochs: int, registry: str = "", project: str = "p") -> None:
    saver = TrackerSaver(f"{root}/output", project=project, run="resume", registry=registry or f"{root}/registry.db")
    torch.manual_seed(0)
    net = torch.nn.Linear(2, 1)
    trainer = _trainer(net)
    handler = Checkpoint({"model": net, "trainer": trainer}, saver, n_saved=2)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, handler)
    loaded = resume(saver, {"model": net, "trainer": trainer}, [handler])
    weights = [round(float(v), 6) for v in torch.cat([p.flatten() for p in net.parameters()])]
    start = trainer.state.epoch
    trainer.run([0, 1], max_epochs=max_epochs)
    _report(
        root,
        loaded=loaded.name if loaded is not None else None,
        start=start,
        weights=weights,
        saved=[name for _, name in handler._saved],
    )
    saver.close()


def test_a_restart_resumes_on_both_ranks(tmp_path: Path) -> None:
    _parallel(_train_or_resume, str(tmp_path), 2)
    _parallel(_train_or_resume, str(tmp_path), 4)
    rank0, rank1 = _reports(tmp_path)
    assert rank0["loaded"] == rank1["loaded"] == "checkpoint_4.pt"
    assert rank0["start"] == rank1["start"] == 2
    assert rank0["weights"] == rank1["weights"]
    assert rank0["saved"] == rank1["saved"] == ["checkpoint_6.pt", "checkpoint_8.pt"]
    records = find_models(project="p", run="resume", registry=str(tmp_path / "registry.db"))
    live = [r.name for r in records if r.state is RecordState.LIVE]
    assert live == ["checkpoint_6.pt", "checkpoint_8.pt"]
    assert len(list((tmp_path / "output" / "p" / "resume").iterdir())) == 2  # footprint across the restart


@pytest.mark.mlflow
def test_a_restart_resumes_on_both_ranks_with_the_records_in_mlflow(mlflow_uri: str, tmp_path: Path) -> None:
    registry, project = f"mlflow:{mlflow_uri}", f"ddp-{tmp_path.name[-12:]}"
    _parallel(_train_or_resume, str(tmp_path), 2, registry, project)
    _parallel(_train_or_resume, str(tmp_path), 4, registry, project)
    rank0, rank1 = _reports(tmp_path)
    assert rank0["loaded"] == rank1["loaded"] == "checkpoint_4.pt"
    assert rank0["weights"] == rank1["weights"]
    records = find_models(project=project, run="resume", live=True, registry=registry)
    assert sorted(r.name for r in records) == ["checkpoint_6.pt", "checkpoint_8.pt"]
    assert len(list((tmp_path / "output" / project / "resume").iterdir())) == 2


def test_a_rank_that_does_not_save_never_creates_a_registry(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="reads the registry that the saving rank creates, and found none"):
        open_for_reading(tmp_path / "none.db")
    assert list(tmp_path.iterdir()) == []
