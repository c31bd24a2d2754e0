"""History (issue 46): events written with each change, promotion gates, pruning old records; and their CLI.

Real training through Ignite's Checkpoint into a real SQLite file and a local folder; the CLI run
in-process through its ``main``.
"""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any

import pytest

from tests.helpers import SCORES, Target, attach, model, trainer_engine
from tracker_saver import (
    ConfigError,
    PromotionRefusedError,
    RecordState,
    find_models,
    pin_model,
    rename_model,
    set_alias,
    unpin_model,
)
from tracker_saver.cli.main import main
from tracker_saver.fsck import check
from tracker_saver.lifecycle.events import follow
from tracker_saver.lifecycle.gates import better, move_alias
from tracker_saver.lifecycle.retention import Retention
from tracker_saver.registry import Query, open_registry
from tracker_saver.registry.events import EVENT_TYPES, history_of


def train(target: Target, epochs: int, *, scored: bool = True) -> None:
    """``epochs`` epochs of a ``best_model`` stream in two slots: scored from SCORES (Ignite keeps the best
    two), or not (every epoch saved, the oldest evicted)."""
    saver = target.saver()
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=2, prefix="best", scores=SCORES if scored else None)
    trainer.run([0], max_epochs=epochs)
    saver.close()


def by_epoch(target: Target) -> dict[int, Any]:
    return {int(r.metadata["global_step"]): r for r in find_models(project="p", registry=target.registry)}


