"""An upgrade mid-training loses nothing: trained with each earlier release, continued with this code,
on SQLite and on MLflow (a real ``mlflow server``) with a local output_uri, and on SQLite with S3 (Ceph RGW).

For each release of docs/releases.md's table, ``git archive COMMIT tracker_saver`` gives that
release's package. A process of that release trains 3 epochs (a ``best`` stream, n_saved=2, and a
``last`` stream, n_saved=1), renames a live best record, aliases it ``production`` and pins the
other with its own API; a process of this code resumes the run for 3 more epochs, which evicts
both. Then every invariant holds, the rename is kept, ``models get PROJECT@production`` gives the
aliased bytes (issue 52, case 1: 0.1.0 left the alias on the slot record, and its eviction made
the alias dangle), the pin loads, and fsck is clean. Last, the release opens the registry this
code wrote: it refuses a SQLite file with a clear message, changing nothing; on MLflow it silently sees only its own
records (0.1.0 cannot be changed; docs/migration.md says so).

ClearML's offline mode has its journal, a SQLite registry inside the offline session, since 0.1.0:
a session the release trained offline (rename and alias in its journal) is synced by this code and
continued online; a session this code trained offline is refused by the release's sync, and then
synced by this code.

Both processes are forked from the tests' fork server (torch and ignite imported once); the
release's process first forgets the ``tracker_saver`` the server imported, then imports the
exported one. Two processes, two versions of the package: that is the point.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import io
import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tests import forkserver
from tests.helpers import ROOT, SCORES, Target, attach, model, trainer_engine
from tests.test_releases import earlier
from tracker_saver import ConfigError, RecordState, TrackerSaver, find_models, get_model, resolve_model, resume
from tracker_saver.cli.main import main
from tracker_saver.registry.migrations import MIGRATIONS
from tracker_saver.registry.shared import shared_registry
from tracker_saver.storage import open_storage

#: One training process, of any release since 0.1.0 (their public API is the same): CONFIG is JSON.
CHILD = r"""
import json, sys
config = json.loads(sys.argv[1])
if config["package"]:  # an earlier release: forget the tracker_saver the fork server imported
    for name in [m for m in sys.modules if m.split(".")[0] == "tracker_saver"]:
        del sys.modules[name]
    sys.path.insert(0, config["package"])
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint
import tracker_saver
from tracker_saver import TrackerSaver, find_models, pin_model, rename_model, resume, set_alias

print(json.dumps({"version": tracker_saver.__version__, "file": tracker_saver.__file__}), flush=True)
project, reg = config["project"], config["registry"]
if reg.startswith("mlflow:"):  # an MLflowRegistry object: where each release keeps it
    try:
        from tracker_saver.integrations.mlflow.registry import MLflowRegistry
    except ImportError:
        from tracker_saver.registry.mlflow import MLflowRegistry
    reg = MLflowRegistry(reg.partition(":")[2], timeout=30)
if config["epochs"]:
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 2)

    def step(engine, batch):
        with torch.no_grad():
            for p in net.parameters():
                p.add_(0.01)

    trainer = Engine(step)
    saver = TrackerSaver(config["output_uri"], project=project, run="r", registry=reg)
    scores = [0.5, 0.7, 0.6, 0.9, 0.4, 0.95]
    best = Checkpoint({"model": net}, saver, n_saved=2, filename_prefix="best", score_name="val_acc",
                      score_function=lambda e: scores[e.state.epoch - 1],
                      global_step_transform=lambda e, _: e.state.epoch)
    last = Checkpoint({"model": net, "trainer": trainer}, saver, n_saved=1)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, best)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, last)
    if trainer_state := config["resume"]:
        resume(saver, {"model": net, "trainer": trainer}, [best, last])
    trainer.run([0], max_epochs=config["epochs"])
    saver.close()
if config["label"]:  # the lowest-scored live best record: renamed and aliased; the other pinned
    low, high = sorted(find_models(project=project, stream="best_model", live=True, registry=reg), key=lambda r: r.score)
    rename_model(low.id, "keep me", registry=reg)
    set_alias(low.id, "production", registry=reg)
    pinned = pin_model(high.id, registry=reg)
    print(json.dumps({"aliased": low.id, "pinned": pinned.id}), flush=True)
