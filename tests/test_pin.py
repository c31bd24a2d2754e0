"""Pinning: a verified copy out of the slots that eviction, slots, resume and fsck never touch."""

from __future__ import annotations

import re

import pytest

from tests.helpers import SCORES, Target, attach, model, trainer_engine
from tracker_saver import (
    IntegrityError,
    RecordNotFoundError,
    RecordState,
    RegistryError,
    find_models,
    get_model,
    load_checkpoint,
    pin_model,
    resume,
    unpin_model,
)
from tracker_saver.fsck import check
from tracker_saver.registry.shared import shared_registry


def _pinned_intact(target: Target, record_id: str) -> None:
    pinned = get_model(record_id, registry=target.registry)
    assert pinned.state is RecordState.PINNED and pinned.slot is None
    assert target.storage().digest(pinned.key) == (pinned.size, pinned.sha256)


class PinContract:
    """Run by every backend: a ``target`` fixture gives output_uri and registry."""

    def test_a_pin_survives_eviction_slots_resume_and_fsck(self, target: Target) -> None:
        saver = target.saver(run="r")
        net = model()
        trainer = trainer_engine(net)
        handler = attach(trainer, saver, {"model": net}, n_saved=2, prefix="best", scores=SCORES)
        trainer.run([0], max_epochs=3)
        best = find_models(project="p", alias="best", registry=target.registry)[0]
        assert best.global_step == 2
        pinned = pin_model(best.id, registry=target.registry, storage_options=target.storage_options)
        assert re.fullmatch(rf"p/r/\+pinned/[0-9a-f]{{16}}-{re.escape(best.filename)}", pinned.key)
        assert pinned.metadata["pinned_from"] == best.id  # a string, as every record id
        assert (pinned.name, pinned.sha256, pinned.size, pinned.stream) == (
            best.name,
            best.sha256,
            best.size,
            best.stream,
        )
        assert pinned.metadata["score"] == best.metadata["score"]
        trainer.run([0], max_epochs=8)  # five more epochs through the same Checkpoint, n_saved=2
        saver.close()
        assert target.counts()["best_model"] == 2  # the pin is not a slot
        _pinned_intact(target, pinned.id)
        assert get_model(best.id, registry=target.registry).state is RecordState.EVICTED
        assert [r.id for r in find_models(project="p", states=["pinned"], registry=target.registry)] == [pinned.id]
        registry = shared_registry(target.registry)
        assert check(registry, project="p", deep=True, storage_options=target.storage_options).problems == []
        # A new process's saver resumes from the live records only and keeps two slots.
        again = target.saver(run="r")
        net2 = model()
        trainer2 = trainer_engine(net2)
        handler2 = attach(trainer2, again, {"model": net2}, n_saved=2, prefix="best", scores=SCORES)
        resume(again, {"model": net2}, [handler2], stream="best_model")
        assert sorted(f for _, f in handler2._saved) == sorted(f for _, f in handler._saved)  # type: ignore[attr-defined]
        trainer2.run([0], max_epochs=10)
        again.close()
        assert target.counts()["best_model"] == 2
        _pinned_intact(target, pinned.id)
        loaded = load_checkpoint(pinned.id, {"model": model()}, registry=target.registry,
                                 storage_options=target.storage_options)  # fmt: skip
        assert loaded.id == pinned.id

    def test_pin_twice_is_one_pin_and_unpin_deletes_object_and_record(self, target: Target) -> None:
        saver = target.saver()
        trainer = trainer_engine(model())
        attach(trainer, saver, {"model": model()}, n_saved=1)
        trainer.run([0], max_epochs=2)
        saver.close()
        first, last = find_models(project="p", registry=target.registry)
        options = target.storage_options
        pinned = pin_model(last.id, registry=target.registry, storage_options=options)
        assert pin_model(last.id, registry=target.registry, storage_options=options).id == pinned.id
        assert pin_model(pinned.id, registry=target.registry, storage_options=options).id == pinned.id
        with pytest.raises(RegistryError, match="is evicted"):
            pin_model(first.id, registry=target.registry, storage_options=options)
        with pytest.raises(RegistryError, match="not pinned: only a pinned record can be unpinned"):
            unpin_model(last.id, registry=target.registry, storage_options=options)
        unpin_model(pinned.id, registry=target.registry, storage_options=options)
        with pytest.raises(RecordNotFoundError):
            get_model(pinned.id, registry=target.registry)
        assert target.storage().stat(pinned.key) is None
        assert get_model(last.id, registry=target.registry).state is RecordState.LIVE

    def test_a_slot_overwritten_before_the_copy_is_never_pinned(self, target: Target) -> None:
        saver = target.saver()
        trainer = trainer_engine(model())
        attach(trainer, saver, {"model": model()}, n_saved=1)
        trainer.run([0], max_epochs=1)
        saver.close()
        (record,) = find_models(project="p", registry=target.registry)
        target.storage().put_stream(record.key, __import__("io").BytesIO(b"other bytes"))
        with pytest.raises(IntegrityError, match="copy was deleted"):
            pin_model(record.id, registry=target.registry, storage_options=target.storage_options)
        assert target.storage().list("p/r/+pinned/") == []
        assert find_models(project="p", states=["pinned"], registry=target.registry) == []


class TestLocalPin(PinContract):
    @pytest.fixture
    def target(self, local_target: Target) -> Target:
        return local_target


@pytest.mark.ceph
class TestCephPin(PinContract):
    @pytest.fixture
    def target(self, s3_output_uri: str, tmp_path) -> Target:  # type: ignore[no-untyped-def]
        return Target(output_uri=s3_output_uri, registry=str(tmp_path / "registry.db"))


@pytest.mark.clearml
class TestClearMLPin(PinContract):
    @pytest.fixture
    def target(self, clearml_server, clearml_project, tmp_path) -> Target:  # type: ignore[no-untyped-def]
        return Target(output_uri=str(tmp_path / "output"), registry=f"clearml:{clearml_project}")