def cli(capsys: pytest.CaptureFixture[str], target: Target, *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--registry", target.registry])
    out, err = capsys.readouterr()
    return code, out, err


# -- events ---------------------------------------------------------------------------------------


def test_every_save_alias_move_pin_rename_and_unpin_is_an_event_with_before_and_after(local_target) -> None:
    train(local_target, 3)
    records = by_epoch(local_target)
    reg = local_target.registry
    first = set_alias(records[2].id, "production", registry=reg)  # a slot record: pinned, then aliased
    pinned = set_alias(records[3].id, "production", registry=reg)
    rename_model(pinned.id, "the one we ship", registry=reg)
    set_alias(pinned.id, "shipped", registry=reg)
    unpin_model(pinned.id, registry=reg)

    events = history_of(open_registry(reg), "events").events()
    assert [(e.type, e.record_id) for e in events] == [
        ("record.live", records[1].id),
        ("record.live", records[2].id),
        ("record.live", records[3].id),
        ("record.pinned", first.id),
        ("alias.moved", first.id),
        ("record.pinned", pinned.id),
        ("alias.moved", pinned.id),
        ("record.renamed", pinned.id),
        ("alias.moved", pinned.id),
        ("alias.removed", pinned.id),  # an unpin takes the pin's aliases with it
        ("alias.removed", pinned.id),
        ("record.unpinned", pinned.id),
    ]
    assert {e.type for e in events} == set(EVENT_TYPES)
    assert [e.seq for e in events] == sorted(e.seq for e in events) and len({e.id for e in events}) == len(events)
    assert {e.alias for e in events[9:11]} == {"production", "shipped"}
    moved = events[6]
    assert (moved.alias, moved.before["record_id"], moved.after["record_id"]) == ("production", first.id, pinned.id)
    assert moved.after["score"] == SCORES[2] and events[4].before is None
    assert events[5].after["state"] == "pinned" and events[5].after["name"] == records[3].name
    renamed = events[7]
    assert (renamed.before["name"], renamed.after["name"]) == (records[3].name, "the one we ship")
    assert events[0].before == {"state": "pending"} and events[0].after["state"] == "live"


def test_setting_an_alias_to_the_record_it_names_already_is_no_event(local_target) -> None:
    train(local_target, 1)
    record = by_epoch(local_target)[1]
    set_alias(record.id, "production", registry=local_target.registry)
    set_alias(record.id, "production", registry=local_target.registry)  # the pin of the same bytes: reused
    events = open_registry(local_target.registry).history.events()
    assert [e.type for e in events] == ["record.live", "record.pinned", "alias.moved"]


def test_follow_prints_old_events_then_new_ones_until_told_to_stop(local_target) -> None:
    train(local_target, 1)
    registry = open_registry(local_target.registry)
    record = by_epoch(local_target)[1]
    waits = iter(
        [lambda: registry.labels.set_alias(record.id, "staging"), lambda: registry.labels.remove_alias("p", "staging")]
    )

    def wait() -> bool:  # the clock: each tick makes one change, then the follower stops
        step = next(waits, None)
        if step is not None:
            step()
        return step is not None

    seen = [(e.type, e.alias) for e in follow(registry.history, wait=wait, project="p")]
    assert seen == [("record.live", None), ("alias.moved", "staging"), ("alias.removed", "staging")]


def test_the_events_command_prints_a_line_or_a_json_object_per_event(local_target, capsys) -> None:
    train(local_target, 2)
    set_alias(by_epoch(local_target)[2].id, "production", registry=local_target.registry)
    code, out, _ = cli(capsys, local_target, "events", "--after", "1")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3, out
    assert "record.live" in lines[0] and "record.pinned" in lines[1]
    assert "alias.moved" in lines[2] and "p@production" in lines[2]
    code, out, _ = cli(capsys, local_target, "events", "--json", "--project", "p")
    assert code == 0 and [json.loads(line)["type"] for line in out.splitlines()] == ["record.live"] * 2 + [
        "record.pinned",
        "alias.moved",
    ]


# -- promotion gates ------------------------------------------------------------------------------


def test_a_gated_alias_moves_only_to_a_record_with_a_better_score(local_target) -> None:
    train(local_target, 4)  # scores 0.5 0.7 0.6 0.9, two slots: epochs 2 and 4 live... and 3 evicted
    records = by_epoch(local_target)
    reg = local_target.registry
    held = set_alias(records[4].id, "production", registry=reg, require="score")  # nothing to beat
    pinned = pin_model(records[2].id, registry=reg)  # 0.7, a loadable record that stays
    with pytest.raises(
        PromotionRefusedError,
        match=rf"p@production stays .*record {pinned.id} .* 0\.7, which does not beat score 0\.9 of record {held.id}",
    ) as caught:
        set_alias(pinned.id, "production", registry=reg, require="score")
    assert caught.value.record_id == pinned.id and "0.9" in caught.value.reason
    assert [r.id for r in find_models(alias="production", registry=reg)] == [held.id]
    set_alias(pinned.id, "production", registry=reg, require=better("score", lower=True))
    assert [r.id for r in find_models(alias="production", registry=reg)] == [pinned.id]


def test_a_gate_refuses_a_record_or_holder_without_the_key(local_target) -> None:
    train(local_target, 2)
    records = by_epoch(local_target)
    reg = local_target.registry
    with pytest.raises(PromotionRefusedError, match="has no numeric 'loss' to compare"):
        set_alias(records[2].id, "production", registry=reg, require="loss")
    registry = open_registry(reg)
    with registry.atomic() as conn:
        conn.execute("DELETE FROM metadata WHERE record_id = ? AND key = 'score'", (int(records[1].id),))
    held = set_alias(records[1].id, "production", registry=reg)  # its pin has no score either
    with pytest.raises(
        PromotionRefusedError,
        match=f"record {held.id} .* has no numeric 'score'; move the alias without the gate",
    ):
        set_alias(records[2].id, "production", registry=reg, require="score")


def test_the_gate_runs_inside_the_transaction_that_moves_the_alias(local_target) -> None:
    train(local_target, 4)
    records = by_epoch(local_target)
    registry = open_registry(local_target.registry)
    registry.labels.set_alias(records[2].id, "production")

    def check(record: Any, holder: Any) -> None:  # a gate that sees the write lock held by its own move
        other = sqlite3.connect(registry.path, timeout=0)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
        other.close()
        assert holder.id == records[2].id

    assert move_alias(registry, records[4].id, "production", check=check).id == records[4].id


def test_models_alias_if_better_refuses_with_both_records_and_scores(local_target, capsys) -> None:
    train(local_target, 4)
    records = by_epoch(local_target)
    held = set_alias(records[4].id, "production", registry=local_target.registry)
    code, _, err = cli(capsys, local_target, "models", "alias", records[2].id, "production", "--if-better", "score")
    assert code == 3 and f"record {records[2].id}" in err and f"score 0.9 of record {held.id}" in err, err
    code, out, _ = cli(
        capsys, local_target, "models", "alias", records[2].id, "production", "--if-better", "score", "--lower-wins"
    )
    assert code == 0 and f"record {records[2].id} (" in out and "pinned as record" in out, out
    assert "p@production now on record" in out


def _pins(registry: Any) -> list[str]:
    return [r.id for r in registry.records.query(Query(project="p", states=(RecordState.PINNED,)))]


def test_a_gated_alias_on_a_slot_record_checks_it_then_pins_it_or_refuses_pinning_nothing(local_target) -> None:
    train(local_target, 4)  # live: epoch 2 (score 0.7) and epoch 4 (0.9)
    records = by_epoch(local_target)
    reg = local_target.registry
    registry = open_registry(reg)
    held = set_alias(records[4].id, "production", registry=reg)
    seen = len(registry.history.events())
    with pytest.raises(
        PromotionRefusedError,
        match=rf"record {records[2].id} \(.*\) has score 0\.7, which does not beat score 0\.9 of record {held.id}",
    ):
        set_alias(records[2].id, "production", registry=reg, require="score")
    assert _pins(registry) == [held.id] and len(registry.history.events()) == seen
    assert [r.id for r in find_models(alias="production", registry=reg)] == [held.id]

    moved = set_alias(records[2].id, "production", registry=reg, require=better("score", lower=True))
    assert moved.state is RecordState.PINNED and moved.metadata["pinned_from"] == records[2].id
    assert moved.metadata["kept_by"] == "alias production" and moved.aliases == ("production",)
    assert sorted(_pins(registry), key=int) == [held.id, moved.id]
    events = registry.history.events()[seen:]
    assert [(e.type, e.record_id) for e in events] == [("record.pinned", moved.id), ("alias.moved", moved.id)]
    assert (events[1].before["record_id"], events[1].after["score"]) == (held.id, 0.7)


def test_a_copy_made_for_a_gated_alias_that_another_move_beat_meanwhile_is_deleted(local_target) -> None:
    train(local_target, 2)
    records = by_epoch(local_target)
    registry = open_registry(local_target.registry)

    def gate(record: Any, holder: Any) -> str | None:  # passes the slot record, refuses its pin: as if moved between
        return "lost the race" if record.state is RecordState.PINNED else None

    with pytest.raises(
        PromotionRefusedError, match=r"alias p@production stays where it is: record \d+ .* lost the race"
    ):
        set_alias(records[2].id, "production", registry=local_target.registry, require=gate)
    assert _pins(registry) == [] and find_models(alias="production", registry=registry) == []
    assert [o.key for o in local_target.storage().list("p/") if "pinned/" in o.key] == []
    assert not check(registry).problems


# -- pruning --------------------------------------------------------------------------------------


def test_a_prune_keeps_live_renamed_aliased_and_each_slots_newest_evicted_record_and_fsck_stays_clean(
    local_target,
) -> None:
    train(local_target, 2, scored=False)
    records = by_epoch(local_target)
    # The registry's own set_alias (no pin first, as another client may do) leaves it on the slot record;
    # the save that evicts that record pins its bytes and moves the alias to the pin (issue 52).
    open_registry(local_target.registry).labels.set_alias(records[1].id, "first")
    rename_model(records[2].id, "kept by name", registry=local_target.registry)
    train(local_target, 8, scored=False)  # eight more saves in the same stream
    registry = open_registry(local_target.registry)
    before = {r.id: r for r in find_models(project="p", registry=registry)}
    history = [r for r in before.values() if r.state is RecordState.EVICTED]

    dry = registry.history.prune(Query(project="p"), Retention(keep_last=0), dry_run=True)
    pruned = registry.history.prune(Query(project="p"), Retention(keep_last=0))
    after = {r.id: r for r in find_models(project="p", registry=registry)}

    assert [p.record_id for p in pruned] == [p.record_id for p in dry] and pruned
    assert set(after) == set(before) - {p.record_id for p in pruned}
    first = registry.records.query(Query(project="p", alias="first"))[0]
    assert first.state is RecordState.PINNED and str(first.metadata["pinned_from"]) == records[1].id
    assert {first.id, records[2].id} <= set(after)
    assert {before[p.record_id].state for p in pruned} == {RecordState.EVICTED}
    newest_per_slot = {max((r for r in history if r.slot == s), key=lambda r: r.created_at).id for s in (0, 1)}
    assert newest_per_slot <= set(after)
    assert not check(registry).problems
    assert not [e for e in registry.history.events() if e.type == "record.live" and e.record_id not in after]


def test_keep_last_and_older_than_both_bound_a_prune(local_target) -> None:
    train(local_target, 8, scored=False)
    registry = open_registry(local_target.registry)
    evicted = registry.records.query(Query(project="p", states=(RecordState.EVICTED,)))
    assert len(evicted) == 6
    assert registry.history.prune(Query(), Retention(keep_last=0, older_than=3600), dry_run=True) == []
    kept_three = registry.history.prune(Query(), Retention(keep_last=3))
    assert len(kept_three) == 3 and {p.state for p in kept_three} == {RecordState.EVICTED}
    assert registry.history.prune(Query(project="other"), Retention(keep_last=0)) == []


def test_the_prune_command_dry_runs_then_deletes(local_target, capsys) -> None:
    train(local_target, 6, scored=False)
    code, out, _ = cli(capsys, local_target, "prune", "--keep-last", "0", "--older-than", "0s", "--dry-run")
    assert code == 0 and out.strip() == "would delete 2 records of 1 stream", out
    code, out, _ = cli(capsys, local_target, "prune", "--keep-last", "0", "--json")
    assert code == 0 and len(json.loads(out)["deleted"]) == 2
    code, out, _ = cli(capsys, local_target, "prune", "--keep-last", "0")
    assert code == 0 and out.strip() == "deleted 0 records of 0 streams", out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["prune"], "prune needs --keep-last N or --older-than AGE"),
        (["prune", "--older-than", "30 days"], "age '30 days' is not understood: .* e.g. 30d"),
        (["prune", "--keep-last", "-1"], "keep_last must be a whole number, 0 or more, got -1"),
    ],
)
def test_the_prune_command_refuses_a_rule_it_cannot_read(local_target, capsys, argv, message) -> None:
    train(local_target, 1)
    code, _, err = cli(capsys, local_target, *argv)
    assert code == 2 and re.search(message, " ".join(err.split())), err


def test_a_retention_rule_refuses_an_age_it_cannot_read() -> None:
    with pytest.raises(ConfigError, match="older_than must be seconds, 0 or more, got -5"):
        Retention(older_than=-5)


def test_a_saver_refuses_a_history_rule_it_cannot_use(local_target) -> None:
    with pytest.raises(ConfigError, match=r"history=1000: pass a Retention, e\.g\. history=Retention\(keep_last=1000"):
        local_target.saver(history=1000)
