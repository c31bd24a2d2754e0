"""The pre/post-upload chain, through a real Checkpoint: change, skip, and never swallow."""

from __future__ import annotations

import pytest

from tests.helpers import attach, model, trainer_engine
from tracker_saver import CallbackError, find_models
from tracker_saver.core.records import UploadInfo
from tracker_saver.save.callbacks import CallbackChain


def test_a_pre_upload_callback_adds_tags_and_metadata(local_target) -> None:
    def tag(info: UploadInfo) -> UploadInfo:
        info.tags.append("baseline")
        info.metadata["lr"] = 0.1
        return info

    saver = local_target.saver(pre_upload=[tag])
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=1)
    trainer.run([0], max_epochs=1)
    (record,) = find_models(project="p", registry=local_target.registry)
    assert record.tags == ("baseline",) and record.metadata["lr"] == 0.1


def test_a_callback_that_returns_none_skips_the_upload_and_frees_the_slot(local_target) -> None:
    saver = local_target.saver(pre_upload=[lambda info: None if info.metadata["global_step"] == 1 else info])
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=1)
    trainer.run([0], max_epochs=3)
    records = find_models(project="p", registry=local_target.registry)
    assert [r.global_step for r in records] == [2, 3]
    assert local_target.counts() == {"model": 1}
    assert {r.slot for r in records} == {0}


def test_the_slot_allocator_runs_before_user_callbacks(local_target) -> None:
    seen = []
    saver = local_target.saver(pre_upload=[lambda info: (seen.append((info.slot, info.key)), info)[1]])
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=1)
    trainer.run([0], max_epochs=1)
    assert seen == [(0, "p/r/model.slot0.pt")]


@pytest.mark.parametrize("where", ["pre", "post"])
def test_a_raising_callback_reaches_training_with_the_cause(local_target, where) -> None:
    def boom(info):
        raise RuntimeError("callback exploded")

    saver = local_target.saver(**{f"{where}_upload": [boom]})
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=1)
    with pytest.raises(CallbackError, match=f"{where}-upload callback .*boom.*callback exploded") as caught:
        trainer.run([0], max_epochs=1)
    assert isinstance(caught.value.__cause__, RuntimeError)
    live = find_models(project="p", live=True, registry=local_target.registry)
    # A pre-upload failure writes nothing; a post-upload one comes after the commit point,
    # so the checkpoint is complete and stays live (the error still reaches training).
    assert [r.filename for r in live] == ([] if where == "pre" else ["model_1.pt"])
    assert local_target.counts() == ({} if where == "pre" else {"model": 1})


def test_a_callback_returning_the_wrong_type_is_refused() -> None:
    chain = CallbackChain()
    chain.add_pre(lambda info: "oops")
    with pytest.raises(CallbackError, match="return the UploadInfo"):
        chain.run_pre(UploadInfo("p", "r", "s", "s_1.pt"))


@pytest.mark.parametrize(
    ("field", "value"),
    [("key", "elsewhere/x.pt"), ("filename", "renamed.pt"), ("slot", 7), ("stream", "other"), ("run", "r2"),
     ("project", "q"), ("output_uri", "file:///elsewhere")],
)  # fmt: skip
def test_a_callback_cannot_move_a_checkpoint_out_of_its_slots(local_target, field, value) -> None:
    def move(info):
        setattr(info, field, value)
        return info

    saver = local_target.saver(pre_upload=[move])
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=1)
    with pytest.raises(CallbackError, match=f"changed {field} of 'model_1.pt'.*may change name, metadata and tags"):
        trainer.run([0], max_epochs=1)
    assert find_models(registry=local_target.registry) == []  # no record, not even pending
    assert local_target.storage().list() == []


def test_a_callback_may_change_name_metadata_and_tags(local_target) -> None:
    def label(info):
        info.name = f"run-a {info.filename}"
        info.metadata["lr"] = 0.1
        info.tags.append("baseline")
        return info

    saver = local_target.saver(pre_upload=[label])
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=1)
    trainer.run([0], max_epochs=2)
    (record,) = find_models(live=True, registry=local_target.registry)
    assert (record.name, record.metadata["lr"], record.tags) == ("run-a model_2.pt", 0.1, ("baseline",))
    assert local_target.counts() == {"model": 1}


def test_the_info_a_pre_upload_callback_returned_is_not_changed_after_it(local_target) -> None:
    """The saver builds a new ``UploadInfo`` for each later step (the written digest, the post-upload chain)."""
    returned: list[tuple[UploadInfo, dict]] = []
    seen_after: list[dict] = []

    def keep(info: UploadInfo) -> UploadInfo:
        returned.append((info, dict(info.metadata)))
        return info

    saver = local_target.saver(pre_upload=[keep], post_upload=[lambda info: seen_after.append(dict(info.metadata))])
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=1)
    trainer.run([0], max_epochs=1)
    ((info, as_returned),) = returned
    assert info.metadata == as_returned and "sha256" not in info.metadata
    assert seen_after[0]["sha256"] == find_models(registry=local_target.registry)[0].sha256
