"""Outages of the ClearML server, against a private stand-in: stopped, frozen, or answering 500 / 503.

Each test trains with a real ``Engine`` and ``Checkpoint`` (``n_saved=2``) through
``TrackerSaver(<local folder>, registry=ClearMLRegistry(timeout=T))``, and the server goes
away in the middle of training. Every test starts its own :class:`ClearMLStandIn` (the
``server`` fixture), so stopping it never disturbs the session-wide one.

* Sync mode: the next save raises ``RegistryError`` naming the registry and the operation
  within ``T`` (plus a scheduling margin); a 500 is an answer and raises at once.
* Async mode: training goes on, the error surfaces on a later save or on ``flush()``, and no
  ``Checkpoint`` call holds the training thread longer than ``T``.
* Either way the earlier checkpoints stay live and true, and once the server is back a later
  save in the same process succeeds and nothing is left pending. Storage and registry are
  read directly afterwards (a fresh registry, the files): no lie, no extra object.
* Registry down, storage up: the bytes are committed but the record cannot become live; it
  stays ``pending`` (never loadable) until the registry is back, then the next save of the
  stream, ``fsck.repair`` or start-up recovery promotes it.
* A subprocess with the SDK's default retry settings (240 retries, waiting forever on a 503)
  still gets its ``RegistryError`` within ``timeout``: we do not depend on them.

(The object-store half is ``tests/test_outages.py``.)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

from tests.clearml_standin import ACCESS_KEY, SECRET_KEY, ClearMLStandIn
from tests.conftest_clearml import ClearMLServer
from tests.helpers import ROOT, process_env
from tracker_saver import RecordState, RegistryError, TrackerSaver, fsck
from tracker_saver.core.records import LOADABLE, Record, UploadInfo
from tracker_saver.integrations.clearml.registry import ClearMLRegistry
from tracker_saver.models import open_verified
from tracker_saver.registry import Query
from tracker_saver.storage import open_storage

pytestmark = pytest.mark.clearml

#: The bound under test, and what the scheduler of a loaded 2-core machine may add to it.
T = 3.0
MARGIN = 3.0
#: A 500 is an answer (clearml-server's own error): raised at once, never waited on.
AT_ONCE = 1.0
N_SAVED = 2
PROJECT, RUN = "outages", "r"
KINDS = ["stopped", "hanging", "500", "503"]


# -- the server, and the ways it goes away ------------------------------------------------------------------


@pytest.fixture
def server(clearml_server: ClearMLServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ClearMLStandIn]:
    """A stand-in of this test's own, and the SDK pointed at it (config file and HOME from ``clearml_server``)."""
    if clearml_server.live:
        pytest.skip("stops and freezes the ClearML server: needs the in-memory stand-in, not a live server")
    standin = ClearMLStandIn().start()
    try:
        for name in ("CLEARML_API_HOST", "CLEARML_WEB_HOST", "CLEARML_FILES_HOST"):
            monkeypatch.setenv(name, standin.api_host)
        monkeypatch.setenv("CLEARML_API_ACCESS_KEY", ACCESS_KEY)
        monkeypatch.setenv("CLEARML_API_SECRET_KEY", SECRET_KEY)
        monkeypatch.delenv("CLEARML_AUTH_TOKEN", raising=False)  # a token of the session-wide server
        yield standin
    finally:
        standin.stop()  # also releases requests a failed test left hanging


class Down:
    """One way the ClearML server goes away (``begin``) and comes back (``end``)."""

    def __init__(self, standin: ClearMLStandIn, kind: str) -> None:
        self.standin, self.kind = standin, kind
        self.began: float | None = None

    def begin(self) -> None:
        self.began = time.monotonic()
        if self.kind == "stopped":
            self.standin.pause()  # connections refused
        elif self.kind == "hanging":
            self.standin.hang()  # connections accepted, requests never answered
        else:
            code = int(self.kind)
            self.standin.fail(".*", code=code, msg=f"stand-in: every request answers {code}", times=None)

    def end(self) -> None:
        if self.kind == "stopped":
            if not self.standin.listening:
                self.standin.resume()
        elif self.kind == "hanging":
            self.standin.unhang()
        else:
            self.standin.clear_faults()

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        self.begin()
        try:
            yield
        finally:
            self.end()


def registry_of(root: str, timeout: float = T) -> ClearMLRegistry:
    return ClearMLRegistry(project_root=root, timeout=timeout)


