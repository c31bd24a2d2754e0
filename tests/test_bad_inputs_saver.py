"""Bad inputs at the saver's door: TrackerSaver's and Checkpoint's arguments, the saves, load_checkpoint.

The rows of the catalogue (tests/bad_inputs.py) that a training script gets wrong: names, n_saved,
the output_uri and the registry it names, timeouts and preemption, scores, metadata and callbacks,
what is saved and how it is loaded back, S3 and ClearML as the constructor meets them. Each test
names the case; its row says the input, the error and what is left (docs/bad-inputs.md).
"""

from __future__ import annotations

import datetime
import io
import math
import os
import signal
import threading
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

from tests.bad_inputs import (
    LEFT_NOTHING,
    LEFT_SAVER,
    RULE,
    WRONG_SECRET,
    Row,
    World,
    case,
    fit,
    free_port,
    raises,
    remount_read_only,
    row_of,
    texts,
    tmpfs,
)
from tests.helpers import chained, exception_texts, model
from tracker_saver import (
    RecordState,
    TrackerSaver,
    find_models,
    load_checkpoint,
)
from tracker_saver.core.records import UploadInfo
from tracker_saver.registry.sqlite import SQLiteRegistry


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World.under(tmp_path)


@pytest.fixture
def row(request: pytest.FixtureRequest) -> Row:
    return row_of(request)


# ------------------------------------------------------------------ names and n_saved


NAMES = "Names and n_saved"


@case(
    group=NAMES,
    id="n-saved-zero",
    input="Checkpoint(to_save, saver, n_saved=0)",
    error="ValueError",
    message="n_saved must be a positive integer or None, got 0",
    left=LEFT_SAVER + " (Ignite's own error, raised in `Checkpoint(...)` before the saver is called)",
)
def test_n_saved_zero_is_refused_by_ignite_before_anything_is_written(row: Row, world: World) -> None:
    saver = world.saver()
    before = world.snapshot()
    with raises(row):
        Checkpoint({"model": model()}, saver, n_saved=0)
    assert world.snapshot() == before and before[1] == []


@case(
    group=NAMES,
    id="n-saved-negative",
    input="Checkpoint(to_save, saver, n_saved=-1)",
    error="ValueError",
    message="n_saved must be a positive integer or None, got -1",
    left=LEFT_SAVER + " (Ignite's own error)",
)
def test_a_negative_n_saved_is_refused_by_ignite_before_anything_is_written(row: Row, world: World) -> None:
    saver = world.saver()
    before = world.snapshot()
    with raises(row):
        Checkpoint({"model": model()}, saver, n_saved=-1)
    assert world.snapshot() == before


@case(
    group=NAMES,
    id="n-saved-string",
    input='Checkpoint(to_save, saver, n_saved="2")',
    error="TypeError",
    message="'<' not supported between instances of 'str' and 'int'",
    left=LEFT_SAVER + " (Ignite's own comparison fails in `Checkpoint(...)`; pass an int)",
)
def test_n_saved_given_as_text_fails_in_ignites_own_comparison(row: Row, world: World) -> None:
    saver = world.saver()
    before = world.snapshot()
    with raises(row):
        Checkpoint({"model": model()}, saver, n_saved="2")  # type: ignore[arg-type]
    assert world.snapshot() == before


@case(
    group=NAMES,
    id="n-saved-float",
    input="Checkpoint(to_save, saver, n_saved=1.5)",
    error="none",
    message="accepted by Ignite, which then keeps 2 checkpoints (len(_saved) < 1.5); the saver keeps the same 2 slots",
    left="2 objects and 2 live records after 3 saves, exactly what Ignite keeps; pass an int to mean it",
)
def test_a_fractional_n_saved_keeps_the_slots_of_the_checkpoints_ignite_keeps(row: Row, world: World) -> None:
    saver = world.saver()
    trainer = Engine(lambda engine, batch: None)
    handler = Checkpoint({"model": model()}, saver, n_saved=1.5)  # type: ignore[arg-type]
    trainer.add_event_handler(Events.EPOCH_COMPLETED, handler)
    trainer.run([0], max_epochs=3)
    live = [r.filename for r in saver.records(live=True)]
    assert live == [item.filename for item in handler._saved] == ["model_2.pt", "model_3.pt"]
    assert sorted(p.name for p in (world.out / "p" / "r").iterdir()) == ["model.slot0.pt", "model.slot1.pt"]
    world.assert_truthful()


@case(
    group=NAMES,
    id="prefix-slash",
    input='Checkpoint(to_save, saver, filename_prefix="team/best")',
    error="none",
    message="accepted: the record is named team/best_model_1.pt as typed; its key is p/r/team-best_model-….slot0.pt",
    left="one object inside output_uri (the `/` never makes a folder of the key) and its live record",
)
def test_a_slash_in_the_filename_prefix_never_makes_a_folder_of_the_key(row: Row, world: World) -> None:
    saver = world.saver()
    fit(saver, filename_prefix="team/best")
    (record,) = saver.records(live=True)
    assert record.name == "team/best_model_1.pt"
    assert record.key is not None and record.key.startswith("p/r/team-best_model-") and record.key.count("/") == 2
    world.assert_truthful()


@case(
    group=NAMES,
    id="prefix-dotdot",
    input='Checkpoint(to_save, saver, filename_prefix="../../outside")',
    error="none",
    message="accepted: the record keeps the name ../../outside_model_1.pt; the key is a slug, p/r/outside_model-….slot0.pt",
    left="one object inside output_uri, nothing outside it: keys can never escape output_uri",
)
def test_a_dotdot_filename_prefix_is_kept_in_the_name_and_never_escapes_output_uri(row: Row, world: World) -> None:
    saver = world.saver()
    fit(saver, filename_prefix="../../outside")
    (record,) = saver.records(live=True)
    assert record.name == "../../outside_model_1.pt"
    assert record.key is not None and ".." not in record.key and record.key.startswith("p/r/outside_model-")
    files = [f for f in world.files() if not f.endswith("/")]
    assert sorted(f for f in files if "/.tracker_saver/" not in f) == [f"out/{record.key}", "registry.db"]
    assert [f for f in files if "/.tracker_saver/" in f] == [
        f"out/.tracker_saver/owners/{record.key[: -len('.slot0.pt')]}.json"
    ]
    world.assert_truthful()


@case(
    group=NAMES,
    id="prefix-nul",
    input='Checkpoint(to_save, saver, filename_prefix="a\\x00b")',
    error="ConfigError",
    message="stream (Ignite's basename, from filename_prefix and to_save) 'a\\x00b_model' holds U+0000 (NUL) at "
    "character 2, a NUL, which no file name or C string can hold: remove it (names, tags and metadata follow "
    "one text rule: docs/security.md)",
    left=LEFT_SAVER + " (raised at the first save, before a record or a byte is written)",
)
def test_a_nul_in_the_filename_prefix_is_refused_at_the_first_save(row: Row, world: World) -> None:
    saver = world.saver()
    before = world.snapshot()
    with raises(row):
        fit(saver, filename_prefix="a\x00b")
    assert world.snapshot() == before and before[1] == []


