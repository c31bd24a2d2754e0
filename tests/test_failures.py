"""Nothing silent, and never lose the last good checkpoint: failures during real training."""

from __future__ import annotations

import hashlib
import shutil
import threading

import pytest
import torch

from tests.helpers import attach, model, trainer_engine
from tracker_saver import RecordState, RegistryError, SerializationError, StorageError, find_models


class FailsOnSecondSave:
    """A to_save object whose state cannot be pickled from the second save on."""

    def __init__(self) -> None:
        self.calls = 0

    def state_dict(self) -> dict:
        self.calls += 1
        return {"w": torch.ones(1000), "lock": threading.Lock() if self.calls > 1 else None}


def test_a_failed_overwrite_keeps_the_slots_previous_bytes(local_target) -> None:
    saver = local_target.saver()
    trainer = trainer_engine(model())
    attach(trainer, saver, {"thing": FailsOnSecondSave()}, n_saved=1)
    with pytest.raises(SerializationError):
        trainer.run([0], max_epochs=2)
    first, second = find_models(project="p", registry=local_target.registry)
    # Ignite removed the first before the second failed: it stays live, with its bytes intact.
    assert (first.state, second.state) == (RecordState.LIVE, RecordState.FAILED)
    with local_target.storage().get(first.key) as f:
        assert hashlib.sha256(f.read()).hexdigest() == first.sha256
    assert local_target.counts() == {"thing": 1}


def test_a_storage_failure_reaches_the_training_loop_with_its_cause(local_target, tmp_path) -> None:
    saver = local_target.saver()
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=2)
    trainer.run([0], max_epochs=1)
    run_dir = tmp_path / "output" / "p" / "r"
    shutil.rmtree(run_dir)
    run_dir.write_text("a file where the run folder was")
    with pytest.raises(StorageError, match="cannot write") as caught:
        trainer.run([0], max_epochs=2)
    assert isinstance(caught.value.__cause__, OSError)
    states = [r.state for r in find_models(project="p", registry=local_target.registry)]
    assert states == [RecordState.LIVE, RecordState.FAILED]


def test_a_registry_failure_reaches_the_training_loop_with_its_cause(local_target) -> None:
    saver = local_target.saver()
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=1)
    saver.registry.close()
    with pytest.raises(RegistryError, match="registry 'sqlite:///") as caught:
        trainer.run([0], max_epochs=1)
    assert caught.value.__cause__ is not None
    assert local_target.storage().list() == []


def test_a_serialization_failure_is_never_a_type_error_for_ignite_to_swallow(local_target) -> None:
    calls = []

    class Odd:
        def state_dict(self):
            return {"lock": threading.Lock()}  # pickle raises TypeError

    saver = local_target.saver(pre_upload=[lambda info: (calls.append(info.filename), info)[1]])
    trainer = trainer_engine(model())
    attach(trainer, saver, {"odd": Odd()}, n_saved=1)
    with pytest.raises(SerializationError) as caught:
        trainer.run([0], max_epochs=1)
    assert not isinstance(caught.value, TypeError) and isinstance(caught.value.__cause__, TypeError)
    assert calls == ["odd_1.pt"]  # Ignite did not retry the handler without metadata