def wait_for_probe(registry: ClearMLRegistry) -> None:
    """Wait until ``registry`` may try the server again after an outage.

    Once the server has failed for half the timeout the registry refuses requests at once for
    the next half (``tracker_saver.core.outage``): a save right after the failure would be refused
    although the server is back. A real outage lasts longer than that.
    """
    time.sleep(registry._outage.retry_in())


# -- training -------------------------------------------------------------------------------------------


class Training:
    """One saver and one ``Checkpoint``, trained in runs of real engines; every save is timed."""

    def __init__(self, out: Path, registry: ClearMLRegistry, **saver_options: Any) -> None:
        torch.manual_seed(0)
        self.out = out
        self.net = torch.nn.Linear(4, 2)
        self.registry = registry
        self.saver = TrackerSaver(out, project=PROJECT, run=RUN, registry=registry, timeout=T, **saver_options)
        self.epoch = 0
        self.blocks: list[tuple[int, float]] = []  # (epoch, seconds the training thread spent in Checkpoint)
        self.iterations: list[float] = []  # when each iteration ended (monotonic)
        self.handler = Checkpoint(
            {"model": self.net}, self.saver, n_saved=N_SAVED, global_step_transform=lambda *_: self.epoch
        )

    def run(self, epochs: int, *, before_save: dict[int, Callable[[], object]] | None = None) -> None:
        """Train ``epochs`` more epochs (3 iterations each) on a fresh engine, saving after each.

        ``before_save[k]()`` runs right before epoch k's save (k counts from the first run).
        """

        def step(engine: Engine, batch: Any) -> None:
            with torch.no_grad():
                for p in self.net.parameters():
                    p.add_(0.01)  # every checkpoint differs

        trainer = Engine(step)

        @trainer.on(Events.ITERATION_COMPLETED)
        def tick(engine: Engine) -> None:
            self.iterations.append(time.monotonic())

        @trainer.on(Events.EPOCH_COMPLETED)
        def save(engine: Engine) -> None:
            self.epoch += 1
            if before_save and self.epoch in before_save:
                before_save[self.epoch]()
            started = time.monotonic()
            try:
                self.handler(engine)
            finally:
                self.blocks.append((self.epoch, time.monotonic() - started))

        self.saver.attach(trainer)  # flush at the end of the run (and on an error)
        trainer.run([0, 1, 2], max_epochs=epochs)

    def live(self) -> list[str]:
        return sorted(r.name for r in self.saver.records(live=True))

    def blocked(self, epoch: int) -> float:
        return max(seconds for e, seconds in self.blocks if e == epoch)


@pytest.fixture
def root(server: ClearMLStandIn) -> str:
    """A ClearML project root no other test uses."""
    return f"outage-tests/{uuid.uuid4().hex[:12]}"


@pytest.fixture
def make_training(server: ClearMLStandIn, root: str, tmp_path: Path) -> Iterator[Callable[..., Training]]:
    """Build ``Training`` objects; their savers are closed afterwards (with the server back up)."""
    made: list[Training] = []

    def make(**saver_options: Any) -> Training:
        made.append(Training(tmp_path / "output", registry_of(root), **saver_options))
        return made[-1]

    yield make
    for training in made:
        Down(server, "stopped").end()
        server.unhang()
        server.clear_faults()
        with contextlib.suppress(Exception):
            wait_for_probe(training.registry)
            training.saver.close()


# -- reading storage and registry directly ----------------------------------------------------------------


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def records(root: str) -> list[Record]:
    """This run's records, read by a fresh registry (nothing cached from the saver's)."""
    return registry_of(root).query(Query(project=PROJECT, run=RUN))


def by_name(found: list[Record]) -> dict[str, Record]:
    return {r.name: r for r in found}


def assert_true_and_small(out: Path, root: str, *, settled: bool = True) -> list[Record]:
    """Read the folder and a fresh registry: no lie, no extra object, no temp file; once ``settled``
    (a save of the stream succeeded since the outage) no pending record either. Returns the records."""
    found = records(root)
    storage = open_storage(str(out))
    for record in found:
        if record.state in LOADABLE:
            with open_verified(record, storage=storage):  # IntegrityError for a lie
                pass
            assert (out / record.key).stat().st_size == record.size
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert not [f for f in files if Path(f).name.startswith(".tmp-")], f"a temp file was left behind: {files}"
    assert len(files) <= N_SAVED, f"more than n_saved objects: {files}"
    assert all(".slot" in f for f in files), files
    if settled:
        pending = [r.name for r in found if r.state is RecordState.PENDING]
        assert pending == [], f"unsettled records: {pending}"
    return found