@case(
    group=NAMES,
    id="prefix-300-characters",
    input='Checkpoint(to_save, saver, filename_prefix="x" * 300)',
    error="none",
    message="accepted: the record keeps the 300-character name; the key's segment is an 80-character slug plus a hash",
    left="one object whose file name stays far below the 255-byte limit of file systems, and its record",
)
def test_a_300_character_prefix_is_kept_in_the_record_and_cut_to_a_slug_in_the_key(row: Row, world: World) -> None:
    saver = world.saver()
    fit(saver, filename_prefix="x" * 300)
    (record,) = saver.records(live=True)
    assert record.name == "x" * 300 + "_model_1.pt"
    assert record.key is not None and len(record.key.rsplit("/", 1)[1]) < 100
    world.assert_truthful()


@case(
    group=NAMES,
    id="prefix-too-long",
    input='Checkpoint(to_save, saver, filename_prefix="x" * 1001)',
    error="ConfigError",
    message="stream (Ignite's basename, from filename_prefix and to_save) 'xxx…_model' is not a usable name: "
    "pass a non-empty string of at most 1000 characters, without NUL",
    left=LEFT_SAVER + " (raised at the first save)",
)
def test_a_prefix_over_1000_characters_is_refused_at_the_first_save(row: Row, world: World) -> None:
    saver = world.saver()
    before = world.snapshot()
    with raises(row):
        fit(saver, filename_prefix="x" * 1001)
    assert world.snapshot() == before


@case(
    group=NAMES,
    id="prefix-unicode",
    input='Checkpoint(to_save, saver, filename_prefix="résnet 模型")',
    error="none",
    message="accepted: the record is named résnet 模型_model_1.pt as typed; the key is an ASCII slug, p/r/resnet-_model-….slot0.pt",
    left="one object and its live record; `find_models` and the CLI show the name as typed",
)
def test_a_unicode_prefix_is_kept_as_typed_and_its_key_is_ascii(row: Row, world: World) -> None:
    saver = world.saver()
    fit(saver, filename_prefix="résnet 模型")
    (record,) = saver.records(live=True)
    assert record.name == "résnet 模型_model_1.pt"
    assert record.key is not None and record.key.isascii() and record.key.startswith("p/r/resnet-_model-")
    world.assert_truthful()


@case(
    group=NAMES,
    id="project-dotdot",
    input='TrackerSaver("./ckpt", project="..")',
    error="none",
    message="accepted: records keep the project .. as typed; keys start with x-…/, a slug, never ../",
    left="objects inside output_uri only",
)
def test_a_dotdot_project_is_kept_as_typed_and_its_keys_stay_inside_output_uri(row: Row, world: World) -> None:
    saver = TrackerSaver(world.out, project="..", run="r", registry=world.db)
    fit(saver)
    (record,) = saver.records(live=True)
    assert record.project == ".." and record.key is not None and record.key.startswith("x-")
    assert (world.out / record.key).is_file()
    world.assert_truthful()


