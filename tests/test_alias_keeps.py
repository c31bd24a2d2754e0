"""An alias never dangles: set on a slot record, it pins the checkpoint and names the pin (README sequence, CLI)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from tests.helpers import SCORES, Target, attach, model, trainer_engine
from tracker_saver import PromotionRefusedError, RecordState, find_models, get_model, resolve_model, set_alias
from tracker_saver.cli.main import main
from tracker_saver.lifecycle.gates import better
from tracker_saver.registry.base import Registry


def _cli(*argv: str) -> str:
    """Run ``tracker-saver ARGV`` in this process; what it printed (exit status 0 asserted)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(argv)) == 0, argv
    return out.getvalue()


def test_after_the_readmes_commands_and_another_training_run_production_still_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRACKER_SAVER_REGISTRY", str(tmp_path / "demo-output" / "registry.db"))
    _cli("demo", "--epochs", "2")
    # The README's command-line block, in its order.
    _cli("models", "list", "--project", "demo", "--where", "score>0.5", "--sort", "-score")
    _cli("models", "get", "demo/small-cnn/best_model@best", "./best.pt")
    best = json.loads(_cli("models", "show", "demo/small-cnn/best_model@best", "--json"))
    said = _cli("models", "alias", "demo/small-cnn/best_model@best", "production")
    production = json.loads(_cli("models", "show", "demo@production", "--json"))
    assert said.strip() == (
        f"record {best['id']} ({best['name']!r}) pinned as record {production['id']}, alias demo@production now on "
        f"record {production['id']}: later saves never evict it"
    )
    assert production["state"] == "pinned" and production["metadata"]["kept_by"] == "alias production"
    _cli("models", "rename", "demo@production", "the one we ship")
    assert json.loads(_cli("models", "show", "demo@production", "--json"))["name"] == "the one we ship"
    assert _cli("models", "pin", "demo@production").startswith(
        f"record {production['id']} ('the one we ship') is pinned already, at file://"
    )
    _cli("models", "get", "demo@production", "./prod.pt")
    _cli("runs", "list")
    _cli("fsck")
    _cli("repair", "--dry-run")
    # One more training run of the same streams reuses both best slots: the aliased slot record is evicted.
    _cli("demo", "--epochs", "2")
    assert get_model(best["id"]).state is RecordState.EVICTED
    said = _cli("models", "get", "demo@production", "./again.pt")
    assert f"record {production['id']} ('the one we ship')" in said
    assert (
        (tmp_path / "again.pt").read_bytes()
        == (tmp_path / "prod.pt").read_bytes()
        == (tmp_path / "best.pt").read_bytes()
    )
    said = _cli("models", "unalias", "demo", "production")
    assert said.strip() == (
        f"alias demo@production removed; record {production['id']} ('the one we ship'), the copy pinned when an "
        f"alias was set, stays pinned with no alias: `tracker-saver models unpin {production['id']}` deletes it"
    )
    assert get_model(production["id"]).state is RecordState.PINNED


def test_an_alias_on_a_pinned_record_is_just_set_and_a_persons_pin_is_reused(local_target: Target) -> None:
    from tracker_saver import pin_model, remove_alias

    saver = local_target.saver()
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=2, prefix="best", scores=SCORES)
    trainer.run([0], max_epochs=2)
    saver.close()
    reg = local_target.registry
    first, second = find_models(project="p", order_by="created_at", registry=reg)
    pinned = pin_model(first.id, registry=reg)
    assert set_alias(first.id, "production", registry=reg).id == pinned.id  # the pin of those bytes, no second copy
    assert set_alias(pinned.id, "staging", registry=reg).aliases == ("production", "staging")
    assert len(find_models(project="p", states=["pinned"], registry=reg)) == 1
    # A person's pin keeps no note: removing its last alias just removes the alias.
    remove_alias("p", "production", registry=reg)
    assert remove_alias("p", "staging", registry=reg) == get_model(pinned.id, registry=reg)
    assert get_model(second.id, registry=reg).aliases == ("best", "latest")


def _alias_on_a_slot_survives_eviction(target: Target) -> None:
    """Train 2 epochs (n_saved=1), alias the live record, train on: the alias names a pinned copy that loads."""
    saver = target.saver()
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=1)
    trainer.run([0], max_epochs=2)
    live = find_models(project="p", live=True, registry=target.registry)[0]
    named = set_alias(live.id, "production", registry=target.registry, storage_options=target.storage_options)
    assert named.state is RecordState.PINNED and named.metadata["kept_by"] == "alias production"
    trainer.run([0], max_epochs=4)
    saver.close()
    assert get_model(live.id, registry=target.registry).state is RecordState.EVICTED
    production = resolve_model("p@production", registry=target.registry)
    assert production.id == named.id and production.sha256 == live.sha256
    assert target.storage().digest(production.key) == (live.size, live.sha256)
    _gated_alias_on_a_slot(target, production.id)


def _gated_alias_on_a_slot(target: Target, held: str) -> None:
    """A gate that refuses the live record (its global_step 4 against the holder's 2, lower winning) pins
    nothing; one that lets it pass moves the alias to a pin of it (here the holder: the same bytes)."""
    latest = find_models(project="p", states=["live"], registry=target.registry)[0]
    gate = better("global_step", lower=True)
    with pytest.raises(PromotionRefusedError, match=f"record {latest.id} .* has global_step 4, which does not beat"):
        set_alias(latest.id, "production", registry=target.registry, require=gate)
    assert [r.id for r in find_models(project="p", states=["pinned"], registry=target.registry)] == [held]
    moved = set_alias(latest.id, "production", registry=target.registry, require=lambda record, holder: None,
                      storage_options=target.storage_options)  # fmt: skip
    assert moved.state is RecordState.PINNED and moved.sha256 == latest.sha256  # a pin of the same bytes is reused
    assert resolve_model("p@production", registry=target.registry).id == moved.id


@pytest.mark.mlflow
def test_on_mlflow_an_alias_set_on_a_slot_record_names_a_pin_that_outlives_eviction(
    mlflow_registry: Registry, tmp_path: Path
) -> None:
    _alias_on_a_slot_survives_eviction(Target(output_uri=str(tmp_path / "output"), registry=mlflow_registry))


@pytest.mark.clearml
def test_on_clearml_an_alias_set_on_a_slot_record_names_a_pin_that_outlives_eviction(
    clearml_server: object, clearml_project: str, tmp_path: Path
) -> None:
    _alias_on_a_slot_survives_eviction(
        Target(output_uri=str(tmp_path / "output"), registry=f"clearml:{clearml_project}")
    )
