"""Bad input gets a clear error naming the object and the fix, before any work, leaving nothing."""

from __future__ import annotations

import os

import pytest
from ignite.handlers import Checkpoint

from tests.helpers import model
from tracker_saver import ConfigError, RecordNotFoundError, TrackerSaver, load_checkpoint, rename_model


def _tree(path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs)


def test_an_unwritable_output_uri_is_refused_at_construction(tmp_path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"output_uri '.*file/ckpt' is not a writable folder.*pass a folder"):
        TrackerSaver(tmp_path / "file" / "ckpt", registry=tmp_path / "r.db")
    assert _tree(tmp_path) == ["file"]


def test_an_unknown_scheme_is_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match="unknown scheme 'hdfs'"):
        TrackerSaver("hdfs://nn/ckpt", registry=tmp_path / "r.db")
    assert _tree(tmp_path) == []


def test_a_registry_path_that_is_a_folder_is_refused(tmp_path) -> None:
    (tmp_path / "regdir").mkdir()
    with pytest.raises(ConfigError, match="is a folder: pass a file path"):
        TrackerSaver(tmp_path / "out", registry=tmp_path / "regdir")


def test_the_registry_may_not_live_inside_output_uri(tmp_path) -> None:
    with pytest.raises(ConfigError, match="inside output_uri.*checkpoint objects only"):
        TrackerSaver(tmp_path / "out", registry=tmp_path / "out" / "registry.db")
    assert _tree(tmp_path) == []


def test_an_empty_project_is_refused_before_anything_is_created(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"project ' ' is not a usable name"):
        TrackerSaver(tmp_path / "out", project=" ", registry=tmp_path / "r.db")
    assert _tree(tmp_path) == []


def test_n_saved_below_one_is_refused_by_ignite_before_the_saver_is_used(tmp_path) -> None:
    saver = TrackerSaver(tmp_path / "out", registry=tmp_path / "r.db")
    with pytest.raises(ValueError, match="n_saved must be a positive integer or None, got 0"):
        Checkpoint({"model": model()}, saver, n_saved=0)
    assert _tree(tmp_path / "out") == []


def test_a_call_without_ignite_metadata_says_how_to_call_it(tmp_path) -> None:
    saver = TrackerSaver(tmp_path / "out", registry=tmp_path / "r.db")
    with pytest.raises(ConfigError, match="saver\\(checkpoint, filename, metadata\\)"):
        saver({"w": 1}, "model_1.pt")
    assert _tree(tmp_path / "out") == []


def test_a_record_id_that_does_not_exist_is_named(tmp_path) -> None:
    with pytest.raises(RecordNotFoundError, match="record 99 does not exist.*models list"):
        load_checkpoint(99, {"model": model()}, registry=tmp_path / "r.db")
    with pytest.raises(RecordNotFoundError, match="'abc' is not a SQLite record id"):
        rename_model("abc", "x", registry=tmp_path / "r.db")


def test_an_empty_new_name_is_refused(local_target) -> None:
    from tests.contracts.registry import live
    from tracker_saver.registry.sqlite import SQLiteRegistry

    record = live(SQLiteRegistry(local_target.registry), "a_1.pt")
    with pytest.raises(ConfigError, match="empty"):
        rename_model(record.id, "  ", registry=local_target.registry)


def test_check_raises_again_when_output_uri_stopped_being_writable(tmp_path) -> None:
    saver = TrackerSaver(tmp_path / "out", registry=tmp_path / "r.db")
    saver.check()
    (tmp_path / "out").rmdir()
    (tmp_path / "out").write_text("now a file")
    with pytest.raises(ConfigError, match="not a writable folder"):
        saver.check()