if config["read"]:
    print(json.dumps({"records": len(find_models(project=project, registry=reg))}), flush=True)
"""


@dataclass(frozen=True)
class Upgraded:
    """A run trained with ``release`` and continued with this code; what the release's process said."""

    release: str
    backend: str  # "sqlite", "mlflow" (both with a local output_uri) or "ceph" (SQLite, S3 on Ceph RGW)
    project: str
    output_uri: str
    registry: str  # as the CLI takes it: a SQLite path or mlflow:URI
    before: dict[str, Any]  # the release's records as it left them: id -> (state, name, sha256, size)
    aliased: str
    pinned: str
    package: str

    def open(self) -> Any:
        """The registry, for this process's API calls."""
        if self.backend != "mlflow":
            return self.registry
        from tracker_saver.integrations.mlflow.registry import MLflowRegistry

        return MLflowRegistry(self.registry.partition(":")[2], timeout=30)  # the project is the test's own


def _child(package: str, **config: Any) -> subprocess.CompletedProcess[str]:
    """Run CHILD (this code when ``package`` is empty), forked."""
    env = release_env()
    spec = {"package": package, "resume": False, "label": False, "read": False, "epochs": 0, **config}
    return forkserver.run("-c", [CHILD, json.dumps(spec)], env=env, timeout=300)


def _newest_schema(package: str) -> int:
    """The newest SQLite schema a release knows: the last of its ``registry/migrations.py``'s MIGRATIONS."""
    tree = ast.parse((Path(package) / "tracker_saver" / "registry" / "migrations.py").read_text())
    (value,) = (n.value for n in tree.body if isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == "MIGRATIONS")
    return max(version for version, _ in ast.literal_eval(value))


def _said(done: subprocess.CompletedProcess[str], package: str) -> list[dict[str, Any]]:
    """A child's JSON lines, once it exited 0 running the package meant (not the fork server's)."""
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines[0]["file"].startswith(package or str(ROOT)), lines[0]
    return lines