def state_on_server(standin: ClearMLStandIn, name: str) -> dict[str, str]:
    """What the stand-in holds for the model called ``name`` (read from its memory, so also while it is down)."""
    (model,) = [m for m in standin.models.values() if m.get("name") == name]
    return {k: v["value"] for k, v in (model.get("metadata") or {}).items()}


# -- sync: the next save raises within the bound, a later one succeeds --------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_sync_the_next_save_raises_within_the_bound_and_a_later_one_succeeds(
    server: ClearMLStandIn, make_training: Callable[..., Training], root: str, kind: str
) -> None:
    training = make_training()
    training.run(2)
    before = {r.name: r for r in records(root)}
    assert sorted(before) == ["model_1.pt", "model_2.pt"] == training.live()
    down = Down(server, kind)
    with down():
        with pytest.raises(RegistryError) as caught:
            training.run(1)
        blocked = training.blocked(3)
        assert blocked <= (AT_ONCE if kind == "500" else T + MARGIN), f"{kind}: the save blocked {blocked:.1f} s"
        message = str(caught.value)
        assert f"ClearML registry clearml://127.0.0.1:{server.api_host.rsplit(':', 1)[1]}/{root}" in message
        assert "creating the model of 'model_3.pt'" in message, message
        expected = {
            "stopped": "the server stopped answering",  # refused: retried until the clock ran out
            "hanging": "ReadTimeout",  # a create is never repeated after an unclear failure
            "500": "failed with 500/0 (stand-in: every request answers 500)",
            "503": "stopped answering (no answer for",  # a 503 was not processed: retried, even a create
        }[kind]
        assert expected in message, message
        assert kind == "500" or "check that" in message  # and the fix
        # Nothing changed on the server: the earlier records are live, no record was made.
        assert {m["name"] for m in server.models.values() if m.get("metadata")} == set(before)
        assert [state_on_server(server, n)["state"] for n in sorted(before)] == ["live", "live"]
    # Read back after the outage: the previous checkpoints are live and true, their files untouched.
    after = assert_true_and_small(training.out, root)
    assert {r.name: (r.state, r.sha256) for r in after} == {n: (r.state, r.sha256) for n, r in before.items()}
    wait_for_probe(training.registry)
    training.run(1)  # the server is back: the next save succeeds
    assert training.live() == ["model_2.pt", "model_4.pt"]
    final = by_name(assert_true_and_small(training.out, root))
    assert final["model_4.pt"].state is RecordState.LIVE and final["model_1.pt"].state is RecordState.EVICTED
    assert "model_3.pt" not in final


def test_a_stop_shorter_than_half_the_bound_is_ridden_through(
    server: ClearMLStandIn, make_training: Callable[..., Training], root: str
) -> None:
    """Refused for 0.6 s of a 3 s bound: the save waits for the server and succeeds."""
    training = make_training()
    training.run(1)

    def stop_briefly() -> None:
        server.pause()
        threading.Timer(0.6, server.resume).start()

    training.run(1, before_save={2: stop_briefly})
    assert 0.5 <= training.blocked(2) <= T + MARGIN
    assert training.live() == ["model_1.pt", "model_2.pt"]
    assert_true_and_small(training.out, root)


