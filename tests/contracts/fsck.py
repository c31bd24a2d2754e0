"""``fsck`` and ``repair`` against every backend: kills, lies, orphans and staged writes, found and settled.

A backend opts in with ``class TestX(FsckContract)``, a ``target`` fixture (a
``tests.helpers.Target`` with nothing in it yet) and ``stage_leftover``, which leaves an
unfinished write to a key the way a killed writer of that backend would.
"""

from __future__ import annotations

import io

from tests.helpers import Target, Worker, model, train
from tracker_saver import find_models, load_checkpoint
from tracker_saver.fsck import Report, check, repair
from tracker_saver.registry import open_registry
from tracker_saver.storage.base import Storage


def _kinds(report: Report) -> list[str]:
    return sorted(f.kind for f in report.problems)


def _states(target: Target, stream: str) -> dict[str, str]:
    return {r.filename: r.state.value for r in find_models(project="p", stream=stream, registry=target.registry)}


class FsckContract:
    def stage_leftover(self, storage: Storage, key: str) -> None:
        """Leave an unfinished write to ``key``, as a writer killed in the middle would."""
        raise NotImplementedError

    def _repair(self, target: Target, **kwargs: object) -> tuple[Report, list[str]]:
        printed: list[str] = []
        report = repair(open_registry(target.registry), echo=printed.append, **kwargs)  # type: ignore[arg-type]
        return report, printed

    def test_a_clean_run_has_no_problems(self, target: Target) -> None:
        saver = target.saver()
        train(saver, {"model": model()}, n_saved=2, epochs=3)
        saver.close()
        report = check(open_registry(target.registry), deep=True)
        assert report.problems == [] and len(report.streams) == 1, report.findings

    def test_a_kill_before_the_storage_commit_is_found_then_revived_by_repair(self, target: Target) -> None:
        with Worker(target) as worker:
            worker.epoch(0.5)
            assert worker.epoch(0.6, fault="kill-stage", stream="checkpoint") is None
        # The killed save's record is pending and the one it replaced evicted: nothing is loadable.
        assert _states(target, "checkpoint") == {"checkpoint_1.pt": "evicted", "checkpoint_2.pt": "pending"}
        before = check(open_registry(target.registry))
        assert {"pending", "revivable"} <= set(_kinds(before)), before.findings
        fixes = {f.record_id: f.fix for f in before.problems if f.kind in ("pending", "revivable")}
        assert sorted(fixes.values()) == ["mark it failed", "revive it"]
        after, printed = self._repair(target)
        assert after.problems == [], after.findings
        assert any(line.startswith("restored record") for line in printed), printed
        assert _states(target, "checkpoint") == {"checkpoint_1.pt": "revived", "checkpoint_2.pt": "failed"}
        (revived,) = find_models(project="p", stream="checkpoint", live=True, registry=target.registry)
        load_checkpoint(revived, {"model": model()}, registry=target.registry)
        assert target.storage().staged() == []

    def test_a_kill_after_the_storage_commit_is_promoted_by_repair(self, target: Target) -> None:
        with Worker(target) as worker:
            worker.epoch(0.5)
            assert worker.epoch(0.6, fault="kill-post", stream="checkpoint") is None
        before = check(open_registry(target.registry))
        (pending,) = [f for f in before.problems if f.kind == "pending"]
        assert pending.fix == "promote it" and "checkpoint_2.pt" in pending.detail
        dry, printed = self._repair(target, dry_run=True)
        assert printed and all(line.startswith("would ") for line in printed)
        assert _states(target, "checkpoint")["checkpoint_2.pt"] == "pending"  # a dry run changes nothing
        after, printed = self._repair(target)
        assert after.problems == [] and any(line.startswith("promoted record") for line in printed), printed
        assert _states(target, "checkpoint") == {"checkpoint_1.pt": "evicted", "checkpoint_2.pt": "live"}

    def test_a_lie_is_found_by_size_or_fingerprint_then_demoted_and_its_bytes_kept_until_asked(
        self, target: Target
    ) -> None:
        saver = target.saver()
        train(saver, {"model": model()}, n_saved=2, epochs=2)
        saver.close()
        storage = target.storage()
        first, second = find_models(project="p", live=True, registry=target.registry)
        with storage.get(first.key) as f:
            flipped = bytearray(f.read())
        flipped[-1] ^= 1
        storage.put_stream(first.key, io.BytesIO(bytes(flipped)))  # same size, other bytes
        storage.put_stream(second.key, io.BytesIO(b"truncated"))
        # Same size, other bytes: the store's fingerprint (ETag; size, mtime_ns and inode) tells, no --deep needed.
        shallow = check(open_registry(target.registry))
        assert sorted((f.kind, f.record_id) for f in shallow.problems) == sorted(
            [("lie", first.id), ("lie", second.id)]
        )
        assert "fingerprint" in next(f.detail for f in shallow.problems if f.record_id == first.id)
        deep = check(open_registry(target.registry), deep=True)
        assert sorted((f.kind, f.record_id) for f in deep.problems if f.kind == "lie") == sorted(
            [("lie", first.id), ("lie", second.id)]
        )
        after, printed = self._repair(target, deep=True)
        assert find_models(project="p", live=True, registry=target.registry) == []
        assert _kinds(after) == ["orphan", "orphan", "over-slots"], after.findings  # the bytes stay
        assert sum(line.startswith("demote record") for line in printed) == 2, printed
        kept, printed = self._repair(target)
        assert _kinds(kept) == _kinds(after) and sum(line.startswith("keep orphan") for line in printed) == 2
        final, printed = self._repair(target, delete_orphans=True)
        assert final.problems == [] and sum(line.startswith("delete orphan") for line in printed) == 2
        assert storage.list() == []

    def test_an_object_of_no_known_stream_is_an_orphan_and_other_files_are_not(self, target: Target) -> None:
        saver = target.saver()
        train(saver, {"model": model()}, epochs=1)
        saver.close()
        storage = target.storage()
        storage.put_stream("p/r/ghost.slot0.pt", io.BytesIO(b"old bytes"))
        storage.put_stream("p/r/logs/train.log", io.BytesIO(b"a log, not a checkpoint"))
        report = check(open_registry(target.registry))
        assert [(f.kind, f.key) for f in report.problems] == [("orphan", "p/r/ghost.slot0.pt")]
        assert check(open_registry(target.registry), stream="checkpoint").problems == []  # out of scope
        after, _ = self._repair(target, delete_orphans=True)
        assert after.problems == []
        assert [o.key for o in storage.list("p/r/")] == ["p/r/logs/train.log", "p/r/model.slot0.pt"]

    def test_staged_writes_are_removed_only_once_stale(self, target: Target) -> None:
        saver = target.saver()
        train(saver, {"model": model()}, epochs=1)
        saver.close()
        storage = target.storage()
        (record,) = find_models(project="p", registry=target.registry)
        assert record.key is not None
        self.stage_leftover(storage, record.key)
        (staged,) = check(open_registry(target.registry)).problems
        assert staged.kind == "staged" and staged.key == record.key
        young, printed = self._repair(target)
        assert _kinds(young) == ["staged"] and printed == []  # may be another host's upload in progress
        after, printed = self._repair(target, stale_after_s=0)
        assert after.problems == [] and len(printed) == 1 and printed[0].startswith("remove unfinished write")
        assert storage.staged() == [] and storage.stat(record.key) is not None

    def test_a_stream_being_written_is_reported_busy_and_left_alone(self, target: Target) -> None:
        saver = target.saver()
        net = model()
        train(saver, {"model": net}, epochs=1)  # the saver still holds the stream's claim
        storage = target.storage()
        (record,) = find_models(project="p", registry=target.registry)
        assert record.key is not None
        self.stage_leftover(storage, record.key)  # as if a save were in flight
        report = check(open_registry(target.registry))
        assert [f.kind for f in report.findings] == ["busy"] and report.problems == []
        after, printed = self._repair(target)
        assert printed == [] and storage.staged() != []
        saver.close()
        assert _kinds(check(open_registry(target.registry))) == ["staged"]

    def test_scope_narrows_to_project_run_and_stream(self, target: Target) -> None:
        for run in ("a", "b"):
            saver = target.saver(run=run)
            train(saver, {"model": model()}, epochs=1)
            train(saver, {"model": model()}, prefix="best", epochs=1)
            saver.close()
        registry = open_registry(target.registry)
        assert len(check(registry).streams) == 4
        assert len(check(registry, run="a").streams) == 2
        (only,) = check(registry, run="b", stream="best_model").streams
        assert only.startswith("p/b/best_model at "), only
        assert check(registry, project="other").streams == []
