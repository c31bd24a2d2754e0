"""``LogUploader``: a run's log files reach ``<output_uri>/<project>/<run>/logs/``, never as checkpoints.

Real things only: an Ignite ``Engine``, a ``logging.FileHandler`` writing a real file, a local
folder or the Ceph gateway as output_uri, SQLite, and the ClearML stand-in for artifacts.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

from tests.helpers import ROOT, Target, model
from tracker_saver import ConfigError, RegistryError, StorageError, TrackerSaver
from tracker_saver.fsck import check
from tracker_saver.logs.upload import DEFAULT_FILES, LogUploader, download_logs, list_logs, log_key, logs_prefix
from tracker_saver.registry import open_registry
from tracker_saver.storage import Storage, open_storage

# -- helpers ------------------------------------------------------------------------------------


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The training script's folder: ``logs/`` and ``runs/`` live here."""
    folder = tmp_path / "work"
    (folder / "logs").mkdir(parents=True)
    return folder


@pytest.fixture
def train_log(work: Path) -> Iterator[logging.Logger]:
    """A logger that writes ``logs/train.log`` through a real ``FileHandler`` on the root logger."""
    handler = logging.FileHandler(work / "logs" / "train.log")
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield logging.getLogger("train")
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        handler.close()


def count_puts(storage: Storage) -> collections.Counter[str]:
    """Count the storage's uploads by key (the real ``put_file`` still does the work)."""
    puts: collections.Counter[str] = collections.Counter()
    real = storage.put_file

    def put_file(key: str, path: str | os.PathLike[str]) -> None:
        real(key, path)
        puts[key] += 1

    storage.put_file = put_file  # type: ignore[method-assign]
    return puts


def fetch(storage: Storage, key: str) -> bytes:
    with storage.get(key) as f:
        return f.read()


def logging_trainer(log: logging.Logger, fail_at: int | None = None) -> Engine:
    def step(engine: Engine, batch: int) -> None:
        if engine.state.iteration == fail_at:
            raise RuntimeError(f"loss exploded at iteration {fail_at}")
        log.info("iteration %d loss %.3f", engine.state.iteration, 1.0 / (1 + batch))

    return Engine(step)


KEY = "p/r/logs/train.log"


# -- periodic, changed-only and final uploads ---------------------------------------------------


def test_logs_go_up_every_n_iterations_while_training(work, train_log, tmp_path) -> None:
    uploader = LogUploader(tmp_path / "out", project="p", run="r", root=work, every_iterations=3, every_seconds=None)
    puts = count_puts(uploader.storage)
    trainer = logging_trainer(train_log)
    uploader.attach(trainer)
    seen: list[bytes] = []

    @trainer.on(Events.ITERATION_COMPLETED(every=3))
    def look(engine: Engine) -> None:  # after the uploader's handler at the same iteration
        uploader.flush()
        seen.append(fetch(uploader.storage, KEY))

    trainer.run(range(9), max_epochs=1)
    assert [text.count(b"iteration") for text in seen] == [3, 6, 9]
    assert puts[KEY] == 4  # iterations 3, 6, 9, and COMPLETED (Ignite logged "Epoch[1] Complete")
    uploader.close()  # Ignite logged "Engine run finished" after COMPLETED: close uploads it
    assert puts[KEY] == 5
    assert fetch(uploader.storage, KEY) == (work / "logs" / "train.log").read_bytes()


def test_a_hanging_endpoint_never_blocks_training(work, train_log, tmp_path) -> None:
    uploader = LogUploader(tmp_path / "out", project="p", run="r", root=work, every_iterations=1)
    release = threading.Event()
    puts = count_puts(uploader.storage)
    real = uploader.storage.put_file

    def hanging(key: str, path: str | os.PathLike[str]) -> None:
        assert release.wait(60), "never released"
        real(key, path)

    uploader.storage.put_file = hanging  # type: ignore[method-assign]
    trainer = logging_trainer(train_log)
    uploader.attach(trainer)
    done_while_hanging: list[int] = []

    @trainer.on(Events.ITERATION_COMPLETED(once=50))
    def endpoint_back(engine: Engine) -> None:
        done_while_hanging.append(engine.state.iteration)
        release.set()

    trainer.run(range(50), max_epochs=1)
    uploader.close()
    assert done_while_hanging == [50]  # 50 iterations ran while the first upload hung
    assert puts[KEY] <= 3  # the first, maybe one queued after it, and the final ones: none piled up
    assert fetch(uploader.storage, KEY) == (work / "logs" / "train.log").read_bytes()