def _export(commit: str, into: Path) -> str:
    """``git archive COMMIT tracker_saver``, unpacked into ``into``: that release's package."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit, "tracker_saver"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return str(into)


def release_env() -> dict[str, str]:
    """A release's child's environment: none of our settings, and no ``*_PROC_MASTER_ID`` that an
    earlier test's ``Task.init`` in this worker exported (it makes a child's ``Task.init`` join that
    task: offline, the child then has no task and 0.1.0 refuses to save)."""
    return {
        k: v for k, v in os.environ.items() if not k.startswith("TRACKER_SAVER_") and not k.endswith("PROC_MASTER_ID")
    }


BACKENDS = [
    pytest.param((backend, release.version), id=f"{backend}-{release.version}", marks=marks)
    for release in earlier()
    for backend, marks in (("sqlite", ()), ("mlflow", pytest.mark.mlflow), ("ceph", pytest.mark.ceph))
]


@pytest.fixture(scope="module", params=BACKENDS)
def upgraded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upgraded]:
    backend, version = request.param
    release = next(r for r in earlier() if r.version == version)
    root = tmp_path_factory.mktemp(f"upgrade-{backend}-{version}")
    package = _export(release.commit, root / "package")
    project = f"upg{uuid.uuid4().hex[:10]}"  # MLflow: experiments no other test uses
    registry = f"mlflow:{request.getfixturevalue('mlflow_server')}" if backend == "mlflow" else str(root / "reg.db")
    where = {"project": project, "output_uri": str(root / "output"), "registry": registry}
    env = pytest.MonkeyPatch()  # Ceph: boto3's configuration chain points at the gateway, here and in the children
    if backend == "ceph":
        where["output_uri"] = f"s3://{request.getfixturevalue('s3_bucket')}/{project}"
        nowhere = str(root / "no-aws-config")
        gateway = request.getfixturevalue("ceph_s3").env()
        for name, value in {**gateway, "AWS_CONFIG_FILE": nowhere, "AWS_SHARED_CREDENTIALS_FILE": nowhere}.items():
            env.setenv(name, value)
        env.setenv("AWS_EC2_METADATA_DISABLED", "true")
    said = _said(_child(package, **where, epochs=3, label=True), package)
    assert said[0]["version"] == release.version
    upgraded = Upgraded(
        version, backend, project, where["output_uri"], registry, {}, said[-1]["aliased"], said[-1]["pinned"], package
    )
    before = {r.id: (r.state, r.name, r.sha256, r.size) for r in find_models(project=project, registry=upgraded.open())}
    _said(_child("", **where, epochs=6, resume=True), "")
    try:
        yield replace(upgraded, before=before)
    finally:
        env.undo()


def _cli(registry: str, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(["--registry", registry, *argv])
    return code, out.getvalue()


def test_an_alias_set_by_an_earlier_release_names_its_bytes_after_this_code_evicts_its_slot(
    upgraded: Upgraded, tmp_path: Path
) -> None:
    reg = upgraded.open()
    aliased = get_model(upgraded.aliased, registry=reg)
    assert aliased.state is RecordState.EVICTED  # this code's save replaced its slot
    code, said = _cli(upgraded.registry, "models", "get", f"{upgraded.project}@production", str(tmp_path))
    assert code == 0, said
    production = resolve_model(f"{upgraded.project}@production", registry=reg)
    assert production.state is RecordState.PINNED and str(production.metadata["pinned_from"]) == aliased.id
    (got,) = tmp_path.iterdir()
    _, name, sha256, size = upgraded.before[aliased.id]
    assert hashlib.sha256(got.read_bytes()).hexdigest() == sha256 and got.stat().st_size == size
    assert production.name == name == "keep me"  # the rename went with the bytes


def test_after_the_upgrade_renames_pins_and_live_records_hold_and_fsck_is_clean(upgraded: Upgraded) -> None:
    reg, storage, project = upgraded.open(), open_storage(upgraded.output_uri), upgraded.project
    now = {r.id: r for r in find_models(project=project, registry=reg)}
    assert set(upgraded.before) <= set(now)  # no record of the release is lost
    assert now[upgraded.aliased].name == "keep me"  # the rename is kept on the record itself
    pinned = now[upgraded.pinned]
    assert pinned.state is RecordState.PINNED and pinned.sha256 == upgraded.before[upgraded.pinned][2]
    for record in now.values():  # truth: every loadable record's object holds its bytes
        if record.state in (RecordState.LIVE, RecordState.REVIVED, RecordState.PINNED):
            assert storage.digest(str(record.key)) == (record.size, record.sha256), record
    slots = sorted(o.key for o in storage.list(f"{project}/r/") if ".slot" in o.key)
    assert slots == [f"{project}/r/{s}" for s in ("best_model.slot0.pt", "best_model.slot1.pt", "checkpoint.slot0.pt")]
    saved = [r for r in now.values() if r.state is not RecordState.PINNED]
    steps = sorted((r.stream, r.global_step) for r in saved)  # one record per save: best at epochs 1-4 and 6
    assert steps == sorted([*(("best_model", s) for s in (1, 2, 3, 4, 6)), *(("checkpoint", s) for s in range(1, 7))])
    live = sorted((r.stream, r.global_step) for r in saved if r.state is RecordState.LIVE)
    assert live == [("best_model", 4), ("best_model", 6), ("checkpoint", 6)]
    code, said = _cli(upgraded.registry, "fsck", "--project", project)
    assert code == 0, said


def test_an_earlier_release_refuses_a_newer_sqlite_schema_reads_its_own_and_sees_only_its_mlflow_records(
    upgraded: Upgraded,
) -> None:
    """What docs/migration.md says of a downgrade: SQLite's schema check refuses a schema newer than
    the release knows and changes nothing (a release of this code's schema reads the registry whole);
    0.1.0's MLflow reader has no such check and silently finds only the records it wrote (schema 1)."""
    if upgraded.backend == "mlflow":
        done = _child(upgraded.package, project=upgraded.project, registry=upgraded.registry, read=True)
        now = find_models(project=upgraded.project, registry=upgraded.open())
        if upgraded.release == "0.1.0":  # schema 1 only, and no refusal of what it cannot read
            seen = _said(done, upgraded.package)[-1]["records"]
            assert seen == len(upgraded.before) < len(now)
        else:  # a later release reads this code's schema whole, or refuses a newer one
            newer = "was written by a newer tracker_saver" in done.stderr
            assert newer or _said(done, upgraded.package)[-1]["records"] == len(now), done.stderr[-2000:]
        return
    if _newest_schema(upgraded.package) == MIGRATIONS[-1][0]:  # a release of this schema reads it whole
        done = _child(upgraded.package, project=upgraded.project, registry=upgraded.registry, read=True)
        now = find_models(project=upgraded.project, registry=upgraded.open())
        assert _said(done, upgraded.package)[-1]["records"] == len(now)
        return
    with open(upgraded.registry, "rb") as f:
        before = hashlib.sha256(f.read()).hexdigest()
    done = _child(upgraded.package, project=upgraded.project, registry=upgraded.registry, read=True)
    assert done.returncode == 1
    assert "ConfigError: registry" in done.stderr and "is newer than this tracker_saver knows" in done.stderr
    assert "upgrade tracker-saver" in done.stderr
    with open(upgraded.registry, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == before


@pytest.mark.clearml
def test_clearml_records_in_0_1_0s_form_with_an_alias_on_a_slot_record_are_continued_and_the_alias_kept(
    clearml_project: str, clearml_api: Any, tmp_path: Path
) -> None:
    """0.1.0's ClearML saves were refused by clearml-server 2.0 (it sent the metadata key ``key``), so this
    starts from records put in the form 0.1.0 wrote them: the slot key under metadata ``key``, and an
    ``alias:production`` tag on a live slot record (0.1.0 did not pin at alias time). A new saver of
    this code resumes the run for 3 more epochs, which evicts that record."""
    target = Target(str(tmp_path / "out"), registry=f"clearml:{clearml_project}")
    reg = shared_registry(target.registry, create=False)

    def train(epochs: int) -> None:
        saver, net = target.saver(), model()
        trainer = trainer_engine(net)
        best = attach(trainer, saver, {"model": net}, n_saved=2, prefix="best", scores=SCORES)
        last = attach(trainer, saver, {"model": net, "trainer": trainer}, n_saved=1)
        resume(saver, {"model": net, "trainer": trainer}, [best, last])
        trainer.run([0], max_epochs=epochs)
        saver.close()

    train(3)
    for record in find_models(project="p", registry=reg):  # as 0.1.0 wrote it: the slot key under "key"
        items = clearml_api.ok("models.get_by_id", model=record.id)["model"]["metadata"].values()
        old = [{**item, "key": "key"} if item["key"] == "slot_key" else item for item in items]
        clearml_api.ok("models.add_or_update_metadata", model=record.id, metadata=old, replace_metadata=True)
    low = min(find_models(project="p", stream="best_model", live=True, registry=reg), key=lambda r: r.score or 0)
    reg.labels.rename(low.id, "keep me")
    reg.labels.set_alias(low.id, "production")  # the tag 0.1.0 wrote, on the slot record itself
    train(6)
    assert get_model(low.id, registry=reg).state is RecordState.EVICTED
    production = resolve_model("p@production", registry=reg)
    assert production.state is RecordState.PINNED and str(production.metadata["pinned_from"]) == low.id
    assert production.name == "keep me" and production.sha256 == low.sha256
    assert target.storage().digest(str(production.key)) == (low.size, low.sha256)
    slots = sorted(o.key for o in target.storage().list("p/r/") if ".slot" in o.key)
    assert slots == ["p/r/best_model.slot0.pt", "p/r/best_model.slot1.pt", "p/r/checkpoint.slot0.pt"]
    live = sorted((r.stream, r.global_step) for r in find_models(project="p", states=["live"], registry=reg))
    assert live == [("best_model", 4), ("best_model", 6), ("checkpoint", 6)]


@pytest.mark.mlflow
def test_this_code_refuses_an_mlflow_record_a_newer_release_wrote_instead_of_leaving_it_out(
    mlflow_registry: Any, tmp_path: Path
) -> None:
    """A downgrade from a future release: its records carry a newer tag schema. Leaving them out (as a
    record edited into nonsense is) would show the stream with holes; the read is refused instead."""
    from mlflow import MlflowClient

    target = Target(str(tmp_path / "out"), registry=mlflow_registry)
    saver = target.saver()
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=2)
    trainer.run([0], max_epochs=2)
    saver.close()
    first, second = find_models(project="p", order_by="created_at", registry=mlflow_registry)
    MlflowClient(mlflow_registry.tracking_uri).set_logged_model_tags(second.id, {"tracker_saver.schema": "3"})
    newer = rf"LoggedModel {second.id} was written by a newer tracker_saver \(tag schema 3; this one reads 1 and 2\)"
    with pytest.raises(ConfigError, match=newer + r": upgrade tracker-saver"):
        find_models(project="p", registry=mlflow_registry)
    for record in (first, second):  # a get reads the record's stream too: the newer record is in it
        with pytest.raises(ConfigError, match=newer):
            get_model(record.id, registry=mlflow_registry)


#: A training of an earlier release under ClearML's offline mode (no server): its saver keeps the
#: records in the journal inside the offline session, which ClearML zips when the task closes.
OFFLINE_CHILD = r"""
import json, sys
config = json.loads(sys.argv[1])
for name in [m for m in sys.modules if m.split(".")[0] == "tracker_saver"]:
    del sys.modules[name]
sys.path.insert(0, config["package"])
import torch
from clearml import Task
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint
import tracker_saver
from tracker_saver import TrackerSaver, find_models, rename_model, set_alias

print(json.dumps({"version": tracker_saver.__version__, "file": tracker_saver.__file__}), flush=True)
Task.set_offline(True)
task = Task.init(config["project"], "offline run", auto_connect_frameworks=False, auto_resource_monitoring=False,
                 auto_connect_streams=False, auto_connect_arg_parser=False, reuse_last_task_id=False)
torch.manual_seed(0)
net = torch.nn.Linear(4, 2)

def step(engine, batch):
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.01)

trainer = Engine(step)
saver = TrackerSaver(config["output_uri"], registry="clearml")
scores = [0.5, 0.7, 0.6]
best = Checkpoint({"model": net}, saver, n_saved=2, filename_prefix="best", score_name="val_acc",
                  score_function=lambda e: scores[e.state.epoch - 1], global_step_transform=lambda e, _: e.state.epoch)
last = Checkpoint({"model": net, "trainer": trainer}, saver, n_saved=1)
trainer.add_event_handler(Events.EPOCH_COMPLETED, best)
trainer.add_event_handler(Events.EPOCH_COMPLETED, last)
trainer.run([0], max_epochs=3)
low = min(find_models(stream="best_model", live=True, registry=saver.registry), key=lambda r: r.score)
rename_model(low.id, "keep me", registry=saver.registry)
set_alias(low.id, "production", registry=saver.registry)
records = [[r.name, r.state.value, r.sha256, r.size] for r in find_models(registry=saver.registry)]
print(json.dumps({"journal": str(saver.registry.path), "run": saver.run, "records": records}), flush=True)
saver.close()
task.close()
"""


@pytest.mark.clearml
@pytest.mark.parametrize("release", earlier(), ids=lambda r: r.version)
def test_an_offline_clearml_journal_an_earlier_release_wrote_is_synced_and_continued_with_its_alias(
    release: Any, clearml_project: str, tmp_path: Path
) -> None:
    """0.1.0 ran offline too: its saver kept the records in a SQLite journal inside the offline
    session (``tracker_saver/registry.db``). A process of that release trains 3 epochs offline,
    renames a live best record and aliases it ``production`` in the journal; this code syncs the
    session zip to the server (the stand-in), then resumes the run online for 3 more epochs, which
    evicts the aliased record: the alias moves to a pin of its bytes, and the footprint holds."""
    from tracker_saver.clearml import import_offline_session
    from tracker_saver.integrations.clearml.registry import ClearMLRegistry

    package = _export(release.commit, tmp_path / "package")
    out = tmp_path / "out"
    env = release_env()
    config = {"package": package, "project": clearml_project, "output_uri": str(out)}
    done = forkserver.run("-c", [OFFLINE_CHILD, json.dumps(config)], env=env, timeout=300)
    lines = _said(done, package)
    said = lines[-1]
    assert lines[0]["version"] == release.version
    session = Path(said["journal"]).parents[1]  # <session>/tracker_saver/registry.db
    report = import_offline_session(f"{session}.zip")
    # 6 saves (3 best, 3 last) and, from 0.2.0 on, the pin the alias moved to when its record was evicted
    assert (report.imported, report.created, report.records) == (True, len(said["records"]), len(said["records"]))
    assert len(said["records"]) == (6 if release.version == "0.1.0" else 7)
    reg = ClearMLRegistry()
    pushed = find_models(project=clearml_project, registry=reg)
    as_written = sorted((name, state, sha, size) for name, state, sha, size in said["records"])
    assert sorted((r.name, r.state.value, r.sha256, r.size) for r in pushed) == as_written
    aliased = resolve_model(f"{clearml_project}@production", registry=reg)
    assert aliased.name == "keep me" and aliased.state in (RecordState.LIVE, RecordState.PINNED)
    # 0.1.0 aliased the live slot record itself; from 0.2.0 on the alias goes to a pin of it at alias time
    source = (
        aliased if aliased.state is RecordState.LIVE else get_model(str(aliased.metadata["pinned_from"]), registry=reg)
    )

    saver = TrackerSaver(out, project=clearml_project, run=said["run"], registry=reg)
    net = model()
    trainer = trainer_engine(net)
    best = attach(trainer, saver, {"model": net}, n_saved=2, prefix="best", scores=SCORES)
    last = attach(trainer, saver, {"model": net, "trainer": trainer}, n_saved=1)
    resume(saver, {"model": net, "trainer": trainer}, [best, last])
    trainer.run([0], max_epochs=6)
    saver.close()
    assert get_model(source.id, registry=reg).state is RecordState.EVICTED
    production = resolve_model(f"{clearml_project}@production", registry=reg)
    assert production.state is RecordState.PINNED and str(production.metadata["pinned_from"]) == source.id
    assert (production.name, production.sha256) == ("keep me", source.sha256)
    storage = open_storage(str(out))
    assert storage.digest(str(production.key)) == (source.size, source.sha256)
    prefix = str(source.key).rsplit("/", 1)[0]
    slots = sorted(o.key.rsplit("/", 1)[1] for o in storage.list(f"{prefix}/") if ".slot" in o.key)
    assert slots == ["best_model.slot0.pt", "best_model.slot1.pt", "checkpoint.slot0.pt"]
    live = find_models(project=clearml_project, states=["live"], registry=reg)
    assert sorted((r.stream, r.global_step) for r in live) == [("best_model", 4), ("best_model", 6), ("checkpoint", 6)]


#: An earlier release's ``tracker-saver sync``: the offline session given, online, against the server.
SYNC_CHILD = r"""
import json, sys
config = json.loads(sys.argv[1])
for name in [m for m in sys.modules if m.split(".")[0] == "tracker_saver"]:
    del sys.modules[name]
sys.path.insert(0, config["package"])
import tracker_saver
from tracker_saver.clearml import import_offline_session

print(json.dumps({"version": tracker_saver.__version__, "file": tracker_saver.__file__}), flush=True)
try:
    report = import_offline_session(config["session"])
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
else:
    print(json.dumps({"created": report.created}), flush=True)
"""


@pytest.mark.clearml
@pytest.mark.parametrize("release", earlier(), ids=lambda r: r.version)
def test_an_earlier_release_refuses_to_sync_an_offline_journal_this_code_wrote_and_this_code_then_syncs_it(
    release: Any, clearml_project: str, clearml_standin: Any, tmp_path: Path
) -> None:
    """The downgrade of an offline journal: a session trained offline by this code, synced by an
    earlier release's ``tracker-saver sync`` (another machine, an older install). 0.1.0 imports the
    session's task first, then opens the journal, whose SQLite schema is newer than it knows: it
    refuses with the schema message, creating no model and leaving the session as it was. A sync by
    this code then finds the imported task and pushes every record into it."""
    from clearml import Task

    from tests.conftest_clearml import init_task
    from tracker_saver.clearml import import_offline_session
    from tracker_saver.integrations.clearml.registry import ClearMLRegistry
    from tracker_saver.integrations.clearml.sync import SESSION_TAG

    Task.set_offline(True)
    try:
        task = init_task(clearml_project, "offline run")
        saver = TrackerSaver(tmp_path / "out", registry="clearml")
        trainer = trainer_engine(net := model())
        attach(trainer, saver, {"model": net}, n_saved=1)
        trainer.run([0], max_epochs=2)
        saver.close()
        session = Path(f"{task.get_offline_mode_folder()}.zip")
        task.close()
    finally:
        Task.set_offline(False)
    written = hashlib.sha256(session.read_bytes()).hexdigest()

    package = _export(release.commit, tmp_path / "package")
    env = release_env()
    config = {"package": package, "session": str(session)}
    said = _said(forkserver.run("-c", [SYNC_CHILD, json.dumps(config)], env=env, timeout=300), package)
    assert said[0]["version"] == release.version
    if "created" in said[-1]:  # a later release that knows this code's journal schema syncs it whole
        assert release.version != "0.1.0" and said[-1]["created"] == 2
        return
    assert said[-1]["error"] == "ConfigError", said[-1]
    assert re.search(r"schema version \d+ is newer than this tracker_saver knows \(\d+\): upgrade", said[-1]["message"])
    tagged = [m for m in clearml_standin.models.values() if SESSION_TAG + session.stem in m["system_tags"]]
    assert tagged == [] and hashlib.sha256(session.read_bytes()).hexdigest() == written

    report = import_offline_session(session)
    assert (report.imported, report.created) == (False, 2)  # the task the release imported, now with its models
    live = find_models(project=clearml_project, live=True, registry=ClearMLRegistry())
    assert [r.filename for r in live] == ["model_2.pt"]


#: An earlier release reading a ClearML project: what it lists, and whether the live record loads.
CLEARML_READ_CHILD = r"""
import json, sys
config = json.loads(sys.argv[1])
for name in [m for m in sys.modules if m.split(".")[0] == "tracker_saver"]:
    del sys.modules[name]
sys.path.insert(0, config["package"])
import torch
import tracker_saver
from tracker_saver import find_models, load_checkpoint
from tracker_saver.integrations.clearml.registry import ClearMLRegistry

print(json.dumps({"version": tracker_saver.__version__, "file": tracker_saver.__file__}), flush=True)
reg = ClearMLRegistry(project_root=config["root"])
records = find_models(project="p", registry=reg)
print(json.dumps({"records": [[r.name, r.state.value, r.key] for r in records]}), flush=True)
try:
    load_checkpoint(next(r for r in records if r.state.value == "live"), {"model": torch.nn.Linear(4, 2)}, registry=reg)
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
else:
    print(json.dumps({"loaded": True}), flush=True)
"""


@pytest.mark.clearml
@pytest.mark.parametrize("release", earlier(), ids=lambda r: r.version)
def test_an_earlier_release_lists_the_clearml_records_this_code_wrote_without_their_slot_and_loads_none(
    release: Any, clearml_project: str, tmp_path: Path
) -> None:
    """The ClearML downgrade: this code keeps a record's slot key under metadata ``slot_key``
    (clearml-server 2.0 refuses the key ``key``, which 0.1.0 wrote and reads). 0.1.0 lists every
    record, with its name and state, but with no key, and refuses to load the live one with a
    message that contradicts itself ("is live: … use a live record"): no wrong bytes are loaded,
    and none load. (Its own saves are refused by the server, as before.) docs/migration.md says so."""
    target = Target(str(tmp_path / "out"), registry=f"clearml:{clearml_project}")
    saver = target.saver()
    trainer = trainer_engine(net := model())
    attach(trainer, saver, {"model": net}, n_saved=1)
    trainer.run([0], max_epochs=2)
    saver.close()
    written = [[r.name, r.state.value] for r in find_models(project="p", registry=shared_registry(target.registry))]

    package = _export(release.commit, tmp_path / "package")
    env = release_env()
    config = {"package": package, "root": clearml_project}
    said = _said(forkserver.run("-c", [CLEARML_READ_CHILD, json.dumps(config)], env=env, timeout=300), package)
    assert said[0]["version"] == release.version
    listed = said[1]["records"]
    assert sorted(name_state for *name_state, _ in listed) == sorted(written)
    if release.version != "0.1.0":  # a later release reads slot_key
        assert said[-1] == {"loaded": True}
        return
    assert [key for *_, key in listed] == [None, None]
    assert said[-1]["error"] == "RegistryError"
    assert "('model_2.pt') is live: its slot may hold other bytes" in said[-1]["message"]
