"""DESIGN's invariants through a real Ignite ``Checkpoint`` and ``Engine``, for every backend.

A backend opts in with ``class TestX(InvariantContract)`` and a ``target`` fixture returning
a ``tests.helpers.Target`` (output_uri, storage_options, registry) with nothing in it yet.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os

import pytest
import torch
from ignite.engine import Events
from ignite.handlers import Checkpoint

from tests import forkserver
from tests.helpers import (
    SCORES,
    Target,
    Worker,
    attach,
    model,
    process_env,
    process_spec,
    spec_preload,
    train,
    trainer_engine,
)
from tracker_saver import (
    IntegrityError,
    RecordState,
    SerializationError,
    StreamBusyError,
    find_models,
    load_checkpoint,
    rename_model,
)


def _run_process(target: Target, *, run: str, epochs: int, mode: str) -> dict:
    config = process_spec(target, run=run, epochs=epochs, mode=mode)
    done = forkserver.run(
        "tests.resume_run", [json.dumps(config)], env=process_env(), timeout=300, preload=spec_preload(config)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


class InvariantContract:
    # -- 1. Footprint ---------------------------------------------------------------------
    @pytest.mark.parametrize("epochs", [2, 7])
    def test_footprint_is_min_of_saves_and_n_saved_after_every_save(self, target: Target, epochs: int) -> None:
        seen: list[dict[str, int]] = []
        saver = target.saver(post_upload=[lambda info: seen.append(target.counts())])
        net = model()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        trainer = trainer_engine(net)
        attach(trainer, saver, {"model": net, "optimizer": opt, "trainer": trainer}, n_saved=1)
        attach(trainer, saver, {"model": net}, n_saved=2, prefix="best", scores=SCORES)
        attach(trainer, saver, {"model": net, "optimizer": opt}, n_saved=3, prefix="every")
        trainer.run([0, 1], max_epochs=epochs)
        limits = {"checkpoint": 1, "best_model": 2, "every_checkpoint": 3}
        assert seen, "the post-upload callback never ran"
        for counts in seen:
            for stream, n in counts.items():
                assert n <= limits[stream], (stream, counts)
        assert target.counts() == {s: min(epochs, n) for s, n in limits.items()}
        live = find_models(project="p", run="r", live=True, registry=target.registry)
        assert len(live) == sum(target.counts().values())

    def test_n_saved_none_keeps_everything(self, target: Target) -> None:
        saver = target.saver()
        net = model()
        trainer = trainer_engine(net)
        attach(trainer, saver, {"model": net}, n_saved=None)
        trainer.run([0], max_epochs=5)
        assert target.counts() == {"model": 5}
        assert len(find_models(project="p", live=True, registry=target.registry)) == 5

    # -- 2. Truth -------------------------------------------------------------------------
    def test_every_live_record_has_its_bytes_and_evicted_ones_are_never_live(self, target: Target) -> None:
        saver = target.saver()
        net = model()
        trainer = trainer_engine(net)
        attach(trainer, saver, {"model": net}, n_saved=2, prefix="best", scores=SCORES)
        trainer.run([0, 1], max_epochs=8)
        storage = target.storage()
        records = find_models(project="p", registry=target.registry)
        live = [r for r in records if r.state is RecordState.LIVE]
        assert len(live) == 2
        for record in live:
            with storage.get(record.key) as f:
                data = f.read()
            assert (len(data), hashlib.sha256(data).hexdigest()) == (record.size, record.sha256)
        evicted = [r for r in records if r.state is RecordState.EVICTED]
        assert evicted and not {r.id for r in evicted} & {r.id for r in live}
        assert {r.state for r in records} == {RecordState.LIVE, RecordState.EVICTED}

    def test_a_record_is_pending_until_its_bytes_are_complete(self, target: Target) -> None:
        states = []

        def observe(info) -> None:  # runs after the object is complete, before the commit
            found = find_models(project="p", registry=target.registry)
            states.append([r.state for r in found if r.filename == info.filename])
            assert target.storage().stat(info.key).size == info.metadata["size"]

        saver = target.saver(post_upload=[observe])
        net = model()
        trainer = trainer_engine(net)
        attach(trainer, saver, {"model": net}, n_saved=1)
        trainer.run([0], max_epochs=2)
        assert states == [[RecordState.PENDING], [RecordState.PENDING]]

    def test_a_checkpoint_torch_cannot_serialize_fails_clearly_and_leaves_nothing(self, target: Target) -> None:
        import threading

        class Unpicklable:
            def state_dict(self):
                return {"lock": threading.Lock()}

        saver = target.saver()
        trainer = trainer_engine(model())
        attach(trainer, saver, {"thing": Unpicklable()}, n_saved=1)
        with pytest.raises(SerializationError, match="state_dict") as caught:
            trainer.run([0], max_epochs=1)
        assert caught.value.__cause__ is not None
        assert target.storage().list() == []
        records = find_models(project="p", registry=target.registry)
        # Async saving refuses it at the snapshot, on the training thread, before any record.
        expected = [] if target.saver_options.get("async_upload") else [RecordState.FAILED]
        assert [r.state for r in records] == expected

    # -- 3. Names -------------------------------------------------------------------------
    def test_names_and_typed_metadata_for_score_and_step_streams(self, target: Target) -> None:
        saver = target.saver()
        net = model()
        trainer = trainer_engine(net)
        attach(trainer, saver, {"model": net}, n_saved=2, prefix="best", scores=SCORES)
        attach(trainer, saver, {"model": net}, n_saved=1, step_transform=False)
        trainer.run([0, 1, 2], max_epochs=4)
        best = find_models(project="p", stream="best_model", live=True, order_by="-score", registry=target.registry)
        assert [r.name for r in best] == ["best_model_4_val_acc=0.9000.pt", "best_model_2_val_acc=0.7000.pt"]
        top = best[0]
        assert top.metadata["global_step"] == 4 and type(top.metadata["global_step"]) is int
        assert top.metadata["score"] == 0.9 and type(top.metadata["score"]) is float
        assert top.metadata["slot"] in (0, 1) and type(top.metadata["slot"]) is int
        assert (top.metadata["prefix"], top.metadata["ignite_name"], top.metadata["score_name"]) == (
            "best",
            "model",
            "val_acc",
        )
        assert top.metadata["torch"] == torch.__version__
        assert top.key == f"p/r/best_model.slot{top.slot}.pt" and "val_acc" not in top.key
        (step,) = find_models(project="p", stream="model", live=True, registry=target.registry)
        assert step.name == "model_12.pt"  # no transform: Ignite's global step is the iteration
        assert step.metadata["global_step"] == 12 and step.score is None
        assert step.metadata["priority"] == 12 and type(step.metadata["priority"]) is int

    def test_equal_scores_reuse_the_filename_without_growing(self, target: Target) -> None:
        saver = target.saver()
        net = model()
        trainer = trainer_engine(net)
        attach(
            trainer, saver, {"model": net}, n_saved=2, prefix="best", scores=[0.5, 0.5, 0.5, 0.7], step_transform=False
        )
        trainer.run([0], max_epochs=4)
        live = find_models(project="p", live=True, registry=target.registry)
        assert sorted(r.name for r in live) == ["best_model_val_acc=0.5000.pt", "best_model_val_acc=0.7000.pt"]
        assert target.counts() == {"best_model": 2}
        assert len(find_models(project="p", registry=target.registry)) == 4

    def test_nan_scores_are_recorded_as_absent_and_never_match(self, target: Target) -> None:
        saver = target.saver()
        net = model()
        trainer = trainer_engine(net)
        attach(trainer, saver, {"model": net}, n_saved=3, prefix="best", scores=[math.nan, 0.6, 0.7])
        trainer.run([0], max_epochs=3)
        records = find_models(project="p", registry=target.registry)
        nan = next(r for r in records if "nan" in r.name)
        assert nan.state is RecordState.LIVE and nan.score is None and nan.metadata["global_step"] == 1
        assert [
            r.global_step
            for r in find_models(project="p", where="score>0", order_by="-score", registry=target.registry)
        ] == [3, 2]
        assert find_models(project="p", order_by="-score", registry=target.registry)[-1].id == nan.id

    def test_a_rename_survives_later_saves(self, target: Target) -> None:
        saver = target.saver()
        net = model()
        trainer = trainer_engine(net)
        attach(trainer, saver, {"model": net}, n_saved=3, prefix="best", scores=SCORES)
        trainer.run([0], max_epochs=2)
        first = find_models(project="p", registry=target.registry)[0]
        rename_model(first.id, "the one we ship", registry=target.registry)
        trainer.run([0], max_epochs=8)
        again = [r for r in find_models(project="p", registry=target.registry) if r.id == first.id]
        assert again[0].name == "the one we ship" and again[0].filename == first.filename
        assert sum(r.name == "the one we ship" for r in find_models(project="p", registry=target.registry)) == 1

    def test_remove_of_a_name_that_never_saved_is_harmless(self, target: Target) -> None:
        saver = target.saver()
        saver.remove("best_model_99_val_acc=0.1000.pt")
        net = model()
        trainer = trainer_engine(net)
        attach(trainer, saver, {"model": net}, n_saved=1)
        trainer.run([0], max_epochs=2)
        saver.remove("model_1.pt")  # already evicted by Ignite
        assert target.counts() == {"model": 1}
        assert len(find_models(project="p", live=True, registry=target.registry)) == 1

    # -- load with verification ------------------------------------------------------------
    def test_load_checkpoint_verifies_then_loads(self, target: Target) -> None:
        saver = target.saver()
        net = model()
        trainer = trainer_engine(net)
        attach(trainer, saver, {"model": net}, n_saved=1)
        trainer.run([0], max_epochs=1)
        (record,) = find_models(project="p", live=True, registry=target.registry)
        fresh = torch.nn.Linear(4, 2)
        load_checkpoint(record.id, {"model": fresh}, registry=target.registry, storage_options=target.storage_options)
        assert all(
            torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), net.state_dict().values(), strict=True)
        )
        target.storage().put_stream(record.key, io.BytesIO(b"someone else's bytes"))
        with pytest.raises(IntegrityError, match="overwritten or corrupted"):
            load_checkpoint(record, {"model": fresh}, storage_options=target.storage_options)

    # -- 4. Resume (new processes) ----------------------------------------------------------
    def test_resume_in_a_new_process_continues_slots_and_eviction_order(self, target: Target) -> None:
        reference = _run_process(target, run="straight", epochs=8, mode="restore")
        first = _run_process(target, run="split", epochs=4, mode="restore")
        second = _run_process(target, run="split", epochs=8, mode="restore")
        assert first["loaded"] is None and second["loaded"] == "checkpoint_4.pt"
        assert first["events"] + second["events"] == reference["events"]
        for stream in ("saved_best", "saved_last", "saved_every"):
            assert second[stream] == reference[stream], stream
        assert second["weight_sum"] == pytest.approx(reference["weight_sum"])
        for result in (first, second):
            assert result["max_objects"]["best_model"] <= 2 and result["max_objects"]["checkpoint"] <= 1
            assert result["max_objects"]["every_model"] <= 6
        assert target.counts("split") == {"best_model": 2, "checkpoint": 1, "every_model": 6}
        live = find_models(project="p", run="split", live=True, registry=target.registry)
        expected = reference["saved_best"] + reference["saved_last"] + reference["saved_every"]
        assert sorted(r.filename for r in live) == sorted(expected)

    def test_a_fresh_checkpoint_in_an_old_run_reuses_inherited_slots(self, target: Target) -> None:
        _run_process(target, run="again", epochs=4, mode="fresh")
        before = {r.id for r in find_models(project="p", run="again", live=True, registry=target.registry)}
        second = _run_process(target, run="again", epochs=4, mode="fresh")
        assert second["max_objects"] == {"best_model": 2, "checkpoint": 1, "every_model": 4}
        assert target.counts("again") == {"best_model": 2, "checkpoint": 1, "every_model": 4}
        records = find_models(project="p", run="again", registry=target.registry)
        assert all(r.state is RecordState.EVICTED for r in records if r.id in before)
        assert len([r for r in records if r.state is RecordState.LIVE]) == 7

    # -- The ways people use Ignite (issue: the invariants hold in every way) ----------------
    #: Faults each backend can inject through real mechanisms (the registry lock is SQLite's).
    FAULTS: tuple[str, ...] = ("serialize", "skip", "registry")
    KILLS: tuple[str, ...] = ("kill-serialize", "kill-stage", "kill-post")

    def _assert_true(self, target: Target, run: str = "r") -> list:
        """Every live record's object exists with its size and sha256; return the live records."""
        storage = target.storage()
        live = [r for r in find_models(project="p", run=run, live=True, registry=target.registry)
                if r.output_uri == storage.uri]  # fmt: skip
        for record in live:
            assert storage.digest(record.key) == (record.size, record.sha256), record
        return live

    @pytest.mark.parametrize("n_saved", [1, 2])
    def test_a_custom_filename_pattern_without_ext_keeps_n_saved_objects(self, target: Target, n_saved: int) -> None:
        saver = target.saver()
        net = model()
        trainer = trainer_engine(net)
        handler = Checkpoint({"model": net}, saver, n_saved=n_saved, filename_pattern="{name}_{score}",
                             score_function=lambda e: e.state.epoch / 10)  # fmt: skip
        trainer.add_event_handler(Events.EPOCH_COMPLETED, handler)
        saver.attach(trainer)
        trainer.run([0], max_epochs=6)
        assert target.counts() == {"model": n_saved}
        keys = sorted(o.key for o in target.storage().list("p/r/"))
        assert keys == [f"p/r/model.slot{k}.pt" for k in range(n_saved)]
        live = self._assert_true(target)
        assert sorted(r.filename for r in live) == sorted(f for _, f in handler._saved)

    def test_ignites_own_restore_never_overwrites_a_checkpoint_it_keeps(self, target: Target) -> None:
        with Worker(target, n_best=3) as first:
            first.epoch(0.90)
            first.epoch(0.80)
        # A new process restores Ignite's _saved with Checkpoint.load_objects (include_self=True).
        with Worker(target, restore="ignite", n_best=3) as second:
            for score in (0.50, 0.95, 0.60):
                second.epoch(score)
                live = self._assert_true(target)
                assert sorted(r.filename for r in live if r.stream == "best_checkpoint") == sorted(
                    second.saved("best_checkpoint")
                )
        assert target.counts() == {"best_checkpoint": 3, "checkpoint": 1}
        best = find_models(
            project="p", stream="best_checkpoint", live=True, order_by="-score", registry=target.registry
        )
        assert [r.score for r in best] == [0.95, 0.90, 0.80]

    def test_one_failed_save_never_costs_the_last_good_checkpoint(self, target: Target) -> None:
        for fault in self.FAULTS:
            run = f"fail-{fault}"
            with Worker(target, run=run, timeout=0.5) as worker:
                worker.epoch(0.5)
                answer = worker.epoch(0.6, fault=fault, stream="checkpoint")
                assert answer is not None and (answer["error"] is None) == (fault == "skip"), answer
                (live,) = [r for r in self._assert_true(target, run) if r.stream == "checkpoint"]
                assert live.filename == "checkpoint_1.pt", fault
            # A new process: resume() finds the last good checkpoint and continues from it.
            with Worker(target, run=run, restore="resume") as again:
                again.epoch(0.7)
                assert again.last["epoch"] == 2, fault  # resumed from epoch 1
            assert target.counts(run) == {"best_checkpoint": 2, "checkpoint": 1}, fault

    def test_a_failed_save_into_an_inherited_slot_keeps_the_inherited_record(self, target: Target) -> None:
        with Worker(target) as first:
            first.epoch(0.5)
        with Worker(target) as fresh:  # a fresh Checkpoint: the old record is inherited
            answer = fresh.epoch(0.6, fault="serialize", stream="checkpoint")
            assert answer is not None and "SerializationError" in answer["error"]
        (live,) = [r for r in self._assert_true(target) if r.stream == "checkpoint"]
        assert live.filename == "checkpoint_1.pt"
        with Worker(target, restore="resume") as again:
            again.epoch(0.7)
            assert again.last["epoch"] == 2

    def test_a_kill_at_any_step_is_recovered_at_the_next_start(self, target: Target) -> None:
        expected = {"kill-serialize": ("checkpoint_1.pt", 2), "kill-stage": ("checkpoint_1.pt", 2),
                    "kill-post": ("checkpoint_2.pt", 3)}  # fmt: skip
        for kill in self.KILLS:
            run = f"kill-{kill}"
            with Worker(target, run=run) as worker:
                worker.epoch(0.5)
                assert worker.epoch(0.6, fault=kill, stream="checkpoint") is None
            # No live record ever points at other bytes, even before any recovery.
            self._assert_true(target, run)
            with Worker(target, run=run, restore="resume") as again:
                filename, epoch = expected[kill]
                (live,) = [r for r in self._assert_true(target, run) if r.stream == "checkpoint"]
                assert live.filename == filename, kill
                again.epoch(0.7)
                assert again.last["epoch"] == epoch, kill
            assert target.counts(run) == {"best_checkpoint": 2, "checkpoint": 1}, kill
            states = {r.filename: r.state for r in find_models(project="p", run=run, stream="checkpoint",
                                                               registry=target.registry)}  # fmt: skip
            assert RecordState.PENDING not in states.values(), (kill, states)

    def test_a_second_writer_on_a_stream_is_refused_with_the_holder(self, target: Target) -> None:
        first = target.saver()
        net = model()
        trainer = trainer_engine(net)
        attach(trainer, first, {"model": net}, n_saved=1)
        trainer.run([0], max_epochs=1)
        second = target.saver()
        with pytest.raises(StreamBusyError, match=rf"stream p/r/model at .* is being written by .*pid {os.getpid()}"):
            train(second, {"model": net})
        train(second, {"model": net}, prefix="mine")  # another stream of the same run: fine
        trainer.run([0], max_epochs=3)  # the first writer never noticed
        first.close()
        train(target.saver(), {"model": net})  # a closed saver holds nothing
        assert target.counts() == {"model": 1, "mine_model": 1}
        self._assert_true(target)

    def test_a_killed_writer_holds_nothing(self, target: Target) -> None:
        worker = Worker(target)
        worker.epoch(0.5)
        saver = target.saver()
        net = model()
        trainer = trainer_engine(net)
        attach(trainer, saver, {"model": net, "trainer": trainer}, n_saved=1)  # stream "checkpoint"
        with pytest.raises(StreamBusyError, match=f"pid {worker.proc.pid}"):
            trainer.run([0], max_epochs=1)
        worker.proc.kill()
        worker.proc.wait()
        trainer.run([0], max_epochs=2)  # right after the kill: it just works
        assert target.counts() == {"best_checkpoint": 1, "checkpoint": 1}
        self._assert_true(target)

    def test_records_at_another_output_uri_are_another_stream(self, target: Target) -> None:
        other = Target(target.output_uri.rstrip("/") + "-other", target.registry, target.storage_options)
        for where in (target, other):
            saver = where.saver()
            net = model()
            trainer = trainer_engine(net)
            attach(trainer, saver, {"model": net}, n_saved=1)
            trainer.run([0], max_epochs=2)
            saver.close()
        assert target.counts() == other.counts() == {"model": 1}
        live = find_models(project="p", run="r", live=True, registry=target.registry)
        assert sorted(r.output_uri for r in live) == sorted([target.storage().uri, other.storage().uri])
        self._assert_true(target)
        self._assert_true(other)

    def test_infinite_scores_keep_their_priority_across_a_restart(self, target: Target) -> None:
        with Worker(target) as first:
            first.epoch(0.5)
            first.epoch(math.inf)
        (top,) = find_models(project="p", where="score>0.9", registry=target.registry)
        assert top.score == math.inf and top.metadata["priority"] == math.inf
        with Worker(target, restore="resume") as second:
            second.epoch(0.7)
            second.epoch(0.8)
            kept = second.saved("best_checkpoint")
        assert kept == ["best_checkpoint_4_acc=0.8000.pt", "best_checkpoint_2_acc=inf.pt"]
        best = [r for r in self._assert_true(target) if r.stream == "best_checkpoint"]
        assert sorted(r.filename for r in best) == sorted(kept)
        assert [r.score for r in find_models(project="p", where="score>0.9", registry=target.registry)] == [math.inf]
