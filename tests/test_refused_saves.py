"""A refused save leaves nothing behind, and every value that cannot be stored is one clear error (issue 51).

A value a record cannot hold (an int beyond 64 bits, a 30 MB string) is a ``ConfigError`` naming
the field, its size and the limit, raised after the callbacks and before the stream is claimed:
no owner object, no record, no temp file, so another registry can save the stream. A save that
the registry refuses before its first byte takes back the owner object it wrote. Queries have
limits too, and what is read from another registry's owner object is shown escaped. Each case
runs through a real Ignite ``Checkpoint`` and ``Engine``, a real folder (or Ceph RGW) and SQLite.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.helpers import Target, model, train
from tracker_saver import ConfigError, RegistryError, StreamOwnedError, TrackerSaver, find_models
from tracker_saver.cli.main import main
from tracker_saver.core.records import StreamId, UploadInfo
from tracker_saver.registry.sqlite import SQLiteRegistry
from tracker_saver.save.ownership import owner_key
from tracker_saver.ui.app import create_app


@pytest.fixture(params=["local", pytest.param("ceph", marks=pytest.mark.ceph)])
def bucket(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """One output_uri that two people share: a folder, or a prefix in a Ceph RGW bucket."""
    if request.param == "local":
        return str(tmp_path / "shared")
    return str(request.getfixturevalue("s3_output_uri"))


def _alice_and_bob(bucket: str, tmp_path: Path) -> tuple[Target, Target]:
    return Target(bucket, str(tmp_path / "alice.db")), Target(bucket, str(tmp_path / "bob.db"))


def _everything(target: Target) -> list[str]:
    """Every object at output_uri (owner objects included) and every unfinished write."""
    storage = target.storage()
    return sorted(o.key for o in storage.list() + storage.list(".tracker_saver/")) + [s.ref for s in storage.staged()]


def _files(root: Path) -> list[str]:
    """Every file under a local output folder (temp files included)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _adding(metadata: dict[str, Any]) -> Any:
    """A pre-upload callback that adds ``metadata`` to every save's."""

    def callback(info: UploadInfo) -> UploadInfo:
        info.metadata.update(metadata)
        return info

    return callback