def test_only_files_that_changed_are_uploaded_again(work, tmp_path) -> None:
    (work / "logs" / "a.log").write_text("a1\n")
    (work / "logs" / "b.log").write_text("b1\n")
    uploader = LogUploader(tmp_path / "out", project="p", run="r", root=work, every_iterations=1)
    puts = count_puts(uploader.storage)
    uploader.upload()
    uploader.flush()
    assert dict(puts) == {"p/r/logs/a.log": 1, "p/r/logs/b.log": 1}
    with open(work / "logs" / "a.log", "a") as f:
        f.write("a2\n")
    uploader.upload()
    uploader.flush()
    uploader.upload()
    uploader.flush()
    assert dict(puts) == {"p/r/logs/a.log": 2, "p/r/logs/b.log": 1}
    assert fetch(uploader.storage, "p/r/logs/a.log") == b"a1\na2\n"
    uploader.upload(final=True)  # hashes confirm that nothing changed: no upload
    uploader.close()
    assert sum(puts.values()) == 3


def test_the_final_upload_at_completed_has_the_whole_log(work, train_log, tmp_path) -> None:
    uploader = LogUploader(tmp_path / "out", project="p", run="r", root=work, every_seconds=3600)
    trainer = logging_trainer(train_log)
    uploader.attach(trainer)

    @trainer.on(Events.COMPLETED)
    def last_words(engine: Engine) -> None:  # runs after the uploader's COMPLETED handler
        train_log.info("done")

    trainer.run(range(5), max_epochs=2)
    text = fetch(uploader.storage, KEY).decode()  # run() returned: the final upload is done
    assert text.count("iteration") == 10 and "done" not in text
    uploader.close()  # uploads what was logged after COMPLETED
    final = fetch(uploader.storage, KEY)
    assert b"INFO train done" in final and final == (work / "logs" / "train.log").read_bytes()
    assert uploader.uploaded() == {KEY: hashlib.sha256(final).hexdigest()}


def test_a_crashed_run_uploads_its_log_with_the_traceback(work, train_log, tmp_path) -> None:
    uploader = LogUploader(tmp_path / "out", project="p", run="r", root=work, every_seconds=3600)
    trainer = logging_trainer(train_log, fail_at=4)
    uploader.attach(trainer)
    with pytest.raises(RuntimeError, match="loss exploded at iteration 4"):
        trainer.run(range(10), max_epochs=1)
    uploader.close()
    text = fetch(uploader.storage, KEY).decode()
    assert "iteration 3 loss" in text and "iteration 4 loss" not in text
    assert "Traceback (most recent call last)" in text
    assert "RuntimeError: loss exploded at iteration 4" in text and "in step" in text


def test_a_crash_uploads_logs_before_the_saver_raises_it_again(work, train_log, tmp_path) -> None:
    saver = TrackerSaver(tmp_path / "out", project="p", run="r", registry=tmp_path / "reg.db", async_upload=True)
    trainer = logging_trainer(train_log, fail_at=3)
    trainer.add_event_handler(Events.ITERATION_COMPLETED, Checkpoint({"model": model()}, saver, n_saved=1))
    saver.attach(trainer)  # its handler raises the error again: the uploader's must run first
    uploader = LogUploader(saver=saver, root=work, every_seconds=3600)
    uploader.attach(trainer)
    with pytest.raises(RuntimeError, match="loss exploded"):
        trainer.run(range(10), max_epochs=1)
    uploader.close()
    saver.close()
    assert "loss exploded" in fetch(saver.storage, KEY).decode()


