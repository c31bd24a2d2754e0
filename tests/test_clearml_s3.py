"""ClearML users keep S3 keys in clearml.conf: the saver uses them when boto3's chain has none."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests import forkserver
from tests.conftest_clearml import clearml_config_text

pytestmark = [pytest.mark.ceph, pytest.mark.clearml]
ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import json, sys, torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint
from tracker_saver import TrackerSaver, find_models
saver = TrackerSaver(sys.argv[1], project="proj", run="from-conf", registry="clearml:" + sys.argv[2])
trainer = Engine(lambda e, b: None)
trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": torch.nn.Linear(2, 1)}, saver, n_saved=1))
trainer.run([0], max_epochs=2)
print(json.dumps([(r.name, r.state.value, r.uri) for r in find_models(project="proj", registry=saver.registry)]))
"""


def test_s3_credentials_come_from_clearml_conf_when_boto3_has_none(
    ceph_s3, s3_output_uri, clearml_server, clearml_project, tmp_path
) -> None:
    host = ceph_s3.endpoint_url.split("://", 1)[1]
    bucket = s3_output_uri[len("s3://") :].split("/", 1)[0]
    conf = tmp_path / "clearml.conf"
    conf.write_text(
        clearml_config_text(tmp_path / "cache")
        + f"""
sdk.aws.s3 {{
    credentials: [{{ host: "{host}", bucket: "{bucket}", key: "{ceph_s3.access_key}",
                    secret: "{ceph_s3.secret_key}", secure: false }}]
}}
"""
    )
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    env.update(CLEARML_CONFIG_FILE=str(conf), PYTHONPATH=str(ROOT))
    done = forkserver.run("-c", [SCRIPT, s3_output_uri, clearml_project], env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    records = json.loads(done.stdout.strip().splitlines()[-1])
    assert [(name, state) for name, state, _ in records] == [("model_1.pt", "evicted"), ("model_2.pt", "live")]
    assert records[1][2] == f"{s3_output_uri}/proj/from-conf/model.slot0.pt"
    assert ceph_s3.secret_key not in done.stdout + done.stderr


def test_without_any_credentials_the_error_says_where_to_put_them(
    ceph_s3, s3_output_uri, clearml_server, clearml_project, tmp_path
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    env["PYTHONPATH"] = str(ROOT)
    done = forkserver.run("-c", [SCRIPT, s3_output_uri, clearml_project], env=env, timeout=120)
    assert done.returncode != 0
    assert "credentials" in done.stderr.splitlines()[-1].lower()
