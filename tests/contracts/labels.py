"""The labels contract: names, tags, user aliases and pins (``Labels``), written once, run by every backend.

A backend opts in by adding ``LabelsContract`` to its registry test class (see
``tests/contracts/records.py``); the records it labels are made with the record store.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.contracts.records import SHA, live
from tracker_saver.core.errors import ConfigError, PromotionRefusedError, RecordNotFoundError, RegistryError
from tracker_saver.core.query import parse_order, parse_where
from tracker_saver.core.records import RecordState, UploadInfo
from tracker_saver.lifecycle.gates import better, move_alias
from tracker_saver.registry import Query, Registry
from tracker_saver.registry.base import select


class LabelsContract:
    def test_rename_keeps_filename_and_survives_commit_of_others(self, registry: Registry) -> None:
        first = live(registry, "best_model_1_val_acc=0.5000.pt")
        registry.labels.rename(first.id, "the one we ship")
        live(registry, "best_model_2_val_acc=0.6000.pt", slot=1)
        got = registry.records.get(first.id)
        assert got.name == "the one we ship" and got.filename == "best_model_1_val_acc=0.5000.pt"

    def test_a_renamed_record_is_found_by_its_new_name(self, registry: Registry) -> None:
        ids = [live(registry, f"best_model_{i}_val_acc=0.{i}000.pt", slot=i, score=i / 10).id for i in range(1, 4)]
        registry.labels.rename(ids[1], "keeper")
        query = Query(project="p", order_by=parse_order("created_at"))
        assert [r.id for r in registry.records.query(replace(query, name="keeper"))] == [ids[1]]
        assert registry.records.query(replace(query, name="best_model_2_val_acc=0.2000.pt")) == []
        q = replace(query, where=parse_where("name!=keeper"))
        assert [r.id for r in registry.records.query(q)] == [ids[0], ids[2]]
        assert registry.records.count(q) == 2
        assert [r.id for r in select(registry.records.query(query), q)] == [ids[0], ids[2]]

    def test_labelling_an_unknown_id_raises_record_not_found(self, registry: Registry) -> None:
        with pytest.raises(RecordNotFoundError, match="424242"):
            registry.labels.rename("424242", "x")
        with pytest.raises(RecordNotFoundError, match="424242"):
            registry.labels.add_tags("424242", ["x"])
        with pytest.raises(RecordNotFoundError, match="424242"):
            registry.labels.set_alias("424242", "production")
        with pytest.raises(RecordNotFoundError, match="424242"):
            registry.labels.delete_pinned("424242")

    def test_tags_are_added_once(self, registry: Registry) -> None:
        record = live(registry, "a_1.pt")
        registry.labels.add_tags(record.id, ["baseline", "baseline", "ship"])
        assert set(registry.records.get(record.id).tags) >= {"baseline", "ship"}

    def test_tags_are_added_and_removed(self, registry: Registry) -> None:
        a = live(registry, "best_model_1_val_acc=0.9000.pt", slot=0)
        assert registry.labels.add_tags(a.id, ["candidate", "reviewed"]).tags == ("candidate", "reviewed")
        assert registry.labels.remove_tags(a.id, ["candidate", "never-there"]).tags == ("reviewed",)
        assert registry.records.get(a.id).tags == ("reviewed",)
        assert [r.id for r in registry.records.query(Query(project="p", tag="reviewed"))] == [a.id]
        assert registry.records.query(Query(project="p", tag="candidate")) == []

    def test_a_user_alias_is_unique_per_project_and_moves(self, registry: Registry) -> None:
        a = live(registry, "best_model_1_val_acc=0.9000.pt", slot=0, score=0.9)
        b = live(registry, "best_model_2_val_acc=0.5000.pt", slot=1, score=0.5)
        assert registry.labels.set_alias(a.id, "production").aliases == ("best", "production")
        registry.labels.set_alias(b.id, "production")
        assert "production" not in registry.records.get(a.id).aliases
        assert [r.id for r in registry.records.query(Query(project="p", alias="production"))] == [b.id]
        registry.labels.remove_alias("p", "production")
        assert registry.records.query(Query(project="p", alias="production")) == []
        with pytest.raises(RecordNotFoundError, match="no alias 'production'"):
            registry.labels.remove_alias("p", "production")

    def test_a_gated_alias_moves_only_to_a_better_record_and_says_why_not(self, registry: Registry) -> None:
        low = live(registry, "best_model_1_val_acc=0.5000.pt", slot=0, score=0.5)
        high = live(registry, "best_model_2_val_acc=0.9000.pt", slot=1, score=0.9)
        assert move_alias(registry, low.id, "production", check=better("score")).id == low.id  # nothing to beat
        assert move_alias(registry, high.id, "production", check=better("score")).id == high.id
        with pytest.raises(
            PromotionRefusedError, match=f"record {low.id} .* 0.5, which does not beat score 0.9 of record {high.id}"
        ):
            move_alias(registry, low.id, "production", check=better("score"))
        assert [r.id for r in registry.records.query(Query(project="p", alias="production"))] == [high.id]

    def test_derived_or_malformed_aliases_and_unloadable_records_are_refused(self, registry: Registry) -> None:
        a = live(registry, "best_model_1_val_acc=0.9000.pt", slot=0, score=0.9)
        with pytest.raises(ConfigError, match="'best' is derived"):
            registry.labels.set_alias(a.id, "best")
        with pytest.raises(ConfigError, match="not a valid alias"):
            registry.labels.set_alias(a.id, "-prod uction")
        registry.records.evict(a.id)
        with pytest.raises(RegistryError, match="is evicted: an alias names a loadable record"):
            registry.labels.set_alias(a.id, "production")

    def test_a_pinned_record_is_loadable_slotless_and_deleted_only_as_pinned(self, registry: Registry) -> None:
        a = live(registry, "best_model_1_val_acc=0.9000.pt", slot=0, score=0.9)
        info = UploadInfo("p", "r", "best_model", a.filename, metadata={"score": 0.9, "pinned_from": a.id},
                          tags=["keep"], slot=None, key=f"p/r/pinned/{a.filename}")  # fmt: skip
        pinned = registry.labels.create_pinned(info, uri=f"file:///out/{info.key}", sha256=SHA, size=10)
        got = registry.records.get(pinned.id)
        assert got.state is RecordState.PINNED and got.state.loadable and got.slot is None
        assert (got.sha256, got.size, got.key, got.tags) == (SHA, 10, info.key, ("keep",))
        assert got.metadata["pinned_from"] == a.id and got.aliases == ()  # derived aliases are the slots'
        assert registry.records.get(a.id).aliases == ("best", "latest")
        assert registry.labels.set_alias(pinned.id, "production").aliases == ("production",)
        with pytest.raises(RegistryError, match="not pinned"):
            registry.labels.delete_pinned(a.id)
        assert registry.labels.delete_pinned(pinned.id, unless_aliased=True) is False  # keep_every_max leaves it be
        assert registry.records.get(pinned.id).aliases == ("production",)
        assert registry.labels.delete_pinned(pinned.id) is True
        with pytest.raises(RecordNotFoundError):
            registry.records.get(pinned.id)
        assert registry.records.query(Query(project="p", alias="production")) == []
