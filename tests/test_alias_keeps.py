"""An alias never dangles: set on a slot record, it pins the checkpoint and names the pin (README sequence, CLI)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from tests.helpers import SCORES, Target, attach, model, trainer_engine
from tracker_saver import RecordState, find_models, get_model, set_alias
from tracker_saver.cli.main import main


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