def test_a_failed_final_upload_does_not_hide_the_training_error(work, train_log, tmp_path, capfd) -> None:
    uploader = LogUploader(tmp_path / "out", project="p", run="r", root=work, every_seconds=3600)
    trainer = logging_trainer(train_log, fail_at=2)
    uploader.attach(trainer)

    def refuse(key: str, path: object) -> None:
        raise StorageError(f"cannot write {key!r}: No space left on device", key=key)

    uploader.storage.put_file = refuse  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="loss exploded") as raised:
        trainer.run(range(10), max_epochs=1)
    assert isinstance(raised.value.__context__, StorageError)
    assert any("final upload of the run's logs failed too" in note for note in raised.value.__notes__)
    assert "No space left on device" in capfd.readouterr().err
    assert sum("the final upload" in note for note in raised.value.__notes__) == 1
    text = (work / "logs" / "train.log").read_text()
    assert text.count("Traceback") == 1  # Ignite fires EXCEPTION_RAISED twice: logged once
    with pytest.raises(StorageError, match="No space left"):
        uploader.close()  # it tries once more, and says it failed


def test_an_upload_error_is_raised_by_the_next_upload_and_at_completed(work, train_log, tmp_path) -> None:
    uploader = LogUploader(tmp_path / "out", project="p", run="r", root=work, every_iterations=2)
    failing = threading.Event()
    real = uploader.storage.put_file

    def put_file(key: str, path: str | os.PathLike[str]) -> None:
        if failing.is_set():
            raise StorageError(f"cannot write {key!r}: Read-only file system", key=key)
        real(key, path)

    uploader.storage.put_file = put_file  # type: ignore[method-assign]
    failing.set()
    trainer = logging_trainer(train_log)
    uploader.attach(trainer)
    with pytest.raises(StorageError, match="Read-only file system"):
        trainer.run(range(10), max_epochs=1)
    failing.clear()
    uploader.upload(final=True)
    uploader.flush()  # once the store is back, everything goes up
    assert b"iteration" in fetch(uploader.storage, KEY)
    uploader.close()


# -- keep_local=False ----------------------------------------------------------------------------


def test_keep_local_false_deletes_a_file_only_after_its_final_upload(work, tmp_path) -> None:
    log_file = work / "logs" / "train.log"
    log_file.write_text("epoch 1\n")
    uploader = LogUploader(tmp_path / "out", project="p", run="r", root=work, every_iterations=1, keep_local=False)
    uploader.upload()
    uploader.flush()
    assert log_file.exists()  # a periodic upload never deletes
    log_file.write_text("epoch 1\nepoch 2\n")
    trainer = Engine(lambda e, b: None)
    uploader.attach(trainer)
    trainer.run([0], max_epochs=1)
    uploader.close()
    assert not log_file.exists()
    assert fetch(uploader.storage, KEY) == b"epoch 1\nepoch 2\n"


def test_keep_local_false_keeps_the_file_when_the_upload_fails(work, tmp_path) -> None:
    log_file = work / "logs" / "train.log"
    log_file.write_text("epoch 1\n")
    uploader = LogUploader(tmp_path / "out", project="p", run="r", root=work, every_iterations=1, keep_local=False)

    def refuse(key: str, path: object) -> None:
        raise StorageError(f"cannot write {key!r}: Connection refused", key=key)

    uploader.storage.put_file = refuse  # type: ignore[method-assign]
    trainer = Engine(lambda e, b: None)
    uploader.attach(trainer)
    with pytest.raises(StorageError, match="Connection refused"):
        trainer.run([0, 1], max_epochs=1)
    with pytest.raises(StorageError, match="Connection refused"):
        uploader.close()
    assert log_file.read_text() == "epoch 1\n"
    assert list_logs("p", "r", output_uri=tmp_path / "out") == []