# -- async: training goes on, the error surfaces later, a later save succeeds ---------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_async_training_goes_on_and_the_error_surfaces_then_a_later_save_succeeds(
    server: ClearMLStandIn, make_training: Callable[..., Training], root: str, kind: str
) -> None:
    training = make_training(async_upload=True)
    training.run(2)  # attach flushes at the end of the run: durable
    assert training.live() == ["model_1.pt", "model_2.pt"]
    down = Down(server, kind)
    try:
        with pytest.raises(RegistryError) as caught:
            training.run(4, before_save={3: down.begin})  # from epoch 3's save on, the server is gone
        failed_at = time.monotonic()
        assert down.began is not None
        # The save made as the outage began only took its snapshot; the one after it waited at
        # most T for it (max_pending=1) and raised its error.
        assert training.blocked(3) < AT_ONCE, training.blocks
        assert max(seconds for _, seconds in training.blocks) <= T + MARGIN, training.blocks
        assert "in the background: model_3.pt" in getattr(caught.value, "__notes__", []), caught.value
        assert "creating the model of 'model_3.pt'" in str(caught.value)
        # Training went on while the background save met the outage: a whole epoch, at least.
        during = [t for t in training.iterations if down.began < t < failed_at]
        assert len(during) >= 3, (len(during), training.blocks)
        assert [state_on_server(server, n)["state"] for n in ("model_1.pt", "model_2.pt")] == ["live", "live"]
    finally:
        down.end()
    assert_true_and_small(training.out, root)
    wait_for_probe(training.registry)
    assert training.live() == ["model_1.pt", "model_2.pt"]
    training.run(1)  # the server is back: a later save succeeds (and attach's flush raises nothing)
    newest = f"model_{training.epoch}.pt"
    assert newest in training.live() and len(training.live()) == N_SAVED
    final = by_name(assert_true_and_small(training.out, root))
    assert final[newest].state is RecordState.LIVE


# -- registry down, storage up: committed bytes, a pending record, promoted later ----------------------------


@pytest.mark.parametrize(
    ("kind", "settle"),
    [
        ("stopped", "next save"),
        ("hanging", "next save"),
        ("503", "next save"),
        ("500", "next save"),
        ("stopped", "repair"),
        ("stopped", "start-up"),
    ],
)
def test_registry_down_after_the_storage_commit_leaves_a_pending_record_that_is_promoted_later(
    server: ClearMLStandIn, make_training: Callable[..., Training], root: str, tmp_path: Path, kind: str, settle: str
) -> None:
    """The server goes away in a post-upload callback: after the storage commit point, before
    ``registry.make_live``. The bytes of model_3 are in slot 0 and its record, staged with their
    digest, stays ``pending`` while the registry is down: not loadable, never a lie. Once the
    registry is back it becomes live by
    * ``next save``: the stream's next save (its ``open()`` re-runs ``recover_stream``);
    * ``repair``: ``fsck.check`` reports it (kind ``pending``, fix "promote it") once the saver
      closed, and ``fsck.repair`` promotes it;
    * ``start-up``: a new ``TrackerSaver`` on the run promotes it (start-up recovery).
    """
    down = Down(server, kind)

    def go_down(info: UploadInfo) -> None:
        if info.filename == "model_3.pt":
            down.begin()

    training = make_training(post_upload=[go_down])
    training.run(2)
    with pytest.raises(RegistryError) as caught:
        training.run(1)
    blocked = training.blocked(3)
    try:
        assert blocked <= (AT_ONCE if kind == "500" else T + MARGIN), f"{kind}: the save blocked {blocked:.1f} s"
        message = str(caught.value)
        (third_id,) = [i for i, m in server.models.items() if m.get("name") == "model_3.pt"]
        assert caught.value.record_id == third_id
        assert f"ClearML registry clearml://127.0.0.1:{server.api_host.rsplit(':', 1)[1]}/{root}" in message
        assert f"model {third_id}" in message, message
        assert ("failed with 500/0" if kind == "500" else "the server stopped answering") in message, message
        # While the registry is down, as the server holds it: model_3 pending with the staged digest
        # of the bytes in slot 0, model_1 (which slot 0 held) evicted, model_2 live.
        slot0 = training.out / PROJECT / RUN / "model.slot0.pt"
        third = state_on_server(server, "model_3.pt")
        assert third["state"] == "pending" and third["sha256"] == sha256_of(slot0)
        assert state_on_server(server, "model_1.pt")["state"] == "evicted"
        assert state_on_server(server, "model_2.pt")["state"] == "live"
    finally:
        down.end()
    found = by_name(assert_true_and_small(training.out, root, settled=False))
    assert [found[n].state for n in ("model_1.pt", "model_2.pt", "model_3.pt")] == [
        RecordState.EVICTED,
        RecordState.LIVE,
        RecordState.PENDING,
    ]
    with pytest.raises(RegistryError, match="is pending"):  # pending is not loadable
        with open_verified(found["model_3.pt"]):
            pass
    pending_id = found["model_3.pt"].id
    assert pending_id == third_id
    registry = registry_of(root)
    wait_for_probe(training.registry)
    if settle == "next save":
        training.run(1)
        assert training.live() == ["model_3.pt", "model_4.pt"]
    else:
        training.saver.close()
        if settle == "repair":
            report = fsck.check(registry, project=PROJECT)
            assert [(f.kind, f.record_id, f.fix) for f in report.problems] == [("pending", pending_id, "promote it")]
            actions: list[str] = []
            after = fsck.repair(registry, project=PROJECT, echo=actions.append)
            assert after.problems == [] and any(f"promoted record {pending_id}" in a for a in actions), actions
        else:
            again = TrackerSaver(training.out, project=PROJECT, run=RUN, registry=registry, timeout=T)
            again.close()
    final = by_name(assert_true_and_small(training.out, root))
    assert final["model_3.pt"].id == pending_id and final["model_3.pt"].state is RecordState.LIVE
    assert fsck.check(registry_of(root), project=PROJECT).problems == []


