"""Ignite's loading idioms work with TrackerSaver as with DiskSaver (issue 26, points 2 and 4).

``Checkpoint.last_checkpoint`` is ``save_handler.dirname / filename`` for a ``DiskSaver``, which
``Checkpoint.load_objects`` and ``reload_objects`` then ``torch.load``. TrackerSaver is a
``DiskSaver`` whose ``dirname`` holds each live checkpoint under its filename (a hard link to the
slot file, or a verified S3 download), outside output_uri.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint, DiskSaver

from tracker_saver import TrackerSaver
from tracker_saver.core.errors import ConfigError, IntegrityError


def _model(seed: int) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(3, 2)


def _train(saver: TrackerSaver, model: torch.nn.Module, epochs: int, n_saved: int | None = 2) -> Checkpoint:
    """Epochs that each change the weights, a Checkpoint of ``model`` after each."""
    ckpt = Checkpoint({"model": model}, saver, n_saved=n_saved)
    trainer = Engine(lambda e, b: model.weight.data.add_(1.0))
    trainer.add_event_handler(Events.EPOCH_COMPLETED, ckpt)
    trainer.run([0], max_epochs=epochs)
    return ckpt


def _objects(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*") if p.is_file() and ".tracker_saver" not in p.parts)


@pytest.fixture
def saver(tmp_path: Path):
    saver = TrackerSaver(tmp_path / "out", run="r", registry=tmp_path / "reg.db", dirname=tmp_path / "named")
    yield saver
    saver.close()


def test_tracker_saver_is_a_disk_saver_with_its_dirname(saver: TrackerSaver, tmp_path: Path) -> None:
    assert isinstance(saver, DiskSaver)
    assert saver.dirname == tmp_path / "named"


def test_load_objects_of_last_checkpoint_loads_the_last_save(saver: TrackerSaver, tmp_path: Path) -> None:
    model = _model(0)
    ckpt = _train(saver, model, epochs=3)
    assert ckpt.last_checkpoint == tmp_path / "named" / "model_3.pt"
    loaded = _model(1)
    Checkpoint.load_objects({"model": loaded}, checkpoint=ckpt.last_checkpoint)
    assert torch.equal(loaded.weight, model.weight)


def test_reload_objects_loads_the_named_step(saver: TrackerSaver) -> None:
    model = _model(0)
    ckpt = _train(saver, model, epochs=3)
    loaded = _model(1)
    ckpt.reload_objects({"model": loaded}, global_step=3)
    assert torch.equal(loaded.weight, model.weight)
    with pytest.raises(FileNotFoundError):  # evicted with n_saved=2: gone from dirname as from DiskSaver's
        ckpt.reload_objects({"model": loaded}, global_step=1)


def test_dirname_holds_exactly_the_live_checkpoints_and_output_uri_only_slots(
    saver: TrackerSaver, tmp_path: Path
) -> None:
    _train(saver, _model(0), epochs=5, n_saved=2)
    assert sorted(os.listdir(tmp_path / "named")) == ["model_4.pt", "model_5.pt"]
    assert _objects(tmp_path / "out") == ["model.slot0.pt", "model.slot1.pt"]
    assert sorted(r.filename for r in saver.records(live=True)) == ["model_4.pt", "model_5.pt"]


def test_a_named_file_keeps_its_bytes_when_its_slot_is_reused(saver: TrackerSaver, tmp_path: Path) -> None:
    model = _model(0)
    ckpt = _train(saver, model, epochs=2, n_saved=2)
    before = (tmp_path / "named" / "model_2.pt").read_bytes()
    Checkpoint.load_objects({"model": _model(1)}, checkpoint=ckpt.last_checkpoint)
    trainer = Engine(lambda e, b: None)
    trainer.state.iteration = 3
    ckpt(trainer)  # replaces model_1's slot; model_2 stays
    assert (tmp_path / "named" / "model_2.pt").read_bytes() == before
    assert sorted(os.listdir(tmp_path / "named")) == ["model_2.pt", "model_3.pt"]


def test_get_local_copy_checks_the_sha256_before_it_returns(saver: TrackerSaver, tmp_path: Path) -> None:
    _train(saver, _model(0), epochs=2)
    path = saver.get_local_copy("model_2.pt")
    assert path == str(tmp_path / "named" / "model_2.pt")
    assert saver.get_local_copy("model_1.pt") == str(tmp_path / "named" / "model_1.pt")
    assert saver.get_local_copy("model_9.pt") is None  # as ignite's ClearMLSaver: no such checkpoint
    (slot,) = [r for r in saver.records(live=True) if r.filename == "model_2.pt"]
    with open(tmp_path / "out" / slot.key, "r+b") as f:  # corrupt the slot in place (the link shares it)
        f.seek(100)
        f.write(b"\0corrupt\0")
    with pytest.raises(IntegrityError, match="model_2.pt"):
        saver.get_local_copy("model_2.pt")
    assert not (tmp_path / "named" / "model_2.pt").exists()  # nothing wrong is left to load


def test_get_local_copy_places_a_file_that_went_missing(saver: TrackerSaver, tmp_path: Path) -> None:
    model = _model(0)
    _train(saver, model, epochs=1)
    (tmp_path / "named" / "model_1.pt").unlink()
    path = saver.get_local_copy("model_1.pt")
    assert path is not None
    assert torch.equal(torch.load(path, weights_only=True)["weight"], model.weight)


@pytest.mark.parametrize("prefix", ["../../outside", "x" * 300])
def test_a_filename_that_cannot_appear_in_dirname_is_saved_and_reachable_by_get_local_copy(
    saver: TrackerSaver, tmp_path: Path, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    model = _model(0)
    ckpt = Checkpoint({"model": model}, saver, filename_prefix=prefix)
    ckpt(Engine(lambda e, b: None))
    (record,) = saver.records(live=True)
    assert "Checkpoint.last_checkpoint will not find it" in caplog.text
    path = saver.get_local_copy(record.filename)
    assert path is not None and Path(path).parent == tmp_path / "named"
    assert torch.equal(torch.load(path, weights_only=True)["weight"], model.weight)
    assert os.listdir(tmp_path / "named") == [Path(path).name]
    assert not list(tmp_path.parent.glob("outside*"))  # nothing escaped


def test_the_default_dirname_is_a_cache_folder_outside_output_uri(tmp_path: Path) -> None:
    saver = TrackerSaver(tmp_path / "out", project="p", run="r", registry=tmp_path / "reg.db")
    try:
        ckpt = _train(saver, _model(0), epochs=1)
        assert saver.dirname.is_relative_to(Path.home() / ".cache" / "tracker_saver" / "checkpoints")
        assert Path(str(ckpt.last_checkpoint)).is_file()
    finally:
        saver.close()


@pytest.fixture
def other_file_system() -> Iterator[Path]:
    """A folder on another file system than ``tmp_path`` (``/dev/shm``, a tmpfs), removed afterwards."""
    if not Path("/dev/shm").is_dir() or os.stat("/dev/shm").st_dev == os.stat(tempfile.gettempdir()).st_dev:
        pytest.fail("this test needs /dev/shm on another file system than the temp folder (Debian has it)")
    folder = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="tracker-saver-test-"))
    yield folder
    shutil.rmtree(folder)


def test_across_file_systems_only_a_given_dirname_costs_each_save_a_copy(
    other_file_system: Path, tmp_path: Path
) -> None:
    default = TrackerSaver(other_file_system / "a", run="r", registry=tmp_path / "reg.db")
    given = TrackerSaver(other_file_system / "b", run="r", registry=tmp_path / "reg.db", dirname=tmp_path / "named")
    try:
        for saver in (default, given):
            _train(saver, _model(0), epochs=2, n_saved=1)
        assert sorted(os.listdir(tmp_path / "named")) == ["model_2.pt"]  # a verified copy at each save
        assert not (default.dirname / "model_2.pt").exists()  # no hard link possible: no copy made
        path = default.get_local_copy("model_2.pt")  # made on demand, checked
        assert path == str(default.dirname / "model_2.pt") and Path(path).stat().st_size > 0
    finally:
        default.close()
        given.close()


def test_a_dirname_inside_output_uri_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"dirname .* is inside output_uri"):
        TrackerSaver(tmp_path / "out", registry=tmp_path / "reg.db", dirname=tmp_path / "out" / "named")
    assert not (tmp_path / "reg.db").exists()


def test_async_saves_reach_dirname_by_the_flush(tmp_path: Path) -> None:
    saver = TrackerSaver(tmp_path / "out", registry=tmp_path / "reg.db", dirname=tmp_path / "named", async_upload=True)
    try:
        model = _model(0)
        ckpt = _train(saver, model, epochs=3)
        saver.flush()
        loaded = _model(1)
        Checkpoint.load_objects({"model": loaded}, checkpoint=ckpt.last_checkpoint)
        assert torch.equal(loaded.weight, model.weight)
    finally:
        saver.close()


def test_a_fresh_checkpoint_that_reuses_an_inherited_slot_drops_its_named_file(tmp_path: Path) -> None:
    def saver() -> TrackerSaver:
        return TrackerSaver(tmp_path / "out", run="r", registry=tmp_path / "reg.db", dirname=tmp_path / "named")

    first = saver()
    _train(first, _model(0), epochs=2, n_saved=1)
    first.close()
    second = saver()
    try:
        ckpt = Checkpoint({"model": _model(2)}, second, n_saved=1, filename_prefix="")
        trainer = Engine(lambda e, b: None)
        trainer.state.iteration = 7
        ckpt(trainer)
        assert sorted(os.listdir(tmp_path / "named")) == ["model_7.pt"]
        assert _objects(tmp_path / "out") == ["model.slot0.pt"]
    finally:
        second.close()


# torch.save keywords (point 4)


def test_save_kwargs_reach_torch_save(tmp_path: Path) -> None:
    legacy = TrackerSaver(
        tmp_path / "a", registry=tmp_path / "reg.db", save_kwargs={"_use_new_zipfile_serialization": False}
    )
    plain = TrackerSaver(tmp_path / "b", registry=tmp_path / "reg.db")
    try:
        for saver in (legacy, plain):
            _train(saver, _model(0), epochs=1)
        assert not zipfile.is_zipfile(tmp_path / "a" / "default" / "default" / "model.slot0.pt")
        assert zipfile.is_zipfile(tmp_path / "b" / "default" / "default" / "model.slot0.pt")
    finally:
        legacy.close()
        plain.close()


def test_an_unknown_torch_save_keyword_is_refused_at_construction(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"save_kwargs \['pickle_protocl'\] are not keywords of torch.save"):
        TrackerSaver(tmp_path / "out", registry=tmp_path / "reg.db", save_kwargs={"pickle_protocl": 4})
    assert not (tmp_path / "out").exists() and not (tmp_path / "reg.db").exists()


# S3 (Ceph RGW): a verified local copy


@pytest.mark.ceph
def test_s3_with_dirname_keeps_a_verified_copy_of_each_live_checkpoint(s3_output_uri: str, tmp_path: Path) -> None:
    saver = TrackerSaver(s3_output_uri, run="r", registry=tmp_path / "reg.db", dirname=tmp_path / "named")
    try:
        model = _model(0)
        ckpt = _train(saver, model, epochs=3, n_saved=2)
        assert sorted(os.listdir(tmp_path / "named")) == ["model_2.pt", "model_3.pt"]
        loaded = _model(1)
        Checkpoint.load_objects({"model": loaded}, checkpoint=ckpt.last_checkpoint)
        assert torch.equal(loaded.weight, model.weight)
        ckpt.reload_objects({"model": loaded}, global_step=2)
    finally:
        saver.close()


@pytest.mark.ceph
def test_s3_without_dirname_downloads_only_on_get_local_copy(s3_output_uri: str, tmp_path: Path) -> None:
    saver = TrackerSaver(s3_output_uri, run="r", registry=tmp_path / "reg.db")
    try:
        model = _model(0)
        ckpt = _train(saver, model, epochs=2, n_saved=1)
        assert not Path(str(ckpt.last_checkpoint)).exists()
        path = saver.get_local_copy("model_2.pt")
        assert path == str(ckpt.last_checkpoint)
        loaded = _model(1)
        Checkpoint.load_objects({"model": loaded}, checkpoint=ckpt.last_checkpoint)
        assert torch.equal(loaded.weight, model.weight)
    finally:
        saver.close()


# The drop-in ClearMLSaver (real clearml SDK against the stand-in)


@pytest.mark.clearml
def test_the_drop_in_supports_ignites_loading_idioms_and_torch_save_keywords(clearml_task, tmp_path: Path) -> None:
    from tracker_saver.clearml import ClearMLSaver

    saver = ClearMLSaver(dirname=str(tmp_path / "named"), _use_new_zipfile_serialization=False)
    try:
        assert saver.dirname == tmp_path / "named"
        model = _model(0)
        ckpt = _train(saver, model, epochs=3, n_saved=1)
        assert sorted(os.listdir(tmp_path / "named")) == ["model_3.pt"]
        assert not zipfile.is_zipfile(ckpt.last_checkpoint)  # the keyword reached torch.save
        loaded = _model(1)
        Checkpoint.load_objects({"model": loaded}, checkpoint=ckpt.last_checkpoint)
        assert torch.equal(loaded.weight, model.weight)
        ckpt.reload_objects({"model": loaded}, global_step=3)
        assert saver.get_local_copy("model_3.pt") == str(ckpt.last_checkpoint)
    finally:
        saver.close()


@pytest.mark.clearml
def test_the_drop_in_refuses_a_keyword_torch_save_does_not_take(clearml_task, tmp_path: Path) -> None:
    from tracker_saver.clearml import ClearMLSaver

    with pytest.raises(ConfigError, match=r"save_kwargs \['registy'\] are not keywords of torch.save"):
        ClearMLSaver(registy=str(tmp_path / "reg.db"))


@pytest.mark.ceph
@pytest.mark.clearml
def test_the_drop_in_on_s3_keeps_a_verified_copy_in_dirname(
    clearml_project: str, s3_output_uri: str, tmp_path: Path
) -> None:
    from tests.conftest_clearml import init_task
    from tracker_saver.clearml import ClearMLSaver

    task = init_task(clearml_project, "s3-idioms")
    saver = ClearMLSaver(output_uri=s3_output_uri, registry=str(tmp_path / "reg.db"))
    try:
        model = _model(0)
        ckpt = _train(saver, model, epochs=2, n_saved=1)
        loaded = _model(1)
        Checkpoint.load_objects({"model": loaded}, checkpoint=ckpt.last_checkpoint)
        assert torch.equal(loaded.weight, model.weight)
        assert sorted(os.listdir(saver.dirname)) == ["model_2.pt"]
    finally:
        saver.close()
        task.close()


def test_a_call_without_ignites_metadata_is_saved_as_disk_saver_saves_it(saver: TrackerSaver, tmp_path: Path) -> None:
    """``saver(checkpoint, filename)``, as people call DiskSaver (and ignite's own tests do)."""
    model = _model(0)
    with pytest.warns(UserWarning, match=r"no Ignite metadata for 'model_1.pt'.*saved in stream 'model'"):
        saver(model.state_dict(), "model_1.pt")
    (record,) = saver.records(live=True)
    assert (record.stream, record.metadata["global_step"]) == ("model", 1)
    loaded = _model(1)
    Checkpoint.load_objects({"model": loaded}, checkpoint=saver.dirname / "model_1.pt")
    assert torch.equal(loaded.weight, model.weight)


def test_save_kwargs_are_checked_against_torch_save_also_when_a_binding_wraps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ClearML's ``Task.init`` replaces ``torch.save`` with a ``(*args, **kwargs)`` wrapper (as here)."""
    original = torch.save
    monkeypatch.setattr(torch, "save", lambda *args, **kwargs: original(*args, **kwargs))
    saver = TrackerSaver(tmp_path / "out", registry=tmp_path / "reg.db", save_kwargs={"pickle_protocol": 4})
    try:
        _train(saver, _model(0), epochs=1)
        assert [r.filename for r in saver.records(live=True)] == ["model_1.pt"]
    finally:
        saver.close()
    with pytest.raises(ConfigError, match="are not keywords of torch.save"):
        TrackerSaver(tmp_path / "out", registry=tmp_path / "reg.db", save_kwargs={"nope": 1})
