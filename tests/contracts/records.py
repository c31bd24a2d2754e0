"""The record-store contract: records and their states (``RecordStore``), written once, run by every backend.

A backend opts in with ``class TestX(RecordStoreContract, LabelsContract, StreamClaimsContract)``
and a ``registry`` fixture that yields an empty registry in which project ``p`` and run ``r``
may be used. This part calls only the registry's ``records``; ``pending`` and ``live`` make the
records every registry contract starts from.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tracker_saver.core.errors import RecordNotFoundError, RegistryError
from tracker_saver.core.query import parse_order, parse_where
from tracker_saver.core.records import Record, RecordState, UploadInfo
from tracker_saver.registry import Query, Registry
from tracker_saver.registry.base import select

SHA = "ab" * 32


def pending(
    registry: Registry, filename: str, *, stream: str = "best_model", slot: int = 0, run: str = "r", **meta
) -> Record:
    """A pending record of ``filename`` in project ``p`` (its metadata: ``basename`` and ``meta``)."""
    info = UploadInfo(
        "p",
        run,
        stream,
        filename,
        metadata={"basename": stream, **meta},
        slot=slot,
        key=f"p/{run}/{stream}.slot{slot}.pt",
    )
    return registry.records.create_pending(info, uri=f"file:///out/p/{run}/{stream}.slot{slot}.pt")


def live(registry: Registry, filename: str, **kwargs) -> Record:
    """A live record of ``filename``: :func:`pending`, then made live with ``SHA`` and size 10."""
    record = pending(registry, filename, **kwargs)
    return registry.records.make_live(record.id, sha256=SHA, size=10)


class RecordStoreContract:
    def test_a_new_record_is_pending_with_its_slot_and_uri(self, registry: Registry) -> None:
        record = pending(registry, "best_model_1_val_acc=0.5000.pt", slot=1, global_step=1)
        assert record.state is RecordState.PENDING
        assert record.name == record.filename == "best_model_1_val_acc=0.5000.pt"
        assert (record.slot, record.key, record.stream) == (1, "p/r/best_model.slot1.pt", "best_model")
        assert record.uri == "file:///out/p/r/best_model.slot1.pt"
        assert record.sha256 is None and record.size is None

    def test_commit_makes_it_live_with_sha256_size_and_typed_metadata(self, registry: Registry) -> None:
        record = pending(registry, "best_model_3_val_acc=0.9312.pt", global_step=3, score=0.93121, score_name="val_acc")
        done = registry.records.make_live(record.id, sha256=SHA, size=1234, metadata={"priority": 0.93121})
        assert done.state is RecordState.LIVE
        assert (done.sha256, done.size) == (SHA, 1234)
        got = registry.records.get(record.id)
        assert got.metadata["global_step"] == 3 and type(got.metadata["global_step"]) is int
        assert got.metadata["slot"] == 0 and type(got.metadata["slot"]) is int
        assert got.metadata["score"] == pytest.approx(0.93121) and type(got.metadata["score"]) is float
        assert got.metadata["score_name"] == "val_acc"
        assert got.metadata["size"] == 1234 and got.metadata["sha256"] == SHA

    def test_absent_score_stays_absent(self, registry: Registry) -> None:
        record = live(registry, "checkpoint_4.pt", stream="checkpoint", global_step=4, score=None)
        assert registry.records.get(record.id).metadata.get("score") is None
        assert registry.records.get(record.id).score is None

    def test_an_evicted_record_is_never_live(self, registry: Registry) -> None:
        record = live(registry, "a_1.pt")
        evicted = registry.records.evict(record.id)
        assert evicted.state is RecordState.EVICTED
        with pytest.raises(RegistryError, match="not pending"):
            registry.records.make_live(record.id, sha256=SHA, size=10)
        with pytest.raises(RegistryError, match="evicted"):
            registry.records.evict(record.id)
        assert registry.records.get(record.id).state is RecordState.EVICTED
        assert registry.records.query(Query(project="p", states=(RecordState.LIVE,))) == []

    def test_a_pending_record_cannot_be_evicted_and_can_fail(self, registry: Registry) -> None:
        record = pending(registry, "a_1.pt")
        with pytest.raises(RegistryError):
            registry.records.evict(record.id)
        failed = registry.records.fail(record.id, "OSError: disk full")
        assert failed.state is RecordState.FAILED and "disk full" in (failed.error or "")

    def test_revive_moves_evicted_back_to_loadable(self, registry: Registry) -> None:
        record = live(registry, "a_1.pt")
        registry.records.evict(record.id)
        revived = registry.records.set_state(record.id, RecordState.REVIVED, expected=(RecordState.EVICTED,))
        assert revived.state is RecordState.REVIVED and revived.state.loadable

    def test_unknown_id_raises_record_not_found_naming_it(self, registry: Registry) -> None:
        with pytest.raises(RecordNotFoundError, match="424242"):
            registry.records.get("424242")
        with pytest.raises(RecordNotFoundError, match="9223372036854775808"):
            registry.records.get("9223372036854775808")  # beyond a 64-bit integer (SQLite's ids): not found either

    def test_query_by_stream_run_and_state(self, registry: Registry) -> None:
        a = live(registry, "best_model_1_val_acc=0.5000.pt")
        live(registry, "checkpoint_1.pt", stream="checkpoint")
        live(registry, "best_model_1_val_acc=0.7000.pt", run="other")
        registry.records.evict(a.id)
        assert [r.filename for r in registry.records.query(Query(project="p", run="r", stream="best_model"))] == [
            a.filename
        ]
        assert (
            registry.records.query(Query(project="p", run="r", stream="best_model", states=(RecordState.LIVE,))) == []
        )
        assert [r.filename for r in registry.records.query(Query(project="p", filename="checkpoint_1.pt"))] == [
            "checkpoint_1.pt"
        ]

    def test_where_range_equality_and_membership_match_the_reference(self, registry: Registry) -> None:
        scores = [0.5, 0.93, None, 0.91, 0.2]
        for step, score in enumerate(scores):
            live(registry, f"best_model_{step}.pt", slot=step, global_step=step, score=score, prefix="best")
        live(registry, "checkpoint_9.pt", stream="checkpoint", global_step=9, prefix="")
        everything = registry.records.query(Query(project="p"))
        for where in (
            {"score": (">", 0.9)},
            {"score": ("<=", 0.5)},
            {"prefix": "best", "global_step": (">=", 3)},
            {"global_step": ("in", [1, 9])},
            {"prefix": ("!=", "best")},
            {"score": ("!=", 0.5)},
            {"global_step": 2},
        ):
            query = Query(project="p", where=parse_where(where))
            got = [r.filename for r in registry.records.query(query)]
            assert got == [r.filename for r in select(everything, query)], where
        assert [r.global_step for r in registry.records.query(Query(project="p", where=parse_where("score>0.9")))] == [
            1,
            3,
        ]

    def test_order_by_any_key_puts_absent_last(self, registry: Registry) -> None:
        for step, score in enumerate([0.5, 0.93, None, 0.91]):
            live(registry, f"best_model_{step}.pt", slot=step, global_step=step, score=score)
        desc = registry.records.query(Query(project="p", order_by=parse_order("-score")))
        assert [r.global_step for r in desc] == [1, 3, 0, 2]
        asc = registry.records.query(Query(project="p", order_by=parse_order("score")))
        assert [r.global_step for r in asc] == [0, 3, 1, 2]
        limited = registry.records.query(Query(project="p", order_by=parse_order("-global_step"), limit=2))
        assert [r.global_step for r in limited] == [3, 2]

    def test_query_values_are_data_not_code(self, registry: Registry) -> None:
        live(registry, "a_1.pt", note="x")
        evil = "x' OR '1'='1"
        assert registry.records.query(Query(project="p", where=parse_where({"note": evil}))) == []
        assert registry.records.query(Query(project=evil)) == []
        assert len(registry.records.query(Query(project="p"))) == 1

    # -- the commit point: supersede at step 6, restore and fail when the write fails --------------
    def test_supersede_notes_the_digest_and_evicts_the_replaced_record_in_one_step(self, registry: Registry) -> None:
        old = live(registry, "a_1.pt")
        new = pending(registry, "a_2.pt")
        registry.records.supersede(new.id, sha256=SHA, size=7, replaces=old.id)
        assert registry.records.get(old.id).state is RecordState.EVICTED
        staged = registry.records.get(new.id)
        assert (staged.state, staged.sha256, staged.size) == (RecordState.PENDING, SHA, 7)

    def test_supersede_changes_nothing_when_the_replaced_record_is_no_longer_live(self, registry: Registry) -> None:
        old = live(registry, "a_1.pt")
        registry.records.evict(old.id)  # another writer took the slot
        new = pending(registry, "a_2.pt")
        with pytest.raises(RegistryError, match="no longer live"):
            registry.records.supersede(new.id, sha256=SHA, size=7, replaces=old.id)
        assert registry.records.get(new.id).sha256 is None and registry.records.get(new.id).state is RecordState.PENDING

    def test_a_failed_replacement_puts_the_previous_record_back(self, registry: Registry) -> None:
        old = live(registry, "a_1.pt")
        new = pending(registry, "a_2.pt")
        registry.records.supersede(new.id, sha256=SHA, size=7, replaces=old.id)
        assert registry.records.restore(old.id).state is RecordState.LIVE
        assert registry.records.fail(new.id, "the rename failed").state is RecordState.FAILED
        with pytest.raises(RegistryError):
            registry.records.restore(new.id)  # only an evicted record can come back

    # -- derived aliases: computed from the states when records are read ------------------------
    def test_latest_and_best_name_the_loadable_records_of_each_stream(self, registry: Registry) -> None:
        a = live(registry, "best_model_1_val_acc=0.9000.pt", slot=0, score=0.9)
        b = live(registry, "best_model_2_val_acc=0.5000.pt", slot=1, score=0.5)
        other = live(registry, "checkpoint_2.pt", stream="checkpoint", slot=0)
        assert registry.records.get(a.id).aliases == ("best",)
        assert registry.records.get(b.id).aliases == ("latest",)
        assert registry.records.get(other.id).aliases == ("latest",)  # no score: no best
        registry.records.evict(a.id)
        assert registry.records.get(a.id).aliases == ()
        assert registry.records.get(b.id).aliases == ("best", "latest")
        found = {r.id: r.aliases for r in registry.records.query(Query(project="p"))}
        assert found == {a.id: (), b.id: ("best", "latest"), other.id: ("latest",)}
        assert [r.id for r in registry.records.query(Query(project="p", alias="best"))] == [b.id]
        assert [r.id for r in registry.records.query(Query(project="p", alias="latest"))] == [b.id, other.id]

    def test_best_ties_go_to_the_later_record_and_a_failed_save_names_nothing(self, registry: Registry) -> None:
        a = live(registry, "best_model_1_val_acc=0.8000.pt", slot=0, score=0.8)
        b = live(registry, "best_model_2_val_acc=0.8000.pt", slot=1, score=0.8)
        c = pending(registry, "best_model_3_val_acc=0.9900.pt", slot=0, score=0.99)
        registry.records.fail(c.id, "disk full")
        assert registry.records.get(b.id).aliases == ("best", "latest")
        assert registry.records.get(a.id).aliases == () and registry.records.get(c.id).aliases == ()

    # -- pages and keys ---------------------------------------------------------------------------
    def test_offset_count_and_record_field_conditions(self, registry: Registry) -> None:
        ids = [live(registry, f"best_model_{i}_val_acc=0.{i}000.pt", slot=i, score=i / 10).id for i in range(1, 5)]
        registry.records.evict(ids[0])
        query = Query(project="p", order_by=parse_order("created_at"))
        assert [r.id for r in registry.records.query(replace(query, offset=1, limit=2))] == ids[1:3]
        assert [r.id for r in registry.records.query(replace(query, offset=3))] == ids[3:]
        assert registry.records.count(replace(query, limit=1, offset=1)) == 4
        second = "best_model_2_val_acc=0.2000.pt"  # a record's name is its filename until renamed
        assert [r.id for r in registry.records.query(replace(query, name=second))] == [ids[1]]
        for where, expected in (
            ("state=evicted", ids[:1]),
            (f"name!={second}", [ids[0], *ids[2:]]),
            ("run=r", ids),
            ("stream=checkpoint", []),
            ("project=p", ids),
        ):
            q = replace(query, where=parse_where(where))
            assert [r.id for r in registry.records.query(q)] == expected, where
            assert registry.records.count(q) == len(expected), where
            assert [r.id for r in select(registry.records.query(query), q)] == expected, where

    def test_output_uri_narrows_a_query_and_metadata_keys_lists_every_key(self, registry: Registry) -> None:
        assert registry.records.metadata_keys() == set()
        a = live(registry, "model_1.pt", stream="model", lr=0.1)
        info = UploadInfo("p", "r", "model", "model_1.pt", metadata={"basename": "model", "lr (warm-up)": 2},
                          slot=0, key="p/r/model.slot0.pt", output_uri="file:///elsewhere")  # fmt: skip
        b = registry.records.make_live(registry.records.create_pending(info, uri="file:///elsewhere/p/r/model.slot0.pt").id,
                            sha256=SHA, size=3)  # fmt: skip
        assert [r.id for r in registry.records.query(Query(project="p", output_uri="file:///elsewhere"))] == [b.id]
        assert registry.records.count(Query(output_uri="file:///elsewhere")) == 1
        assert a.id not in [r.id for r in registry.records.query(Query(output_uri="file:///elsewhere"))]
        every = {key for r in registry.records.query(Query()) for key in r.metadata}
        assert {"lr", "lr (warm-up)", "basename", "slot"} <= every <= registry.records.metadata_keys()
        assert "nosuchkey" not in registry.records.metadata_keys()