# -- we do not depend on the SDK's retry settings --------------------------------------------------------------

CHILD = """
import json, sys, time
import torch
from clearml.config import ConfigWrapper
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint
from tracker_saver import TrackerSaver

config = ConfigWrapper._init()
saver = TrackerSaver(sys.argv[1], project="outage-child", run="r", registry="clearml", timeout=float(sys.argv[2]))
handler = Checkpoint({"model": torch.nn.Linear(2, 1)}, saver, n_saved=2)
trainer = Engine(lambda engine, batch: None)
times = []

@trainer.on(Events.EPOCH_COMPLETED)
def save(engine):
    if engine.state.epoch == 3:  # the parent takes the server away, then says go
        print(json.dumps({"saved": 2, "retries": config.get("api.http.retries.total", None),
                          "wait_on_maintenance_forever": config.get("api.http.wait_on_maintenance_forever", None)}),
              flush=True)
        sys.stdin.readline()
    started = time.monotonic()
    try:
        handler(engine)
    finally:
        times.append(time.monotonic() - started)

try:
    trainer.run([0], max_epochs=3)
    error = None
except Exception as exc:
    error = f"{type(exc).__name__}: {exc}"
print(json.dumps({"error": error, "times": times}), flush=True)
"""


@pytest.mark.parametrize("kind", ["stopped", "hanging", "503"])
def test_a_training_process_with_the_sdks_default_retries_gets_its_error_within_the_timeout(
    server: ClearMLStandIn, tmp_path: Path, kind: str
) -> None:
    """The SDK's defaults (240 retries with back-off up to 120 s, waiting forever on a 503, 300 s
    reads) would block this save for many minutes; ``TrackerSaver(timeout=5)`` bounds it."""
    timeout = 5.0
    home = tmp_path / "home"
    home.mkdir()
    config = tmp_path / "clearml.conf"  # no api.http section: the SDK's own defaults
    config.write_text(
        "sdk.development { report_use_subprocess: false, suppress_update_message: true }\n"
        f'sdk.storage.cache.default_base_dir: "{(tmp_path / "cache").as_posix()}"\n'
    )
    env = {**process_env(), "CLEARML_CONFIG_FILE": str(config), "HOME": str(home)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "output"), str(timeout)],
        cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    down = Down(server, kind)
    try:
        try:
            ready = json.loads(lines.get(timeout=120))  # imports and two saves
        except queue.Empty:
            pytest.fail("the child never reported its first two saves")
        assert ready == {"saved": 2, "retries": 240, "wait_on_maintenance_forever": True}
        assert len(records_in(server, "outage-child")) == 2
        down.begin()
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        went = time.monotonic()
        try:
            result = json.loads(lines.get(timeout=timeout + 30))
        except queue.Empty:
            pytest.fail(f"the child still waits on the {kind} server {timeout + 30:.0f} s later")
        waited = time.monotonic() - went
    finally:
        down.end()
        if child.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(10)
        if child.poll() is None:
            child.kill()
        child.wait()
    assert result["error"] is not None and result["error"].startswith("RegistryError: ClearML registry"), result
    assert "creating the model of 'model_3.pt'" in result["error"]
    assert result["times"][-1] <= timeout + MARGIN and waited <= timeout + MARGIN + 2, (waited, result)


def records_in(standin: ClearMLStandIn, project: str) -> list[dict[str, Any]]:
    """The record models (with tracker_saver metadata) of ClearML project ``project``."""
    return [m for m in standin.models_in(project) if (m.get("metadata") or {}).get("state")]