@pytest.mark.parametrize("async_upload", [False, True], ids=["sync", "async"])
def test_an_int_beyond_64_bits_from_a_callback_is_a_config_error_and_leaves_the_stream_unclaimed(
    bucket: str, tmp_path: Path, async_upload: bool
) -> None:
    alice, bob = _alice_and_bob(bucket, tmp_path)
    alice.saver_options = {"async_upload": async_upload}  # async: raised on the worker, re-raised at the run's end
    with pytest.raises(
        ConfigError,
        match=r"metadata\['big'\] is a 16610-bit int, outside the range a record holds \(-2\*\*63 to 2\*\*63-1",
    ):
        train(alice.saver(pre_upload=[_adding({"big": 10**5000})]), {"model": model()}, n_saved=2, epochs=1)
    assert _everything(alice) == []  # no owner object, no slot object, no unfinished write
    assert find_models(registry=alice.registry) == []
    train(bob.saver(), {"model": model()}, n_saved=2, epochs=2).save_handler.close()  # another registry may save
    assert bob.counts() == {"model": 2}


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"note": "x" * (30 << 20)}, r"metadata\['note'\] is a str of 31,457,280 bytes \(UTF-8\): .* at most 65,536"),
        ({"note": "é" * 32769}, r"metadata\['note'\] is a str of 65,538 bytes"),  # 2 bytes a character in UTF-8
        (
            {f"k{i}": "y" * 60000 for i in range(18)},
            r"metadata of \d+ keys holds over 1,044,480 bytes with .* at most 1,048,576 bytes \(1 MiB\) in all, 4,096 of",
        ),
        ({f"k{i:02}": "y" * 65500 for i in range(16)}, r"holds over 1,044,480 bytes .* 4,096 of them kept for"),
        ({"k" * 1001: 1}, r"metadata key 'kkk.*' is 1001 characters long: a key has at most 1000"),
        ({"step": 2**63}, r"metadata\['step'\] is a 64-bit int, outside the range"),
    ],
    ids=[
        "30-mb-string",
        "utf-8-bytes-count",
        "record-over-1-mib",
        "no-room-for-the-saver-keys",
        "long-key",
        "int-over-int64",
    ],
)
def test_a_value_over_its_limit_is_refused_before_a_byte_naming_the_field_its_size_and_the_limit(
    tmp_path: Path, metadata: dict[str, Any], message: str
) -> None:
    target = Target(str(tmp_path / "out"), str(tmp_path / "registry.db"))
    with pytest.raises(ConfigError, match=message):
        train(target.saver(pre_upload=[_adding(metadata)]), {"model": model()}, n_saved=1, epochs=1)
    assert _files(tmp_path / "out") == [] and find_models(registry=target.registry) == []
    assert os.path.getsize(target.registry) < 1 << 20  # before the fix: 184 MB for a 30 MB string


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "n" * 256}, r"record name 'nnn.*' of checkpoint 'model_1.pt' is 256 characters long: .* at most 255"),
        (
            {"tags": ["t" * 201]},
            r"tag 'ttt.*' of checkpoint 'model_1.pt' is 201 characters long: a tag has at most 200",
        ),
    ],
    ids=["name", "tag"],
)
def test_a_name_or_tag_a_callback_makes_too_long_is_refused_as_a_rename_or_the_ui_would(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    target = Target(str(tmp_path / "out"), str(tmp_path / "registry.db"))

    def callback(info: UploadInfo) -> UploadInfo:
        for field, value in change.items():
            setattr(info, field, value)
        return info

    with pytest.raises(ConfigError, match=message):
        train(target.saver(pre_upload=[callback]), {"model": model()}, n_saved=1, epochs=1)
    assert _files(tmp_path / "out") == [] and find_models(registry=target.registry) == []


def test_a_command_line_over_64_kib_is_recorded_cut_and_never_fails_a_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["train.py", *(f"data/img_{i:05}.jpg" for i in range(6000))]  # 114 KB, as a shell glob makes
    monkeypatch.setattr(sys, "argv", argv)
    target = Target(str(tmp_path / "out"), str(tmp_path / "registry.db"))
    train(target.saver(), {"model": model()}, n_saved=1, epochs=1).save_handler.close()
    (record,) = find_models(registry=target.registry)
    command = str(record.metadata["command"])
    assert command.startswith("train.py data/img_00000.jpg") and command.endswith("… (114,008 bytes in all, cut)")
    assert len(command.encode()) <= 65536


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[list[sqlite3.Connection]]:
    """Where a callback puts the connection that holds the registry's write lock; closed at the end."""
    held: list[sqlite3.Connection] = []
    yield held
    for conn in held:
        conn.close()


def test_a_save_the_registry_refuses_before_its_first_byte_takes_back_its_owner_object(
    bucket: str, tmp_path: Path, locked: list[sqlite3.Connection]
) -> None:
    alice, bob = _alice_and_bob(bucket, tmp_path)
    SQLiteRegistry(alice.registry).close()

    def lock(info: UploadInfo) -> UploadInfo:
        """Another writer takes the registry between the stream's claim and the pending record (a cron job)."""
        conn = sqlite3.connect(alice.registry, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        locked.append(conn)
        return info

    saver = Target(bucket, SQLiteRegistry(alice.registry, timeout=0.2)).saver(pre_upload=[lock])
    with pytest.raises(RegistryError, match="is locked by another process"):
        train(saver, {"model": model()}, n_saved=2, epochs=1)
    assert _everything(alice) == []  # before the fix: the owner object stayed, and Bob was refused
    train(bob.saver(), {"model": model()}, n_saved=2, epochs=2).save_handler.close()
    assert bob.counts() == {"model": 2}


def test_the_take_over_command_printed_for_names_starting_with_a_dash_works_as_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, alice, bob = str(tmp_path / "shared"), str(tmp_path / "alice.db"), str(tmp_path / "bob.db")
    names = {"project": "-x", "run": "--rm"}  # a space would make argparse read either as a value
    train(TrackerSaver(out, registry=alice, **names), {"model": model()}, n_saved=1).save_handler.close()
    refused_saver = TrackerSaver(out, registry=bob, **names)
    with pytest.raises(StreamOwnedError) as refused:
        train(refused_saver, {"model": model()}, n_saved=1)
    refused_saver.close()
    argv = shlex.split(str(refused.value).rsplit("hand the stream over: `", 1)[1].rstrip("`"))
    assert argv[:3] == ["tracker-saver", "streams", "take-over"]
    assert main([*argv[1:], "--registry", bob]) == 0, capsys.readouterr().err  # before: "expected one argument"
    assert "now owned by sqlite:///" in capsys.readouterr().out
    train(TrackerSaver(out, registry=bob, **names), {"model": model()}, n_saved=1).save_handler.close()


def test_control_characters_in_another_registry_owner_object_reach_no_message_raw(tmp_path: Path) -> None:
    target = Target(str(tmp_path / "out"), str(tmp_path / "registry.db"))
    forged = {"registry_id": "f" * 32, "registry": "sqlite:///x\x1b]0;owned\x07.db", "host": "h\x1b[2J",
              "claimed_at": 0.0}  # fmt: skip
    stream = StreamId(target.storage().uri, "p", "r", "model")
    target.storage().put_stream(owner_key(stream), io.BytesIO(json.dumps(forged).encode()))
    with pytest.raises(StreamOwnedError) as refused:
        train(target.saver(), {"model": model()}, n_saved=1, epochs=1)
    text = f"{refused.value} {refused.value.owner}"
    assert "\x1b" not in text and "\x07" not in text
    assert "sqlite:///x\\x1b]0;owned\\x07.db" in text and "claimed from h\\x1b[2J" in text


@pytest.mark.parametrize(
    ("output_uri", "registry", "message"),
    [
        ("out\x1b[2J", "registry.db", r"output_uri '.*out\\x1b\[2J' holds U\+001B \(ESC\)"),
        ("out\udcff", "registry.db", r"output_uri '.*out\\udcff' holds U\+DCFF at .* a lone surrogate"),
        ("out", "reg\x1b]0;x\x07.db", r"registry 'reg\\x1b\]0;x\\x07.db' holds U\+001B \(ESC\)"),
        ("out", "reg\udcff.db", r"registry 'reg\\udcff.db' holds U\+DCFF"),
    ],
    ids=["output-escape", "output-lone-surrogate", "registry-escape", "registry-lone-surrogate"],
)
def test_a_control_character_or_lone_surrogate_in_output_uri_or_registry_is_refused_shown_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output_uri: str, registry: str, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=message):
        Target(output_uri, registry).saver()
    assert os.listdir(tmp_path) == []  # nothing created


def test_a_control_character_in_the_registry_of_the_environment_is_refused_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRACKER_SAVER_REGISTRY", "reg\x1b[2J.db")
    with pytest.raises(ConfigError, match=r"registry 'reg\\x1b\[2J.db' holds U\+001B \(ESC\)"):
        Target("out", None).saver()
    assert os.listdir(tmp_path) == []


def test_a_registry_uri_with_a_control_character_in_its_password_is_refused_without_showing_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        Target(str(tmp_path / "out"), "mlflow:http://user:SECRET\x1b@127.0.0.1:1").saver()
    assert "SECRET" not in str(refused.value) and refused.value.__context__ is None
    assert "user:password@ part" in str(refused.value)


@pytest.fixture
def saved(tmp_path: Path) -> Target:
    """A registry with three checkpoints (global_step 1, 2, 3)."""
    target = Target(str(tmp_path / "out"), str(tmp_path / "registry.db"))
    train(target.saver(), {"model": model()}, n_saved=3, epochs=3).save_handler.close()
    return target


def test_a_where_with_990_values_finds_its_records_and_one_over_the_limit_is_one_error_line(
    saved: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    values = ",".join(map(str, range(990)))
    assert [r.global_step for r in find_models(where=f"global_step in {values}", registry=saved.registry)] == [1, 2, 3]
    assert main(["models", "list", "--registry", saved.registry, "--where", f"global_step in {values}", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 3  # before the fix: "Expression tree is too large"
    too_many = ",".join(map(str, range(1001)))
    assert main(["models", "list", "--registry", saved.registry, "--where", f"global_step in {too_many}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tracker-saver: error: where names 1001 values: a query names at most 1000") and (
        err.count("\n") == 1
    )


def test_the_ui_answers_a_query_over_its_limits_with_422_and_the_message(saved: Target) -> None:
    client = TestClient(create_app(saved.registry), raise_server_exceptions=False)
    ones = "global_step in " + ",".join(["1"] * 990)  # within the UI's 2000 characters of where
    response = client.get("/api/models", params={"where": ones})
    assert response.status_code == 200 and len(response.json()["items"]) == 1  # before: 409, tree too large
    response = client.get("/api/models", params={"where": " and ".join(["slot>=0"] * 101)})
    assert response.status_code == 422 and "where has 101 conditions: a query has at most 100" in response.text


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"where": " and ".join(["global_step>0"] * 101)}, "where has 101 conditions: a query has at most 100"),
        ({"where": {"global_step": ("in", list(range(1001)))}}, "where names 1001 values"),
        ({"where": {"prefix": "x" * 65537}}, "where value of 'prefix' is 65,537 bytes long"),
        ({"order_by": ["score", "global_step"] * 5}, "order_by has 10 keys: sort by at most 8"),
    ],
    ids=["101-conditions", "1001-values", "long-value", "10-sort-keys"],
)
def test_a_query_over_its_limits_is_a_config_error_naming_the_limit(
    saved: Target, query: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        find_models(registry=saved.registry, **query)  # 20 sort keys crashed the process (SQLite 3.40)


def test_a_refused_save_leaves_the_stream_of_a_registry_with_records_owned(tmp_path: Path) -> None:
    """Values at their limits are kept exactly; one over is refused, and the owner object goes only for a
    stream with no record: a stream that saved once stays its registry's."""
    target = Target(str(tmp_path / "out"), str(tmp_path / "registry.db"))
    kept = {"note": "é" * 32768, "low": -(2**63), "high": 2**63 - 1, "k" * 1000: "v", "up": float("inf")}
    train(target.saver(pre_upload=[_adding(kept)]), {"model": model()}, n_saved=2, epochs=1).save_handler.close()
    (record,) = find_models(registry=target.registry)
    assert {k: record.metadata[k] for k in kept} == kept
    before = _everything(target)
    with pytest.raises(ConfigError, match=r"metadata\['high'\] is a 65-bit int"):
        train(target.saver(pre_upload=[_adding({"high": 2**64})]), {"model": model()}, n_saved=2, epochs=1)
    assert _everything(target) == before and len(find_models(registry=target.registry)) == 1