def test_keep_local_false_keeps_a_file_whose_object_is_not_confirmed(work, tmp_path) -> None:
    log_file = work / "logs" / "train.log"
    log_file.write_text("epoch 1\n")
    uploader = LogUploader(tmp_path / "out", project="p", run="r", root=work, every_iterations=1, keep_local=False)
    uploader.storage.stat = lambda key: None  # type: ignore[method-assign]  # the object is not there afterwards
    uploader.upload(final=True)
    with pytest.raises(StorageError, match="missing after its final upload.*kept the local file"):
        uploader.flush()
    assert log_file.exists()
    del uploader.storage.stat  # the object shows up again
    uploader.close()  # a last final upload: confirmed now, so the file goes
    assert not log_file.exists() and fetch(uploader.storage, KEY) == b"epoch 1\n"


# -- what is uploaded, and where --------------------------------------------------------------------


def test_tensorboard_event_files_are_found_by_the_default_globs(work, tmp_path) -> None:
    run_dir = work / "runs" / "Dec01_12-00-00_host"
    (run_dir / "val").mkdir(parents=True)
    events = run_dir / "events.out.tfevents.1764590400.host.4242.0"
    events.write_bytes(b"\x18\x00\x00\x00\x00\x00\x00\x00brain.Event:2")
    (run_dir / "val" / "events.out.tfevents.1764590401.host.4242.1").write_bytes(b"\x00" * 64)
    (work / "logs" / "train.log").write_text("hello\n")
    (work / "notes.txt").write_text("not a log\n")
    uploader = LogUploader(tmp_path / "out", project="p", run="r", root=work)
    assert uploader.patterns == DEFAULT_FILES
    uploader.upload(final=True)
    uploader.close()
    assert [o.name for o in list_logs("p", "r", output_uri=tmp_path / "out")] == [
        "runs/Dec01_12-00-00_host/events.out.tfevents.1764590400.host.4242.0",
        "runs/Dec01_12-00-00_host/val/events.out.tfevents.1764590401.host.4242.1",
        "train.log",
    ]
    assert fetch(uploader.storage, log_key("p", "r", events.relative_to(work))) == events.read_bytes()


def test_a_local_output_uri_inside_root_is_never_uploaded_into_itself(work, tmp_path) -> None:
    (work / "logs" / "train.log").write_text("x\n")
    uploader = LogUploader(work / "logs" / "bucket", project="p", run="r", root=work, files=["logs/**/*"])
    for _ in range(3):
        uploader.upload(final=True)
        uploader.flush()
    uploader.close()
    assert [o.key for o in list_logs("p", "r", output_uri=work / "logs" / "bucket")] == [KEY]


@pytest.mark.parametrize(
    "pattern",
    ["../*.log", "logs/../../*.log", "/etc/*", "/etc/passwd", str(Path("/tmp") / "x.log")],
)
def test_patterns_that_reach_outside_root_are_refused(work, tmp_path, pattern) -> None:
    with pytest.raises(ConfigError, match="reaches outside root="):
        LogUploader(tmp_path / "out", root=work, files=[pattern])
    assert not (tmp_path / "out").exists()  # refused before anything was created


def test_roots_logs_folder_is_the_runs_logs_folder_not_logs_logs(
    work: Path, train_log: logging.Logger, tmp_path: Path
) -> None:
    assert log_key("p", "r", "logs/train.log") == "p/r/logs/train.log" == KEY
    assert log_key("p", "r", "logs/logs/old.log") == "p/r/logs/logs/old.log"  # only root's own logs/ folder
    assert log_key("p", "r", "logs") == "p/r/logs/logs"  # a file named logs keeps its name
    train_log.info("one line")
    uploader = LogUploader(tmp_path / "out", project="p", run="r", root=work)
    uploader.close()
    assert [o.key for o in open_storage(tmp_path / "out").list("p/r/")] == [KEY]
    assert download_logs("p", "r", tmp_path / "dl", output_uri=tmp_path / "out") == [tmp_path / "dl" / "train.log"]


