"""``tracker-saver fsck`` and ``repair`` on every backend, and their command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.contracts.fsck import FsckContract
from tests.helpers import ROOT, Target, Worker, model, process_env, train
from tracker_saver.cli import main
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
    done = subprocess.run(
        [sys.executable, "-m", "tracker_saver", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**process_env(), "TRACKER_SAVER_REGISTRY": registry, "COLUMNS": "200"},
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


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
    assert code == 0 and "would promote it: pending record" in out, out
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
