"""An alias never dangles, whoever set it: the save that evicts an aliased slot record pins its bytes first.

``set_alias`` pins a slot record at alias time; these aliases are written the other way, straight
onto the slot record through the registry's own label API (as another tool, a tracker's UI or an
earlier release does), and the stream's next save must still keep what the alias names (issue 52,
case 1). The upgrade from 0.1.0 itself is tests/test_upgrade.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import Target, attach, model, trainer_engine
from tracker_saver import RecordState, find_models, get_model, resolve_model
from tracker_saver.registry.base import Registry
from tracker_saver.registry.shared import shared_registry


def _another_tools_alias_survives_the_slots_next_save(target: Target) -> None:
    """Train 2 epochs (n_saved=1), alias the live slot record behind set_alias's back, train a third."""
    saver = target.saver()
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=1)
    trainer.run([0], max_epochs=2)
    reg = shared_registry(target.registry, create=False)
    (live,) = find_models(project="p", live=True, registry=reg)
    reg.labels.set_alias(live.id, "production")  # no pin: the alias sits on the slot record
    reg.labels.set_alias(live.id, "staging")
    assert get_model(live.id, registry=reg).state is RecordState.LIVE
    trainer.run([0], max_epochs=3)  # epoch 3's save reuses the only slot: the aliased record is evicted
    saver.close()
    evicted = get_model(live.id, registry=reg)
    assert evicted.state is RecordState.EVICTED and not {"production", "staging"} & set(evicted.aliases)
    production = resolve_model("p@production", registry=reg)
    assert production.state is RecordState.PINNED and production.id != live.id
    assert production.metadata["kept_by"] == "alias production"
    assert str(production.metadata["pinned_from"]) == live.id and production.name == live.name
    assert resolve_model("p@staging", registry=reg).id == production.id  # one copy for both aliases
    assert target.storage().digest(str(production.key)) == (live.size, live.sha256)
    slots = [o.key for o in target.storage().list("p/r/") if ".slot" in o.key]
    assert slots == ["p/r/model.slot0.pt"]  # the pin is no slot: the stream keeps its n_saved objects


def test_an_alias_another_tool_set_on_a_sqlite_slot_record_names_its_bytes_after_eviction(
    local_target: Target,
) -> None:
    _another_tools_alias_survives_the_slots_next_save(local_target)


def test_with_async_upload_the_alias_is_moved_on_the_upload_worker_before_the_slot_is_replaced(
    local_target: Target,
) -> None:
    local_target.saver_options = {"async_upload": True}
    _another_tools_alias_survives_the_slots_next_save(local_target)


@pytest.mark.mlflow
def test_an_alias_another_tool_set_on_an_mlflow_slot_record_names_its_bytes_after_eviction(
    mlflow_registry: Registry, tmp_path: Path
) -> None:
    _another_tools_alias_survives_the_slots_next_save(
        Target(output_uri=str(tmp_path / "out"), registry=mlflow_registry)
    )


@pytest.mark.clearml
def test_an_alias_another_tool_set_on_a_clearml_slot_record_names_its_bytes_after_eviction(
    clearml_server: object, clearml_project: str, tmp_path: Path
) -> None:
    _another_tools_alias_survives_the_slots_next_save(
        Target(output_uri=str(tmp_path / "out"), registry=f"clearml:{clearml_project}")
    )