def test_two_files_that_would_share_a_key_are_refused_and_neither_is_uploaded(work: Path, tmp_path: Path) -> None:
    (work / "train.log").write_text("root's\n")
    (work / "logs" / "train.log").write_text("logs/'s\n")
    uploader = LogUploader(tmp_path / "out", project="p", run="r", root=work, files=["*.log", "logs/*.log"])
    uploader.upload()
    with pytest.raises(ConfigError, match=r"would both upload to 'p/r/logs/train.log' .*narrow files="):
        uploader.flush()
    with pytest.raises(ConfigError, match="would both upload to"):  # the final upload meets it too
        uploader.close()
    assert list_logs("p", "r", output_uri=tmp_path / "out") == []


def test_a_run_named_logs_lists_its_files_by_their_own_names(work: Path, tmp_path: Path) -> None:
    (work / "logs" / "train.log").write_text("hello\n")
    uploader = LogUploader(tmp_path / "out", project="logs", run="logs", root=work)
    uploader.upload(final=True)
    uploader.close()
    assert [o.name for o in list_logs("logs", "logs", output_uri=tmp_path / "out")] == ["train.log"]


def test_file_names_that_are_not_safe_keys_become_safe_keys(work, tmp_path) -> None:
    (work / "logs" / ".hidden run: #1.log").write_text("odd name\n")
    uploader = LogUploader(tmp_path / "out", project="p", run="r (lr=0.1)", root=work, files=["logs/*"])
    uploader.upload(final=True)
    uploader.close()
    (obj,) = list_logs("p", "r (lr=0.1)", output_uri=tmp_path / "out")
    assert obj.modified is not None and abs(obj.modified - time.time()) < 600
    assert obj.key.startswith(logs_prefix("p", "r (lr=0.1)")) and ".." not in obj.key and ":" not in obj.key
    assert obj.key.endswith("/logs/hidden-run-1.log-" + obj.key.rsplit("-", 1)[1])
    with pytest.raises(ConfigError, match="not inside the uploader's root"):
        log_key("p", "r", "../escape.log")
    with pytest.raises(ConfigError, match="not inside the uploader's root"):
        log_key("p", "r", "/etc/passwd")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"files": 3}, "pass a list of glob patterns"),
        ({"files": ["logs/*.log", 7]}, "is not a glob"),
        ({"files": []}, "matches nothing"),
        ({"files": [""]}, "is not a glob"),
        ({"files": ["logs/\x00.log"]}, "contains NUL"),
        ({"every_iterations": 0}, "every_iterations=0: pass an int >= 1"),
        ({"every_iterations": True}, "every_iterations=True"),
        ({"every_seconds": 0}, "every_seconds=0: pass a number of seconds > 0"),
        ({"every_seconds": float("nan")}, "every_seconds=nan"),
        ({"every_seconds": None}, "both None"),
        ({"keep_local": "no"}, "keep_local='no'"),
        ({"task": object()}, "has no upload_artifact"),
        ({"save_on_rank": -1}, "save_on_rank=-1"),
        ({"project": ""}, "project '' is not a usable name"),
    ],
)
def test_bad_arguments_are_refused_up_front(tmp_path, kwargs, match) -> None:
    with pytest.raises(ConfigError, match=match):
        LogUploader(tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()


def test_a_saver_and_an_output_uri_together_are_refused(tmp_path) -> None:
    saver = TrackerSaver(tmp_path / "out", registry=tmp_path / "reg.db")
    with pytest.raises(ConfigError, match="pass either a saver"):
        LogUploader(tmp_path / "other", saver=saver)
    with pytest.raises(ConfigError, match="needs an output_uri"):
        LogUploader()
    saver.close()


def test_only_the_saving_rank_uploads(work, tmp_path, monkeypatch) -> None:
    import ignite.distributed as idist

    (work / "logs" / "train.log").write_text("rank 1 log\n")
    monkeypatch.setattr(idist, "get_world_size", lambda: 2)
    monkeypatch.setattr(idist, "get_rank", lambda: 1)
    uploader = LogUploader(tmp_path / "out", project="p", run="r", root=work, every_iterations=1)
    trainer = Engine(lambda e, b: None)
    uploader.attach(trainer)
    trainer.run([0, 1], max_epochs=1)
    uploader.close()
    assert list_logs("p", "r", output_uri=tmp_path / "out") == []


# -- logs are not checkpoints ---------------------------------------------------------------------


def test_logs_leave_the_checkpoint_streams_footprint_and_fsck_alone(work, train_log, tmp_path) -> None:
    registry = str(tmp_path / "reg.db")
    saver = TrackerSaver(tmp_path / "out", project="p", run="r", registry=registry)
    # a log file named like a slot object must not look like one
    (work / "logs" / "best_model.slot0.pt").write_text("not a checkpoint\n")
    uploader = LogUploader(saver=saver, root=work, files=["logs/*"], every_iterations=1)
    trainer = logging_trainer(train_log)
    trainer.add_event_handler(Events.ITERATION_COMPLETED, Checkpoint({"model": model()}, saver, n_saved=2))
    uploader.attach(trainer)
    trainer.run(range(5), max_epochs=1)
    uploader.close()
    saver.close()
    slot_objects = [o.key for o in saver.storage.list("p/r/") if "/logs/" not in o.key]
    assert slot_objects == ["p/r/model.slot0.pt", "p/r/model.slot1.pt"]
    assert [o.name for o in list_logs("p", "r", output_uri=tmp_path / "out")] == [
        "best_model.slot0.pt",
        "train.log",
    ]
    reg = open_registry(registry)
    report = check(reg, deep=True)
    assert report.problems == [] and report.streams == [f"p/r/model at {saver.storage.uri}"]
    assert all("/logs/" not in (f.key or "") for f in report.findings)
    reg.close()


# -- reading logs back ------------------------------------------------------------------------------


def test_list_and_download_logs_find_the_output_uri_in_the_registry(work, train_log, tmp_path) -> None:
    registry = str(tmp_path / "reg.db")
    saver = TrackerSaver(tmp_path / "out", project="p", run="r", registry=registry)
    trainer = logging_trainer(train_log)
    trainer.add_event_handler(Events.COMPLETED, Checkpoint({"model": model()}, saver, n_saved=1))
    uploader = LogUploader(saver=saver, root=work, every_seconds=3600)
    uploader.attach(trainer)
    trainer.run(range(3), max_epochs=1)
    uploader.close()
    saver.close()
    (obj,) = list_logs("p", "r", registry=registry)
    assert (obj.key, obj.size) == (KEY, (work / "logs" / "train.log").stat().st_size)
    assert obj == list_logs("p", "r", output_uri=tmp_path / "out")[0]
    paths = download_logs("p", "r", tmp_path / "dl", registry=registry)
    assert paths == [tmp_path / "dl" / "train.log"]
    assert paths[0].read_bytes() == (work / "logs" / "train.log").read_bytes()
    assert sorted(p.name for p in (tmp_path / "dl").iterdir()) == ["train.log"]  # no temp file left
    with pytest.raises(ConfigError, match="the registry has no record of it; pass output_uri="):
        list_logs("p", "never-ran", registry=registry)
    with pytest.raises(RegistryError, match="no registry at"):
        download_logs("p", "r", tmp_path / "dl2", registry=tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists() and not (tmp_path / "dl2").exists()


# -- S3 (Ceph RGW) ----------------------------------------------------------------------------------


@pytest.mark.ceph
def test_logs_go_to_s3_and_come_back(work, train_log, s3_output_uri, tmp_path) -> None:
    target = Target(output_uri=s3_output_uri, registry=str(tmp_path / "reg.db"))
    saver = target.saver()
    trainer = logging_trainer(train_log, fail_at=5)
    trainer.add_event_handler(Events.ITERATION_COMPLETED, Checkpoint({"model": model()}, saver, n_saved=1))
    uploader = LogUploader(saver=saver, root=work, every_iterations=2, keep_local=False)
    puts = count_puts(uploader.storage)
    uploader.attach(trainer)
    with pytest.raises(RuntimeError, match="loss exploded"):
        trainer.run(range(10), max_epochs=1)
    uploader.close()
    saver.close()
    assert not (work / "logs" / "train.log").exists()  # deleted after the confirmed final upload
    assert puts[KEY] >= 2
    (obj,) = list_logs("p", "r", registry=target.registry)
    assert obj.key == KEY and obj.modified is not None and abs(obj.modified - time.time()) < 600
    (path,) = download_logs("p", "r", tmp_path / "dl", output_uri=s3_output_uri)
    assert "RuntimeError: loss exploded at iteration 5" in path.read_text()
    assert [o.key for o in open_storage(s3_output_uri).list("p/r/") if "/logs/" not in o.key] == ["p/r/model.slot0.pt"]
    reg = open_registry(target.registry)
    assert check(reg).problems == []
    reg.close()


# -- ClearML -----------------------------------------------------------------------------------------


@pytest.mark.clearml
def test_logs_are_attached_to_the_clearml_task_as_artifacts(
    work, train_log, clearml_standin, clearml_task, tmp_path
) -> None:
    uploader = LogUploader(tmp_path / "out", project="p", run="r", root=work, every_iterations=2, task=clearml_task)
    trainer = logging_trainer(train_log)
    uploader.attach(trainer)
    trainer.run(range(4), max_epochs=1)
    uploader.close()
    artifacts = clearml_standin.tasks[clearml_task.id]["execution"]["artifacts"]
    (art,) = [a for a in artifacts if a["key"] == "logs/train.log"]
    local_copy = Path(urllib.parse.urlsplit(art["uri"]).path)
    assert local_copy.read_bytes() == fetch(uploader.storage, KEY)  # the final bytes, in the task's UI
    assert dict(art["display_data"]) == {"key": KEY, "size": str(len(local_copy.read_bytes())), "sha256": art["hash"]}


@pytest.mark.clearml
def test_a_saver_on_the_clearml_registry_attaches_logs_to_its_task(
    work, train_log, clearml_standin, clearml_task, tmp_path
) -> None:
    from tracker_saver import TrackerSaver

    saver = TrackerSaver(str(tmp_path / "out"), registry="clearml")
    uploader = LogUploader(saver=saver, root=work, every_iterations=2)
    assert uploader.task is not None and uploader.task.id == clearml_task.id
    trainer = logging_trainer(train_log)
    uploader.attach(trainer)
    trainer.run(range(4), max_epochs=1)
    uploader.close()
    saver.close()
    artifacts = clearml_standin.tasks[clearml_task.id]["execution"]["artifacts"]
    assert [a["display_data"] for a in artifacts if a["key"] == "logs/train.log"] != []


@pytest.mark.ceph
@pytest.mark.clearml
def test_with_s3_the_task_artifact_links_to_the_uploaded_object(
    work, train_log, clearml_standin, clearml_task, s3_output_uri
) -> None:
    uploader = LogUploader(s3_output_uri, project="p", run="r", root=work, every_iterations=2, task=clearml_task)
    trainer = logging_trainer(train_log)
    uploader.attach(trainer)
    trainer.run(range(4), max_epochs=1)
    uploader.close()
    artifacts = clearml_standin.tasks[clearml_task.id]["execution"]["artifacts"]
    (art,) = [a for a in artifacts if a["key"] == "logs/train.log"]
    assert art["uri"] == f"{s3_output_uri}/{KEY}"  # a link: the bytes are stored once


def test_the_runnable_example_runs(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "log_upload.py"), str(tmp_path / "out")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "train.log: " in done.stdout and "logs/logs/" not in done.stdout
    assert [o.name for o in list_logs("example", "log-upload", output_uri=tmp_path / "out")] == ["train.log"]
    assert (tmp_path / "out" / "example" / "log-upload" / "logs" / "train.log").is_file()
