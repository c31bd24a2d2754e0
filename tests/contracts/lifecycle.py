"""The lifecycle contract: a checkpoint's life after its save, written once, run on every registry that keeps it.

A registry opts in with ``class TestX(ArchiveContract, AliasKeepContract, ...)`` and a ``target``
fixture: a :class:`~tests.helpers.Target` whose output folder is empty and whose registry may use
project ``p`` and run ``r`` (tests/test_lifecycle_contract.py). Each promise is a class, so a
registry that does not keep a promise simply does not inherit it (no skip), and inherits what it
promises instead:

=====================================  =======  ======  ========  ==========================================
promise                                SQLite   MLflow  ClearML   why not
=====================================  =======  ======  ========  ==========================================
archive keeps (``keep_every``,         yes      yes     yes
``keep_every_max``): ArchiveContract
alias keeps, at alias time and at      yes      yes     yes
eviction: AliasKeepContract
promotion gates: AliasKeepContract     yes      yes     yes       (a compare-and-set without transactions
(a gated alias on a slot record) and                              on the trackers: ``lifecycle.gates``)
LabelsContract (``move_alias``)
events and retention (prune):          yes      no      no        the trackers have no transaction to write
HistoryContract                                                   an event with its change, and the registry
                                                                  seam deletes only pinned records there;
                                                                  they keep NoHistoryContract instead
=====================================  =======  ======  ========  ==========================================
"""

from __future__ import annotations

import re

import pytest

from tests.helpers import Target, attach, model, trainer_engine
from tracker_saver import PromotionRefusedError, RecordState, find_models, get_model, resolve_model, set_alias
from tracker_saver.core.errors import RegistryError
from tracker_saver.fsck import check
from tracker_saver.lifecycle.gates import better
from tracker_saver.lifecycle.retention import Retention
from tracker_saver.registry import Query
from tracker_saver.registry.events import history_of
from tracker_saver.registry.shared import shared_registry


def archived(target: Target) -> list[tuple[int | float, str]]:
    """``(kept_at, kept_by)`` of the run's archive entries, oldest first."""
    pinned = find_models(project="p", states=["pinned"], order_by="created_at", registry=target.registry)
    return [(r.metadata["kept_at"], r.metadata["kept_by"]) for r in pinned if "kept_at" in r.metadata]  # type: ignore[misc]


def untokened(key: str) -> str:
    """A pin key without its fresh token (``p/r/+pinned/<token>-model_2.pt`` is ``p/r/+pinned/model_2.pt``)."""
    return re.sub(r"\+pinned/[0-9a-f]{16}-", "+pinned/", key)


def entries_intact(target: Target) -> None:
    """Each pinned object is its record's bytes; an archive entry's, those of the slot record it was kept from."""
    for entry in find_models(project="p", states=["pinned"], registry=target.registry):
        assert target.storage().digest(entry.key) == (entry.size, entry.sha256)
        source = get_model(str(entry.metadata["pinned_from"]), registry=target.registry)
        assert source.sha256 == entry.sha256 and (source.slot is not None or "kept_at" not in entry.metadata)


class ArchiveContract:
    def test_every_epoch_kept_at_most_two_stores_kept_by_and_kept_at_typed_and_deletes_the_oldest(
        self, target: Target
    ) -> None:
        saver = target.saver(keep_every="1 epoch", keep_every_max=2)
        trainer = trainer_engine(model())
        attach(trainer, saver, {"model": model()}, n_saved=1)
        trainer.run([0], max_epochs=3)
        saver.close()
        assert archived(target) == [(2, "every 1 epoch"), (3, "every 1 epoch")]
        assert sorted(untokened(o.key) for o in target.storage().list("p/r/+pinned/")) == [
            "p/r/+pinned/model_2.pt",
            "p/r/+pinned/model_3.pt",
        ]
        entries_intact(target)


class AliasKeepContract:
    def test_an_alias_set_on_a_slot_record_names_a_pin_that_outlives_eviction_and_moves_only_past_a_gate(
        self, target: Target
    ) -> None:
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
        # A gate that refuses the live record (its global_step 4 against the holder's 2, lower winning) pins
        # nothing; one that lets it pass moves the alias to a pin of it (here the holder: the same bytes).
        latest = find_models(project="p", states=["live"], registry=target.registry)[0]
        gate = better("global_step", lower=True)
        with pytest.raises(
            PromotionRefusedError, match=f"record {latest.id} .* has global_step 4, which does not beat"
        ):
            set_alias(latest.id, "production", registry=target.registry, require=gate)
        assert [r.id for r in find_models(project="p", states=["pinned"], registry=target.registry)] == [production.id]
        moved = set_alias(
            latest.id,
            "production",
            registry=target.registry,
            require=lambda record, holder: None,
            storage_options=target.storage_options,
        )
        assert moved.state is RecordState.PINNED and moved.sha256 == latest.sha256  # a pin of the same bytes is reused
        assert resolve_model("p@production", registry=target.registry).id == moved.id

    def test_an_alias_another_tool_set_on_a_slot_record_names_its_bytes_after_eviction(self, target: Target) -> None:
        """The alias goes straight onto the slot record through the registry's own label API (as another
        tool, a tracker's UI or an earlier release does); the stream's next save still keeps what it names."""
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


class HistoryContract:
    def test_a_saver_with_history_writes_an_event_per_save_and_prunes_its_run_when_it_closes(
        self, target: Target
    ) -> None:
        saver = target.saver(history=Retention(keep_last=1))
        trainer = trainer_engine(model())
        attach(trainer, saver, {"model": model()}, n_saved=2, prefix="best")
        trainer.run([0], max_epochs=6)
        registry = shared_registry(target.registry, create=False)
        assert registry.records.count(Query(project="p", states=(RecordState.EVICTED,))) == 4
        saver.close()
        evicted = registry.records.query(Query(project="p", states=(RecordState.EVICTED,)))
        assert sorted(r.metadata["global_step"] for r in evicted) == [3, 4]  # each slot's newest evicted record
        assert not check(registry).problems
        events = history_of(registry, "the contract").events(project="p")
        left = sorted(r.id for r in registry.records.query(Query(project="p")))
        assert [e.type for e in events] == ["record.live"] * 4  # one written with each save that is left
        assert sorted(e.record_id or "" for e in events) == left  # a pruned record's events went with it


class NoHistoryContract:
    def test_a_registry_without_events_says_so_and_names_the_fix(self, target: Target) -> None:
        registry = shared_registry(target.registry, create=False)
        with pytest.raises(RegistryError, match="tracker-saver events is not available on .*use a SQLite registry"):
            history_of(registry, "tracker-saver events")