@case(
    group=NAMES,
    id="run-nul",
    input='TrackerSaver("./ckpt", run="r\\x00")',
    error="ConfigError",
    message="run 'r\\x00' holds U+0000 (NUL) at character 2, a NUL, which no file name or C string can hold: remove it "
    "(names, tags and metadata follow one text rule: docs/security.md)",
    left=LEFT_NOTHING,
)
def test_a_nul_in_the_run_is_refused_before_anything_is_created(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver(world.out, run="r\x00", registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    group=NAMES,
    id="run-empty",
    input='TrackerSaver("./ckpt", run="")',
    error="ConfigError",
    message="run '' is not a usable name: pass a non-empty string of at most 1000 characters, without NUL",
    left=LEFT_NOTHING + " (leave run out, or pass None, for the default run)",
)
def test_an_empty_run_is_refused_before_anything_is_created(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver(world.out, run="", registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    group=NAMES,
    id="project-not-text",
    input='TrackerSaver("./ckpt", project=3)',
    error="ConfigError",
    message="project 3 is not a usable name: pass a non-empty string of at most 1000 characters, without NUL",
    left=LEFT_NOTHING,
)
def test_a_project_that_is_not_text_is_refused_before_anything_is_created(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver(world.out, project=3, registry=world.db)  # type: ignore[arg-type]
    assert world.snapshot() == ({}, [])


@case(
    group=NAMES,
    id="project-blank",
    input='TrackerSaver("./ckpt", project=" ")',
    error="ConfigError",
    message="project ' ' is not a usable name: pass a non-empty string of at most 1000 characters, without NUL",
    left=LEFT_NOTHING,
)
def test_a_blank_project_is_refused_before_anything_is_created(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver(world.out, project=" ", registry=world.db)
    assert world.snapshot() == ({}, [])


# ------------------------------------------------------------------ output_uri


OUTPUT = "output_uri"


@case(
    group=OUTPUT,
    id="output-empty",
    input='TrackerSaver("")',
    error="ConfigError",
    message="TrackerSaver needs an output_uri: pass a folder or s3://BUCKET/PREFIX "
    "(with registry='clearml' it defaults to the task's output_uri)",
    left=LEFT_NOTHING,
)
def test_an_empty_output_uri_is_refused_naming_the_forms_it_takes(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver("", registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    group=OUTPUT,
    id="output-nul",
    input='TrackerSaver("ckpt\\x00")',
    error="ConfigError",
    message="output_uri 'ckpt\\x00' contains NUL: pass a folder or s3://BUCKET/PREFIX",
    left=LEFT_NOTHING,
)
def test_a_nul_in_the_output_uri_is_refused_before_anything_is_created(
    row: Row, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(world.root)
    with raises(row):
        TrackerSaver("ckpt\x00", registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    group=OUTPUT,
    id="output-relative-dotdot",
    input='TrackerSaver("../ckpt")',
    error="none",
    message="accepted: resolved against the current folder once; records hold the absolute file:///…/ckpt/… uri",
    left="the folder ../ckpt, its objects and their records, loadable from any working folder",
)
def test_a_relative_output_uri_above_the_working_folder_is_resolved_once_and_loads_from_anywhere(
    row: Row, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    (world.root / "work").mkdir()
    monkeypatch.chdir(world.root / "work")
    saver = TrackerSaver("../ckpt", project="p", run="r", registry=world.db)
    assert saver.storage.uri == (world.root / "ckpt").as_uri()
    fit(saver)
    (record,) = saver.records(live=True)
    assert record.uri == (world.root / "ckpt" / "p" / "r" / "model.slot0.pt").as_uri()
    monkeypatch.chdir(world.root)
    load_checkpoint(record, {"model": model()})


@case(
    group=OUTPUT,
    id="output-file-uri-host",
    input='TrackerSaver("file://../ckpt")',
    error="ConfigError",
    message="output_uri 'file://../ckpt' names the host '..': a file URI is file:///ABSOLUTE/PATH (three slashes); "
    "pass a relative folder as a plain path",
    left=LEFT_NOTHING + " (before the fix, it wrote to the folder /ckpt)",
)
def test_a_file_uri_with_two_slashes_is_refused_instead_of_writing_to_another_folder(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver("file://../ckpt", registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    group=OUTPUT,
    id="output-unknown-scheme",
    input='TrackerSaver("hdfs://namenode/ckpt")',
    error="ConfigError",
    message="output_uri 'hdfs://namenode/ckpt' has the unknown scheme 'hdfs': use a local folder, file:///path or s3://BUCKET/PREFIX",
    left=LEFT_NOTHING,
)
def test_an_output_uri_of_an_unknown_scheme_is_refused_naming_the_known_ones(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver("hdfs://namenode/ckpt", registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    group=OUTPUT,
    id="output-s3-no-bucket",
    input='TrackerSaver("s3:///team/ckpt")',
    error="ConfigError",
    message="output_uri 's3:///team/ckpt' has no bucket: use s3://BUCKET/PREFIX",
    left=LEFT_NOTHING + " (nothing is sent to any endpoint)",
)
def test_an_s3_output_uri_without_a_bucket_is_refused_before_any_request(row: Row, world: World) -> None:
    pytest.importorskip("boto3")
    with raises(row):
        TrackerSaver("s3:///team/ckpt", registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    group=OUTPUT,
    id="output-s3-dotdot",
    input='TrackerSaver("s3://ckpts/team/../other")',
    error="ConfigError",
    message="output_uri 's3://ckpts/team/../other' has an unsafe prefix 'team/../other': use s3://BUCKET/PREFIX where "
    "PREFIX has plain segments (letters, digits, . _ - = +, no '..', no '//')",
    left=LEFT_NOTHING,
)
def test_an_s3_prefix_with_dotdot_is_refused_before_any_request(row: Row, world: World) -> None:
    pytest.importorskip("boto3")
    with raises(row):
        TrackerSaver("s3://ckpts/team/../other", registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    group=OUTPUT,
    id="output-s3-credentials-in-uri",
    input='TrackerSaver("s3://AKIA…:SECRET@ckpts/team")',
    error="ConfigError",
    message="output_uri must not contain credentials (user:secret@ before the bucket): use s3://BUCKET/PREFIX and "
    "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile or an instance role",
    left=LEFT_NOTHING + "; the message does not repeat the URI, so the secret is never shown",
)
def test_credentials_in_an_s3_output_uri_are_refused_and_never_shown(row: Row, world: World) -> None:
    pytest.importorskip("boto3")
    with raises(row) as caught:
        TrackerSaver(f"s3://AKIAEXAMPLE:{WRONG_SECRET}@ckpts/team", registry=world.db)
    assert WRONG_SECRET not in texts(caught.value)
    assert world.snapshot() == ({}, [])


@case(
    group=OUTPUT,
    id="output-s3-unknown-option",
    input='TrackerSaver("s3://ckpts/team", storage_options={"multipart_chunk_size": 8 << 20})',
    error="ConfigError",
    message="unknown storage option 'multipart_chunk_size' for s3://ckpts/team: use endpoint_url, …",
    left=LEFT_NOTHING,
)
def test_an_unknown_s3_storage_option_is_refused_naming_the_known_ones(row: Row, world: World) -> None:
    pytest.importorskip("boto3")
    with raises(row):
        TrackerSaver("s3://ckpts/team", storage_options={"multipart_chunk_size": 8 << 20}, registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    group=OUTPUT,
    id="output-local-with-storage-options",
    input='TrackerSaver("./ckpt", storage_options={"endpoint_url": "http://ceph:7480"})',
    error="ConfigError",
    message="storage_options ['endpoint_url'] do not apply to a local output_uri: remove them, or use an s3:// output_uri",
    left=LEFT_NOTHING,
)
def test_storage_options_for_a_local_output_uri_are_refused(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver(world.out, storage_options={"endpoint_url": "http://ceph:7480"}, registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    group=OUTPUT,
    id="output-is-a-file",
    input='TrackerSaver("notes.txt/ckpt")  # notes.txt is a file',
    error="ConfigError",
    message="output_uri '…/notes.txt/ckpt' is not a writable folder (Not a directory): pass a folder you can write to",
    left="the file as it was; no folder, no registry file",
)
def test_an_output_uri_under_a_file_is_refused_leaving_the_file_as_it_was(row: Row, world: World) -> None:
    (world.root / "notes.txt").write_text("x")
    before = world.snapshot()
    with raises(row):
        TrackerSaver(world.root / "notes.txt" / "ckpt", registry=world.db)
    assert world.snapshot() == before


@case(
    group=OUTPUT,
    id="output-read-only",
    input='TrackerSaver("/mnt/ro/ckpt")  # a read-only mount; even root cannot write',
    error="ConfigError",
    message="output_uri '…/ckpt' is not a writable folder (Read-only file system): pass a folder you can write to",
    left=LEFT_NOTHING + " (the registry is checked, not opened, before the folder)",
)
def test_an_output_uri_on_a_read_only_mount_is_refused_before_the_registry_is_created(row: Row, world: World) -> None:
    with tmpfs(world.root / "ro") as mount:
        remount_read_only(mount)
        before = world.snapshot()
        with raises(row):
            TrackerSaver(mount / "ckpt", registry=world.db)
        assert world.snapshot() == before and "registry.db" not in before[0]


@case(
    group=OUTPUT,
    id="output-no-longer-writable",
    input="saver.check()  # after output_uri was replaced by a file",
    error="ConfigError",
    message="output_uri '…/out' is not a writable folder (…): pass a folder you can write to",
    left="the file that replaced the folder; the registry as it was",
)
def test_check_refuses_an_output_uri_that_was_replaced_by_a_file(row: Row, world: World) -> None:
    saver = world.saver()
    world.out.rmdir()
    world.out.write_text("now a file")
    before = world.snapshot()
    with raises(row):
        saver.check()
    assert world.snapshot() == before


@case(
    group=OUTPUT,
    id="output-full-disk",
    input="a 4 MB checkpoint into a 2 MiB tmpfs (n_saved=1, the previous one fits)",
    error="StorageError",
    message="writing file:///…/p/r/model.slot0.pt failed: [Errno 28] No space left on device: "
    "free space there, or pass an output_uri with room",
    left="the previous checkpoint's bytes and live record, intact and loadable; the new record `failed`; no temp file",
)
def test_a_full_disk_fails_the_save_and_keeps_the_previous_checkpoint_loadable(row: Row, world: World) -> None:
    class Grows:
        """A state that fits the disk on the first save and not on the second."""

        def __init__(self) -> None:
            self.saves = 0

        def state_dict(self) -> dict[str, Any]:
            self.saves += 1
            return {"w": torch.ones(1_000 if self.saves == 1 else 1_000_000)}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.loaded = state

    with tmpfs(world.root / "small", size="2m") as mount:
        world.out = mount / "out"
        saver = world.saver()
        grows = Grows()
        trainer = fit(saver, {"model": grows})
        before = world.snapshot()
        with raises(row) as caught:
            trainer.run([0], max_epochs=2)
        assert isinstance(caught.value.__cause__, OSError)
        world.assert_one_failed_record_added(before)
        (previous,) = find_models(project="p", live=True, registry=saver.registry)
        load_checkpoint(previous, {"model": grows}, storage=saver.storage)
        assert grows.loaded["w"].shape == (1_000,)
        saver.close()


# ------------------------------------------------------------------ outages and preemption


OUTAGES = "Outages and preemption"


@case(
    group=OUTAGES,
    id="timeout-zero",
    input='TrackerSaver("./ckpt", timeout=0)',
    error="ConfigError",
    message="timeout=0: pass the seconds a save may wait on a back end that stopped answering, a number > 0 (default 60)",
    left=LEFT_NOTHING,
)
def test_a_zero_timeout_is_refused_before_anything_is_created(row: Row, world: World) -> None:
    with raises(row):
        world.saver(timeout=0)
    assert world.snapshot() == ({}, [])


@case(
    group=OUTAGES,
    id="timeout-text",
    input='TrackerSaver("./ckpt", timeout="60")',
    error="ConfigError",
    message="timeout='60': pass the seconds a save may wait on a back end that stopped answering, a number > 0 (default 60)",
    left=LEFT_NOTHING,
)
def test_a_timeout_given_as_text_is_refused_before_anything_is_created(row: Row, world: World) -> None:
    with raises(row):
        world.saver(timeout="60")
    assert world.snapshot() == ({}, [])


@case(
    group=OUTAGES,
    id="timeout-infinite",
    input='TrackerSaver("./ckpt", timeout=float("inf"))',
    error="ConfigError",
    message="timeout=inf: pass the seconds a save may wait on a back end that stopped answering, a number > 0 (default 60)",
    left=LEFT_NOTHING + " (no wait is unbounded: pass a large number to mean a long one)",
)
def test_an_infinite_timeout_is_refused_before_anything_is_created(row: Row, world: World) -> None:
    with raises(row):
        world.saver(timeout=float("inf"))
    assert world.snapshot() == ({}, [])


@case(
    group=OUTAGES,
    id="save-on-sigterm-not-callable",
    input='saver.attach(trainer, save_on_sigterm="checkpoint")',
    error="ConfigError",
    message="save_on_sigterm='checkpoint' is not callable: pass the Checkpoint handler to run once",
    left=LEFT_SAVER + "; no signal handler installed",
)
def test_a_save_on_sigterm_that_is_not_callable_is_refused_without_a_signal_handler(row: Row, world: World) -> None:
    saver = world.saver()
    before = signal.getsignal(signal.SIGTERM)
    with raises(row):
        saver.attach(Engine(lambda e, b: None), save_on_sigterm="checkpoint")  # type: ignore[arg-type]
    assert signal.getsignal(signal.SIGTERM) is before and world.records() == []
    saver.close()


@case(
    group=OUTAGES,
    id="sigterm-grace-zero",
    input="saver.attach(trainer, save_on_sigterm=checkpoint, sigterm_grace=0)",
    error="ConfigError",
    message="sigterm_grace=0: pass the seconds from SIGTERM to exit, a number > 0",
    left=LEFT_SAVER + "; no signal handler installed",
)
def test_a_zero_sigterm_grace_is_refused_without_a_signal_handler(row: Row, world: World) -> None:
    saver = world.saver()
    trainer = Engine(lambda e, b: None)
    with raises(row):
        saver.attach(trainer, save_on_sigterm=Checkpoint({"m": torch.nn.Linear(1, 1)}, saver), sigterm_grace=0)
    assert world.records() == []
    saver.close()


@case(
    group=OUTAGES,
    id="save-on-sigterm-in-a-thread",
    input="threading.Thread(target=lambda: saver.attach(trainer, save_on_sigterm=checkpoint)).start()",
    error="ConfigError",
    message="save_on_sigterm needs attach() to be called from the main thread (signals arrive there)",
    left=LEFT_SAVER + "; no signal handler installed",
)
def test_save_on_sigterm_attached_outside_the_main_thread_is_refused(row: Row, world: World) -> None:
    saver = world.saver()
    trainer = Engine(lambda e, b: None)
    caught: list[BaseException] = []

    def attach() -> None:
        try:
            saver.attach(trainer, save_on_sigterm=Checkpoint({"m": torch.nn.Linear(1, 1)}, saver))
        except BaseException as exc:
            caught.append(exc)

    worker = threading.Thread(target=attach)
    worker.start()
    worker.join()
    with raises(row):
        raise caught[0]
    saver.close()


# ------------------------------------------------------------------ the registry argument


REGISTRY = "The registry argument"


@case(
    group=REGISTRY,
    id="registry-is-a-folder",
    input='TrackerSaver("./ck1", registry="/tmp")',
    error="ConfigError",
    message="registry path '/tmp' is a folder: pass a file path such as '/tmp/registry.db'",
    left=LEFT_NOTHING + " (before the fix, `ck1/` was created first)",
)
def test_a_registry_path_that_is_a_folder_is_refused_before_the_output_folder_is_made(
    row: Row, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(world.root)
    with raises(row):
        TrackerSaver("./ck1", registry="/tmp")
    assert world.snapshot() == ({}, [])


@case(
    group=REGISTRY,
    id="registry-in-a-file",
    input='TrackerSaver("./ckpt", registry="notes.txt/registry.db")  # notes.txt is a file',
    error="ConfigError",
    message="registry folder '…/notes.txt' cannot be created ('…/notes.txt' is not a folder): pass a registry path in a writable folder",
    left="the file as it was; no output folder",
)
def test_a_registry_path_under_a_file_is_refused_leaving_the_file_as_it_was(row: Row, world: World) -> None:
    (world.root / "notes.txt").write_text("x")
    before = world.snapshot()
    with raises(row):
        world.saver(registry=world.root / "notes.txt" / "registry.db")
    assert world.snapshot() == before


@case(
    group=REGISTRY,
    id="registry-inside-output",
    input='TrackerSaver("./ckpt", registry="./ckpt/registry.db")',
    error="ConfigError",
    message="registry '…/ckpt/registry.db' is inside output_uri '…/ckpt', which holds checkpoint objects only: "
    "put the registry elsewhere (default ~/.tracker_saver/registry.db)",
    left=LEFT_NOTHING,
)
def test_a_registry_inside_output_uri_is_refused_before_anything_is_created(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver(world.root / "ckpt", registry=world.root / "ckpt" / "registry.db")
    assert world.snapshot() == ({}, [])


@case(
    group=REGISTRY,
    id="registry-unknown-scheme",
    input='TrackerSaver("./ckpt", registry="postgres://db/ckpts")',
    error="ConfigError",
    message="registry 'postgres://db/ckpts' is not understood: use 'sqlite', a file path, sqlite:///PATH, 'clearml' or 'mlflow[:http://HOST:PORT]'",
    left=LEFT_NOTHING,
)
def test_a_registry_of_an_unknown_scheme_is_refused_naming_the_known_ones(row: Row, world: World) -> None:
    with raises(row):
        world.saver(registry="postgres://db/ckpts")
    assert world.snapshot() == ({}, [])


@case(
    group=REGISTRY,
    id="registry-read-only",
    input='TrackerSaver("./ckpt", registry="/mnt/ro/registry.db")  # a read-only mount',
    error="ConfigError",
    message="registry '…/registry.db' is read-only (Read-only file system): SQLite writes the registry and its -wal "
    "and -shm files there; pass a registry path you can write to",
    left="the registry as it was; no output folder (root ignores file modes, so the test uses a read-only tmpfs)",
)
def test_a_registry_on_a_read_only_mount_is_refused_and_left_as_it_was(row: Row, world: World) -> None:
    with tmpfs(world.root / "ro") as mount:
        SQLiteRegistry(mount / "registry.db").close()
        remount_read_only(mount)
        before = world.files()
        with raises(row):
            world.saver(registry=mount / "registry.db")
        assert world.files() == before


@case(
    group=REGISTRY,
    id="mlflow-secret-in-the-chain",
    input='TrackerSaver("./ckpt", registry="mlflow:http://user:SECRET@127.0.0.1:PORT", timeout=1)  # nothing listens',
    error="RegistryError",
    message="MLflow registry mlflow:http://127.0.0.1:…: looking up experiment 'p' failed: the tracking server does not "
    "answer (…); check that `mlflow server` runs at that URI (MLFLOW_TRACKING_URI), or allow a longer wait with "
    "TrackerSaver(timeout=...)",
    left="the checked output folder, no record; SECRET in no message, argument, cause or context of the chain, where "
    "a masked copy of MLflow's error is chained (before the fix: raised from None, MLflow's error with "
    "http://user:SECRET@… kept in __context__)",
)
def test_an_mlflow_password_in_the_registry_uri_is_in_no_part_of_the_error_chain(
    row: Row, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", WRONG_SECRET + "-env")
    with raises(row) as caught:
        world.saver(registry=f"mlflow:http://user:{WRONG_SECRET}@127.0.0.1:{free_port()}", timeout=1)
    chain = chained(caught.value)
    assert any("MlflowException" in type(e).__name__ or "mlflow" in type(e).__module__ for e in chain[1:])
    assert WRONG_SECRET not in "\n".join(exception_texts(e) for e in chain)
    assert world.records() == []


# ------------------------------------------------------------------ scores, metadata and callbacks


SCORES = "Scores, metadata and callbacks"


def _scored(world: World, score: Any) -> TrackerSaver:
    saver = world.saver()
    fit(saver, score_function=lambda engine: score, score_name="val_acc")
    return saver


@case(
    group=SCORES,
    id="score-nan",
    input='Checkpoint(..., score_function=lambda e: float("nan"), score_name="val_acc")',
    error="none",
    message="accepted: the record's score and priority are absent (None), so range queries never match it",
    left="the object and its live record, named model_val_acc=nan.pt as Ignite names it",
)
def test_a_nan_score_is_recorded_as_absent(row: Row, world: World) -> None:
    (record,) = _scored(world, math.nan).records(live=True)
    assert record.name == "model_val_acc=nan.pt"
    assert (record.score, record.metadata["priority"]) == (None, None)
    world.assert_truthful()


@case(
    group=SCORES,
    id="score-inf",
    input='Checkpoint(..., score_function=lambda e: float("inf"), score_name="val_acc")',
    error="none",
    message="accepted: the record keeps score and priority inf exactly, as Ignite compares them",
    left="the object and its live record; a resumed run ranks it as Ignite did",
)
def test_an_infinite_score_is_kept_exactly_as_ignite_compares_it(row: Row, world: World) -> None:
    (record,) = _scored(world, math.inf).records(live=True)
    assert record.score == math.inf and record.metadata["priority"] == math.inf
    world.assert_truthful()


@case(
    group=SCORES,
    id="score-minus-inf",
    input='Checkpoint(..., score_function=lambda e: float("-inf"), score_name="val_acc")',
    error="none",
    message="accepted: the record keeps score and priority -inf exactly",
    left="the object and its live record",
)
def test_a_minus_infinite_score_is_kept_exactly_as_ignite_compares_it(row: Row, world: World) -> None:
    (record,) = _scored(world, -math.inf).records(live=True)
    assert record.score == -math.inf and record.metadata["priority"] == -math.inf
    world.assert_truthful()


@case(
    group=SCORES,
    id="score-tensor",
    input="Checkpoint(..., score_function=lambda e: torch.tensor(0.9))",
    error="ValueError",
    message="Output of score_function should be a number",
    left=LEFT_SAVER + " (Ignite's own check, before the saver is called: return `.item()`)",
)
def test_a_tensor_score_is_refused_by_ignite_before_the_saver_is_called(row: Row, world: World) -> None:
    saver = world.saver()
    before = world.snapshot()
    with raises(row):
        fit(saver, score_function=lambda engine: torch.tensor(0.9), score_name="val_acc")
    assert world.snapshot() == before


@case(
    group=SCORES,
    id="score-string",
    input='Checkpoint(..., score_function=lambda e: "0.9")',
    error="ValueError",
    message="Output of score_function should be a number",
    left=LEFT_SAVER + " (Ignite's own check, before the saver is called: return a float)",
)
def test_a_score_given_as_text_is_refused_by_ignite_before_the_saver_is_called(row: Row, world: World) -> None:
    saver = world.saver()
    before = world.snapshot()
    with raises(row):
        fit(saver, score_function=lambda engine: "0.9", score_name="val_acc")
    assert world.snapshot() == before


def _with_metadata(key: Any, value: Any) -> Callable[[UploadInfo], UploadInfo]:
    def add(info: UploadInfo) -> UploadInfo:
        info.metadata[key] = value
        return info

    return add


@case(
    group=SCORES,
    id="metadata-dict",
    input='pre_upload=[lambda info: info.metadata.update(config={"lr": 0.1}) or info]',
    error="ConfigError",
    message="metadata['config'] = {'lr': 0.1} has type dict, which a record cannot hold: use an int, float, str or bool "
    "(json.dumps(value) for a structure)",
    left=LEFT_SAVER + " (raised before the pending record: nothing half-written)",
)
def test_a_dict_in_the_metadata_is_refused_before_the_pending_record(row: Row, world: World) -> None:
    saver = world.saver(pre_upload=[_with_metadata("config", {"lr": 0.1})])
    before = world.snapshot()
    with raises(row):
        fit(saver)
    assert world.snapshot() == before and before[1] == []


@case(
    group=SCORES,
    id="metadata-datetime",
    input="pre_upload=[lambda info: info.metadata.update(when=datetime.now()) or info]",
    error="ConfigError",
    message="metadata['when'] = datetime.datetime(…) has type datetime, which a record cannot hold: use an int, float, "
    "str or bool (json.dumps(value) for a structure)",
    left=LEFT_SAVER,
)
def test_a_datetime_in_the_metadata_is_refused_before_the_pending_record(row: Row, world: World) -> None:
    saver = world.saver(pre_upload=[_with_metadata("when", datetime.datetime.now())])
    before = world.snapshot()
    with raises(row):
        fit(saver)
    assert world.snapshot() == before


@case(
    group=SCORES,
    id="metadata-key-not-text",
    input='pre_upload=[lambda info: info.metadata.update({("lr", 1): 0.1}) or info]',
    error="ConfigError",
    message="metadata key ('lr', 1) is not a non-empty string: name metadata keys with text",
    left=LEFT_SAVER,
)
def test_a_metadata_key_that_is_not_text_is_refused_before_the_pending_record(row: Row, world: World) -> None:
    saver = world.saver(pre_upload=[_with_metadata(("lr", 1), 0.1)])
    before = world.snapshot()
    with raises(row):
        fit(saver)
    assert world.snapshot() == before


@case(
    group=SCORES,
    id="pre-upload-none",
    input='TrackerSaver("./ckpt", pre_upload=None)',
    error="none",
    message="accepted: no callbacks, as Ignite's own optional arguments take None (before the fix: TypeError: "
    "'NoneType' object is not iterable)",
    left="the saved object and its live record",
)
def test_pre_upload_none_means_no_callbacks_and_the_save_goes_on(row: Row, world: World) -> None:
    saver = world.saver(pre_upload=None, post_upload=None)
    fit(saver)
    assert len(saver.records(live=True)) == 1


@case(
    group=SCORES,
    id="pre-upload-one-callable",
    input='TrackerSaver("./ckpt", pre_upload=add_tag)  # one callable, not a list',
    error="ConfigTypeError",
    message="pre_upload=<function …> is not a list of callbacks: pass a list, pre_upload=[callback], or None for none",
    left=LEFT_NOTHING,
)
def test_one_callable_as_pre_upload_is_refused_asking_for_a_list(row: Row, world: World) -> None:
    def add_tag(info: UploadInfo) -> UploadInfo:
        info.tags.append("x")
        return info

    with raises(row):
        world.saver(pre_upload=add_tag)
    assert world.snapshot() == ({}, [])


# ------------------------------------------------------------------ text in names


TEXT = "Text in names"


@case(
    group=TEXT,
    id="score-name-nul",
    input='Checkpoint(..., score_function=lambda e: 0.9, score_name="s\\x00n")',
    error="ConfigError",
    message="score_name (Checkpoint's) 's\\x00n' holds U+0000 (NUL) at character 2, a NUL, which no file name or C string "
    "can hold: remove it " + RULE,
    left=LEFT_SAVER
    + " (raised at the first save, before a record or a byte is written; before the fix the record went "
    "live, then the dirname view failed, and every later save of the stream with it)",
)
def test_a_nul_in_the_score_name_is_refused_at_the_first_save_and_the_stream_goes_on(row: Row, world: World) -> None:
    saver = world.saver()
    before = world.snapshot()
    with raises(row):
        fit(saver, score_function=lambda engine: 0.9, score_name="s\x00n")
    assert world.snapshot() == before
    fit(saver, score_function=lambda engine: 0.9, score_name="val_acc")  # the stream is not broken
    assert [r.name for r in saver.records(live=True)] == ["model_val_acc=0.9000.pt"]
    world.assert_truthful()


@case(
    group=TEXT,
    id="project-not-utf8",
    input='TrackerSaver("./ckpt", project="p\\ud800")  # a lone surrogate: how Python holds bytes that are not UTF-8',
    error="ConfigError",
    message="project 'p\\ud800' holds U+D800 at character 2, a lone surrogate: the text is not valid UTF-8 (bytes Python "
    "could not decode): pass it as UTF-8 text " + RULE,
    left=LEFT_NOTHING + " (before the fix: UnicodeEncodeError)",
)
def test_a_project_that_is_not_utf8_is_refused_before_anything_is_created(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver(world.out, project="p\ud800", registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    group=TEXT,
    id="saved-name-with-escape-sequences",
    input='pre_upload=[lambda info: setattr(info, "name", "best\\x1b[1A\\rfake") or info]',
    error="ConfigError",
    message="record name of 'model_1.pt' 'best\\x1b[1A\\rfake' holds U+001B (ESC) at character 5, a control character, "
    "which can rewrite what a terminal shows: remove it " + RULE,
    left=LEFT_SAVER + " (the rule `rename` follows: before the fix a save took ESC, CR and LF that a rename refused)",
)
def test_a_record_name_with_terminal_escapes_from_a_callback_is_refused(row: Row, world: World) -> None:
    def name(info: UploadInfo) -> UploadInfo:
        info.name = "best\x1b[1A\rfake"
        return info

    saver = world.saver(pre_upload=[name])
    before = world.snapshot()
    with raises(row):
        fit(saver)
    assert world.snapshot() == before


# ------------------------------------------------------------------ what is saved, and loading it


CHECKPOINTS = "Checkpoints and loading"


class LambdaOnSecondSave:
    """A to_save object whose state holds a lambda from its second save on."""

    def __init__(self) -> None:
        self.saves = 0

    def state_dict(self) -> dict[str, Any]:
        self.saves += 1
        return {"fn": (lambda x: x) if self.saves > 1 else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


@case(
    group=CHECKPOINTS,
    id="checkpoint-with-a-lambda",
    input="to_save={'model': model, 'extra': obj}  # obj.state_dict() holds a lambda",
    error="SerializationError",
    message="torch.save could not serialize the checkpoint for 'p/r/checkpoint.slot0.pt': …; put only "
    "state_dict()-able objects in Checkpoint's to_save",
    left="the previous checkpoint's bytes and live record; the new record `failed`; no temp file. "
    "Never a TypeError, which Ignite would swallow by retrying without metadata",
)
def test_a_checkpoint_holding_a_lambda_fails_as_a_serialization_error_and_keeps_the_previous_one(
    row: Row, world: World
) -> None:
    saver = world.saver()
    trainer = fit(saver, {"model": model(), "extra": LambdaOnSecondSave()})
    before = world.snapshot()
    with raises(row):
        trainer.run([0], max_epochs=2)
    world.assert_one_failed_record_added(before)


def _gpu_machine_save(real_save: Callable[..., None]) -> Callable[..., None]:
    """``torch.save`` as on a machine with CUDA: the archive places every storage on ``cuda:0``.

    A CUDA tensor cannot be made here, so the one thing that differs in the bytes, the storage
    location in ``data.pkl``, is written as such a machine would write it.
    """

    def save(obj: Any, f: Any) -> None:
        buf = io.BytesIO()
        real_save(obj, buf)
        out = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src, zipfile.ZipFile(out, "w") as dst:
            for info in src.infolist():
                body = src.read(info.filename)
                if info.filename.endswith("/data.pkl"):
                    assert b"X\x03\x00\x00\x00cpu" in body
                    body = body.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
                dst.writestr(info, body)
        f.write(out.getvalue())

    return save


def _cuda_record(world: World, monkeypatch: pytest.MonkeyPatch) -> tuple[str, torch.nn.Module]:
    """A live record whose bytes are a checkpoint written on a CUDA machine; its model."""
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: a CUDA checkpoint loads here with any map_location")
    saver = world.saver()
    net = model()
    with monkeypatch.context() as patch:
        patch.setattr(torch, "save", _gpu_machine_save(torch.save))
        fit(saver, {"model": net})
    (record,) = saver.records(live=True)
    return record.id, net


@case(
    group=CHECKPOINTS,
    id="cuda-save-on-a-cpu-only-machine",
    input="to_save={'model': model.cuda()}  # on a machine without CUDA",
    error="none",
    message="cannot happen: torch refuses to make a CUDA tensor there (…), so no such checkpoint can be saved",
    left="nothing (with CUDA, the checkpoint saves as any other and loads on a CPU with the default map_location)",
)
def test_a_cuda_model_cannot_even_be_made_on_a_cpu_only_machine(row: Row, world: World) -> None:
    if not torch.cuda.is_available():
        with pytest.raises((AssertionError, RuntimeError)):
            model().cuda()
        return
    saver = world.saver()
    fit(saver, {"model": model().cuda()})
    net = model()
    load_checkpoint(saver.records(live=True)[0], {"model": net}, registry=saver.registry)
    assert net.weight.device.type == "cpu"


@case(
    group=CHECKPOINTS,
    id="cuda-load-on-a-cpu-only-machine",
    input="load_checkpoint(id, {'model': model})  # saved with CUDA tensors, loaded without CUDA",
    error="none",
    message="accepted: load_checkpoint's default map_location='cpu' maps every tensor to the CPU",
    left="the model loaded with the saved weights; the record and its object unchanged",
)
def test_a_cuda_checkpoint_loads_on_a_cpu_only_machine_by_default(
    row: Row, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_id, saved = _cuda_record(world, monkeypatch)
    net = torch.nn.Linear(4, 2)
    load_checkpoint(record_id, {"model": net}, registry=world.db)
    assert torch.equal(net.weight, saved.weight) and net.weight.device.type == "cpu"


@case(
    group=CHECKPOINTS,
    id="cuda-load-with-map-location-none",
    input="load_checkpoint(id, {'model': model}, map_location=None)  # CUDA tensors, no CUDA",
    error="SerializationError",
    message="torch.load could not read record … ('model_1.pt'): Attempting to deserialize object on a CUDA device but "
    "torch.cuda.is_available() is False. …; the checkpoint holds CUDA tensors and this machine has no CUDA: "
    "load it with map_location='cpu' (load_checkpoint's default)",
    left="the model untouched; the record and its object unchanged",
)
def test_a_cuda_checkpoint_loaded_with_map_location_none_without_cuda_names_the_fix(
    row: Row, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_id, _ = _cuda_record(world, monkeypatch)
    net = torch.nn.Linear(4, 2)
    untouched = net.weight.detach().clone()
    before = world.snapshot()
    with raises(row):
        load_checkpoint(record_id, {"model": net}, registry=world.db, map_location=None)
    assert torch.equal(net.weight, untouched) and world.snapshot() == before


@case(
    group=CHECKPOINTS,
    id="record-does-not-exist",
    input="load_checkpoint(99, {'model': model})",
    error="RecordNotFoundError",
    message="record 99 does not exist in sqlite:///…/registry.db: see `tracker-saver models list` for ids",
    left="the registry as it was",
)
def test_loading_a_record_that_does_not_exist_says_where_to_find_ids(row: Row, world: World) -> None:
    fit(world.saver())
    before = world.snapshot()
    with raises(row):
        load_checkpoint(99, {"model": model()}, registry=world.db)
    assert world.snapshot() == before


@case(
    group=CHECKPOINTS,
    id="load-into-a-model-of-the-wrong-shape",
    input="load_checkpoint(id, {'model': nn.Linear(8, 2)})  # saved from nn.Linear(4, 2)",
    error="ConfigError",
    message="record … ('model_1.pt') does not fit to_load, so nothing was loaded: to_load['model'] (Linear): weight is "
    "(2, 4) in the checkpoint, (2, 8) in the model: build the objects as they were when the checkpoint was "
    "saved, or load another record",
    left="the model untouched (checked before load_state_dict, which would copy the bias and then raise)",
)
def test_loading_into_a_model_of_another_shape_loads_nothing(row: Row, world: World) -> None:
    saver = world.saver()
    fit(saver)
    wider = torch.nn.Linear(8, 2)
    untouched = {k: v.clone() for k, v in wider.state_dict().items()}
    with raises(row):
        load_checkpoint(saver.records(live=True)[0], {"model": wider}, storage=saver.storage)
    assert all(torch.equal(v, untouched[k]) for k, v in wider.state_dict().items())


@case(
    group=CHECKPOINTS,
    id="load-an-object-the-checkpoint-lacks",
    input="load_checkpoint(id, {'model': m, 'optimizer': o, 'trainer': t})  # saved without the trainer",
    error="ConfigError",
    message="record … ('checkpoint_1.pt') does not fit to_load, so nothing was loaded: to_load['trainer'] is not in "
    "the checkpoint, which holds ['model', 'optimizer']: build the objects as they were when …",
    left="the model and the optimizer untouched",
)
def test_loading_an_object_the_checkpoint_lacks_loads_nothing(row: Row, world: World) -> None:
    saver = world.saver()
    net = model()
    fit(saver, {"model": net, "optimizer": torch.optim.SGD(net.parameters(), lr=0.1)})
    other = torch.nn.Linear(4, 2)
    untouched = other.weight.detach().clone()
    to_load = {"model": other, "optimizer": torch.optim.SGD(other.parameters(), lr=0.5), "trainer": Engine(print)}
    with raises(row):
        load_checkpoint(saver.records(live=True)[0], to_load, storage=saver.storage)
    assert torch.equal(other.weight, untouched) and to_load["optimizer"].param_groups[0]["lr"] == 0.5


@case(
    group=CHECKPOINTS,
    id="load-an-evicted-record",
    input="load_checkpoint(old_id, to_load)  # Ignite has since replaced it (n_saved=1)",
    error="RegistryError",
    message="record … ('model_1.pt') is evicted: its slot may hold other bytes; use a live record "
    "(tracker-saver models list --live)",
    left="the newer record and its object, live; the model untouched",
)
def test_loading_an_evicted_record_is_refused_pointing_to_live_records(row: Row, world: World) -> None:
    saver = world.saver()
    fit(saver, epochs=2)
    first = saver.records()[0]
    assert first.state is RecordState.EVICTED
    with raises(row):
        load_checkpoint(first.id, {"model": model()}, registry=world.db)
    world.assert_truthful()


# ------------------------------------------------------------------ S3 (the Ceph gateway)


S3 = "S3 (Ceph RGW)"


LEFT_S3 = "nothing: no registry file, no object under the prefix (raised by `check()` in the constructor)"


def _objects(client: Any, bucket: str, prefix: str = "") -> list[str]:
    return sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []))


def _prefix(uri: str) -> str:
    return uri.split("/", 3)[3] + "/"


@pytest.mark.ceph
@case(
    group=S3,
    id="s3-bad-secret",
    input='AWS_SECRET_ACCESS_KEY=wrong  TrackerSaver("s3://BUCKET/PREFIX")',
    error="ConfigError",
    message="checking output_uri: writing s3://…/.tracker-saver-check failed: credentials were refused by http://… "
    "(SignatureDoesNotMatch): check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or the profile",
    left=LEFT_S3 + "; the secret appears in no message, repr or cause",
)
def test_a_wrong_s3_secret_is_refused_at_construction_and_never_shown(
    row: Row, world: World, s3_output_uri: str, s3_bucket: str, ceph_s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRONG_SECRET)
    with raises(row) as caught:
        world.saver(s3_output_uri)
    assert WRONG_SECRET not in texts(caught.value)
    assert world.snapshot() == ({}, []) and _objects(ceph_s3.client(), s3_bucket, _prefix(s3_output_uri)) == []


@pytest.mark.ceph
@case(
    group=S3,
    id="s3-access-denied",
    input='TrackerSaver("s3://BUCKET/PREFIX", storage_options={"aws_access_key_id": …})  # a user without rights on BUCKET',
    error="ConfigError",
    message="access denied by http://… (AccessDenied on PutObject): grant the credentials s3:PutObject on s3://…/*, "
    "or use other credentials",
    left=LEFT_S3,
)
def test_s3_credentials_without_rights_on_the_bucket_are_refused_naming_the_permission(
    row: Row, world: World, s3_output_uri: str, s3_bucket: str, ceph_s3: Any
) -> None:
    access, secret = ceph_s3.create_user(f"stranger-{uuid.uuid4().hex[:6]}")
    options = {"aws_access_key_id": access, "aws_secret_access_key": secret}
    with raises(row) as caught:
        world.saver(s3_output_uri, storage_options=options)
    assert secret not in texts(caught.value)
    assert world.snapshot() == ({}, []) and _objects(ceph_s3.client(), s3_bucket, _prefix(s3_output_uri)) == []


@pytest.mark.ceph
@case(
    group=S3,
    id="s3-missing-bucket",
    input='TrackerSaver("s3://no-such-bucket/team")',
    error="ConfigError",
    message="bucket 'no-such-bucket-…' does not exist at endpoint http://…: create it (aws s3 mb s3://no-such-bucket-…) "
    "or fix output_uri",
    left=LEFT_S3 + "; the bucket is not created",
)
def test_a_missing_bucket_is_refused_at_construction_and_not_created(
    row: Row, world: World, s3_env: dict[str, str], ceph_s3: Any
) -> None:
    bucket = f"no-such-bucket-{uuid.uuid4().hex[:8]}"
    with raises(row):
        world.saver(f"s3://{bucket}/team")
    buckets = [b["Name"] for b in ceph_s3.client().list_buckets()["Buckets"]]
    assert world.snapshot() == ({}, []) and bucket not in buckets


@pytest.mark.ceph
@case(
    group=S3,
    id="s3-wrong-region",
    input='TrackerSaver("s3://BUCKET/PREFIX", storage_options={"region_name": "eu-west-1"})',
    error="none",
    message="accepted by Ceph RGW, whose single zonegroup serves any signing region (on AWS, botocore's region "
    "redirector re-signs for the bucket's region)",
    left="the saved object and its live record",
)
def test_a_wrong_s3_region_is_accepted_by_ceph_and_the_checkpoint_loads(
    row: Row, world: World, s3_output_uri: str
) -> None:
    saver = world.saver(s3_output_uri, storage_options={"region_name": "eu-west-1"})
    trained = torch.nn.Linear(4, 2)
    fit(saver, {"model": trained})
    (record,) = saver.records(live=True)
    loaded = torch.nn.Linear(4, 2)
    load_checkpoint(record, {"model": loaded}, storage=saver.storage)
    assert all(
        torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), trained.state_dict().values(), strict=True)
    )


@case(
    group=S3,
    id="s3-endpoint-down",
    input='TrackerSaver("s3://ckpts/team", storage_options={"endpoint_url": "http://127.0.0.1:PORT"})  # nothing listens',
    error="ConfigError",
    message="checking output_uri: writing s3://ckpts/team/.tracker-saver-check failed: cannot reach endpoint "
    "http://127.0.0.1:… (EndpointConnectionError): check AWS_ENDPOINT_URL / endpoint_url and that the server is up",
    left=LEFT_NOTHING + " (max_attempts and connect_timeout bound how long it tries)",
)
def test_an_s3_endpoint_where_nothing_listens_is_refused_at_construction(
    row: Row, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("boto3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRONG_SECRET)
    options = {"endpoint_url": f"http://127.0.0.1:{free_port()}", "max_attempts": 2, "connect_timeout": 1}
    with raises(row) as caught:
        world.saver("s3://ckpts/team", storage_options=options)
    assert WRONG_SECRET not in texts(caught.value)
    assert world.snapshot() == ({}, [])


@pytest.mark.ceph
@case(
    group=S3,
    id="s3-versioned-bucket",
    input='TrackerSaver("s3://VERSIONED/team")  # bucket versioning is on; 3 saves, n_saved=1',
    error="none",
    message="accepted: the current-version footprint holds (1 object); each overwrite of a slot key keeps the old bytes "
    "as a noncurrent version (3 versions of the slot key)",
    left="1 current object and its live record, plus noncurrent versions until a lifecycle rule "
    "(NoncurrentVersionExpiration) removes them; see below",
)
def test_a_versioned_bucket_keeps_one_current_object_per_slot(
    row: Row, world: World, s3_env: dict[str, str], ceph_s3: Any
) -> None:
    client = ceph_s3.client()
    bucket = f"ts-versioned-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    try:
        client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        saver = world.saver(f"s3://{bucket}/team")
        fit(saver, epochs=3)
        assert _objects(client, bucket, "team/p/") == ["team/p/r/model.slot0.pt"]
        versions = client.list_object_versions(Bucket=bucket, Prefix="team/p/")["Versions"]
        assert [(v["Key"], v["IsLatest"]) for v in versions].count(("team/p/r/model.slot0.pt", False)) == 2
        assert len(versions) == 3
        (record,) = saver.records(live=True)
        load_checkpoint(record, {"model": model()}, storage=saver.storage)
    finally:
        listing = client.list_object_versions(Bucket=bucket)
        for item in listing.get("Versions", []) + listing.get("DeleteMarkers", []):
            client.delete_object(Bucket=bucket, Key=item["Key"], VersionId=item["VersionId"])
        client.delete_bucket(Bucket=bucket)


# ------------------------------------------------------------------ ClearML (the stand-in)


CLEARML = "ClearML registry"


def _fresh_clearml_login(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next registry log in again (the SDK keeps one session per process)."""
    from clearml.backend_interface.base import InterfaceBase

    monkeypatch.setattr(InterfaceBase, "_default_session", None)
    monkeypatch.delenv("CLEARML_AUTH_TOKEN", raising=False)


@pytest.mark.clearml
@case(
    group=CLEARML,
    id="clearml-server-down",
    input='TrackerSaver("./ckpt", registry="clearml")  # CLEARML_API_HOST answers nothing',
    error="ConfigError",
    message="ClearML registry cannot connect (…): check that the ClearML server is up, and run `clearml-init` or set "
    "CLEARML_API_HOST, CLEARML_API_ACCESS_KEY and CLEARML_API_SECRET_KEY",
    left=LEFT_NOTHING + " (the ClearML registry is opened before output_uri is checked)",
)
def test_a_clearml_server_that_is_down_is_refused_before_any_folder_exists(
    row: Row, world: World, clearml_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fresh_clearml_login(monkeypatch)
    monkeypatch.setenv("CLEARML_API_HOST", f"http://127.0.0.1:{free_port()}")
    with raises(row) as caught:
        world.saver(registry="clearml")
    assert os.environ["CLEARML_API_SECRET_KEY"] not in texts(caught.value)
    assert world.snapshot() == ({}, [])


@pytest.mark.clearml
@case(
    group=CLEARML,
    id="clearml-wrong-credentials",
    input='CLEARML_API_SECRET_KEY=wrong  TrackerSaver("./ckpt", registry="clearml")',
    error="ConfigError",
    message="the ClearML server refused the credentials (LoginError: …401…): check CLEARML_API_ACCESS_KEY and "
    "CLEARML_API_SECRET_KEY, or the api.credentials of clearml.conf (`clearml-init` writes them)",
    left=LEFT_NOTHING + "; the secret appears in no message",
)
def test_wrong_clearml_credentials_are_refused_and_never_shown(
    row: Row, world: World, clearml_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fresh_clearml_login(monkeypatch)
    monkeypatch.setenv("CLEARML_API_SECRET_KEY", WRONG_SECRET)
    with raises(row) as caught:
        world.saver(registry="clearml")
    assert WRONG_SECRET not in texts(caught.value)
    assert world.snapshot() == ({}, [])


@pytest.mark.clearml
@case(
    group=CLEARML,
    id="clearml-read-only-project",
    input='TrackerSaver("./ckpt", project="shared", registry="clearml")  # the user may read "shared", not write it',
    error="RegistryError",
    message="ClearML registry clearml://…: claiming stream shared/r/model at file://… failed with 403/21 (Forbidden "
    "(modification not allowed)): the ClearML user of these credentials may not change this project; ask its "
    "owner for write access, or save to a project you own (TrackerSaver(project=...) or ClearMLRegistry(project_root=...))",
    left="the saver's empty output folder; no model in the project (raised at the first save, by the stream claim, "
    "before a byte is written)",
)
def test_a_clearml_project_the_user_may_not_write_fails_the_first_save_at_the_claim(
    row: Row, world: World, clearml_standin: Any
) -> None:
    from tracker_saver.integrations.clearml.registry import ClearMLRegistry

    root = f"tracker_saver-tests/{uuid.uuid4().hex[:12]}"
    clearml_standin.read_only(f"{root}/shared")
    saver = TrackerSaver(world.out, project="shared", run="r", registry=ClearMLRegistry(project_root=root))
    before = world.files()
    with raises(row):
        fit(saver)
    assert world.files() == before and clearml_standin.models_in(f"{root}/shared") == []
