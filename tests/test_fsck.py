"""``tracker-saver fsck`` and ``repair`` on every backend, and their command line."""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.contracts.fsck import FsckContract
from tests.helpers import Target, Worker, model, train
from tracker_saver.cli.main import main
from tracker_saver.core.records import UploadInfo
from tracker_saver.fsck import check
from tracker_saver.registry import open_registry
from tracker_saver.storage.base import Storage
from tracker_saver.storage.local import TEMP_PREFIX, LocalStorage


class TestLocalFsck(FsckContract):
    @pytest.fixture
    def target(self, local_target):
        return local_target

    def stage_leftover(self, storage: Storage, key: str) -> None:
        assert isinstance(storage, LocalStorage)
        path = storage.root / key
        (path.parent / f"{TEMP_PREFIX}{path.name}.k1ll3d").write_bytes(b"half a checkpoint")


@pytest.mark.ceph
class TestCephFsck(FsckContract):
    @pytest.fixture
    def target(self, s3_output_uri, tmp_path):
        return Target(output_uri=s3_output_uri, registry=str(tmp_path / "registry.db"))

    def stage_leftover(self, storage: Storage, key: str) -> None:
        client, bucket = storage._client, storage.bucket  # type: ignore[attr-defined]
        client.create_multipart_upload(Bucket=bucket, Key=storage._s3_key(key))  # type: ignore[attr-defined]


@pytest.mark.clearml
class TestClearMLFsck(TestLocalFsck):
    @pytest.fixture
    def target(self, clearml_server, clearml_project, tmp_path):
        return Target(output_uri=str(tmp_path / "output"), registry=f"clearml:{clearml_project}")


@pytest.mark.ceph
@pytest.mark.clearml
class TestClearMLCephFsck(TestCephFsck):
    @pytest.fixture
    def target(self, s3_output_uri, clearml_server, clearml_project):
        return Target(output_uri=s3_output_uri, registry=f"clearml:{clearml_project}")


def _cli(*args: str, registry: str) -> tuple[int, str]:
    """``tracker-saver ARGS`` with the registry from the environment: its exit status and output.

    In this process, through the CLI's ``main`` (a new interpreter per command cost 0.3 s of CPU
    each, ten times; the command reads only its arguments and the environment either way).
    """
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as env:  # set for the call, then restored
        env.setenv("TRACKER_SAVER_REGISTRY", registry)
        env.setenv("COLUMNS", "200")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = main(list(args))
    return code, out.getvalue()


def test_the_cli_exits_non_zero_on_problems_prints_a_table_and_json_and_repairs(local_target) -> None:
    with Worker(local_target) as worker:
        worker.epoch(0.5)
        assert worker.epoch(0.6, fault="kill-post", stream="checkpoint") is None
    code, out = _cli("fsck", registry=local_target.registry)
    assert code == 1 and "pending" in out and "promote it" in out and "2 streams checked: 1 problem" in out, out
    code, out = _cli("fsck", "--json", registry=local_target.registry)
    report = json.loads(out)
    assert code == 1 and report["problems"] == 1 and report["findings"][0]["fix"] == "promote it"
    code, out = _cli("repair", "--dry-run", registry=local_target.registry)
    assert code == 1 and "would promote record" in out and "after repair" not in out, out
    assert _cli("fsck", registry=local_target.registry)[0] == 1  # the dry run changed nothing
    code, out = _cli("repair", registry=local_target.registry)
    assert code == 0 and "promoted record" in out and "no problems" in out, out
    code, out = _cli("fsck", "--deep", registry=local_target.registry)
    assert code == 0 and "2 streams checked: no problems" in out, out


def test_repair_exits_non_zero_while_an_orphan_is_kept(local_target, capsys) -> None:
    saver = local_target.saver()
    train(saver, {"model": model()}, epochs=1)
    saver.close()
    orphan = os.path.join(local_target.output_uri, "p", "r", "model.slot7.pt")
    with open(orphan, "wb") as f:
        f.write(b"x")
    assert main(["--registry", local_target.registry, "repair"]) == 1
    assert "keep orphan" in capsys.readouterr().out and os.path.exists(orphan)
    assert main(["--registry", local_target.registry, "repair", "--delete-orphans"]) == 0
    assert not os.path.exists(orphan)


def test_a_stale_temp_file_is_reported_with_its_age(local_target, capsys) -> None:
    saver = local_target.saver()
    train(saver, {"model": model()}, epochs=1)
    saver.close()
    tmp = os.path.join(local_target.output_uri, "p", "r", f"{TEMP_PREFIX}model.slot0.pt.abcd")
    with open(tmp, "wb") as f:
        f.write(b"half")
    two_hours_ago = time.time() - 7200
    os.utime(tmp, (two_hours_ago, two_hours_ago))
    assert main(["--registry", local_target.registry, "fsck", "--json"]) == 1
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    assert finding["kind"] == "staged" and finding["fix"] == "remove it" and "started 7200 s ago" in finding["detail"]
    assert main(["--registry", local_target.registry, "repair"]) == 0 and not os.path.exists(tmp)


SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"


@pytest.fixture
def closed_endpoint(offline_env, monkeypatch) -> Iterator[str]:
    """An S3 endpoint on 127.0.0.1 that refuses connections (a bound port nobody listens on), with
    credentials whose secret must never show, and one attempt per request (no retries to wait for)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
        yield endpoint


def _saved_at(registry: str, output_uri: str, run: str) -> None:
    """A live record at ``output_uri``, as a training wrote it while the endpoint was up."""
    key = f"p/{run}/model.slot0.pt"
    with open_registry(registry) as reg:
        info = UploadInfo("p", run, "model", "model_1.pt", slot=0, key=key, output_uri=output_uri)
        reg.records.make_live(
            reg.records.create_pending(info, uri=f"{output_uri}/{key}").id, sha256="0" * 64, size=1893
        )


def test_fsck_checks_every_reachable_output_uri_and_reports_the_unreachable_one(local_target, closed_endpoint) -> None:
    saver = local_target.saver()
    train(saver, {"model": model()}, epochs=1)
    saver.close()
    with open(os.path.join(local_target.output_uri, "p", "r", "model.slot0.pt"), "ab") as f:
        f.write(b"appended")  # a lie at the reachable output_uri
    for run in ("r2", "r3"):  # two runs at the one that cannot be reached: each is reported
        _saved_at(local_target.registry, "s3://ckpts/team", run)
    with open_registry(local_target.registry) as registry:
        report = check(registry)
    assert sorted((f.kind, f.stream) for f in report.problems) == [
        ("lie", f"p/r/model at {Path(local_target.output_uri).resolve().as_uri()}"),
        ("unreachable", "p/r2/model at s3://ckpts/team"),
        ("unreachable", "p/r3/model at s3://ckpts/team"),
    ]
    unreachable = [f for f in report.findings if f.kind == "unreachable"]
    assert all("output_uri s3://ckpts/team could not be read" in f.detail for f in unreachable)
    assert all(f"cannot reach endpoint {closed_endpoint}" in f.detail for f in unreachable)
    assert len(report.streams) == 1  # only the stream that was checked
    code, out = _cli("fsck", registry=local_target.registry)
    assert code == 1 and "1 stream checked: 3 problems" in out and "p/r3/model at s3://ckpts/team" in out, out
    code, out = _cli("fsck", "--json", registry=local_target.registry)
    assert code == 1 and [f["kind"] for f in json.loads(out)["findings"]] == ["lie", "unreachable", "unreachable"]
    code, out = _cli("repair", "--dry-run", registry=local_target.registry)
    assert code == 1 and "would skip p/r2/model at s3://ckpts/team: output_uri s3://ckpts/team could not" in out, out
    code, repaired = _cli("repair", registry=local_target.registry)
    assert code == 1 and "skip p/r3/model at s3://ckpts/team" in repaired and "demote record 1" in repaired
    assert SECRET not in out + repaired and "AKIA" not in out + repaired


def test_a_dry_run_says_each_action_it_would_take_and_exits_as_fsck_does(local_target, capsys) -> None:
    saver = local_target.saver()
    train(saver, {"model": model()}, epochs=1)
    saver.close()
    slot = Path(local_target.output_uri, "p", "r", "model.slot0.pt")
    slot.write_bytes(slot.read_bytes() + b"appended")  # a lie: repair demotes it, and its object is then an orphan
    args = ["--registry", local_target.registry]
    fsck_code = main([*args, "fsck", "--json"])
    found = capsys.readouterr().out
    assert main([*args, "repair", "--dry-run"]) == fsck_code == 1
    out = capsys.readouterr().out
    assert out.splitlines() == [
        f"would demote record 1 to evicted in p/r/model at {slot.parent.parent.parent.as_uri()} (live record 1 "
        "('model_1.pt'): its object has 1901 bytes, the record says 1893)",
        f"would leave {slot.as_uri()} with no record: an orphan, kept until a repair with --delete-orphans",
        "dry run: nothing changed; repair would take the 2 actions above for 1 problem (tracker-saver fsck lists them)",
    ]
    assert main([*args, "fsck", "--json"]) == 1 and capsys.readouterr().out == found  # it changed nothing
    assert main([*args, "repair"]) == 1  # as the dry run said: the object stays, an orphan
    assert "demote record 1" in capsys.readouterr().out
    assert main([*args, "fsck", "--json"]) == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert ("orphan", "p/r/model.slot0.pt") in [(f["kind"], f["key"]) for f in findings]
    assert main([*args, "repair", "--dry-run", "--delete-orphans"]) == 1
    assert f"would delete orphan {slot.as_uri()}" in capsys.readouterr().out and slot.exists()
