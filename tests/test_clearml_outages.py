"""Outages of the ClearML server, against a private stand-in: stopped, frozen, or answering 500 / 503.

Each test trains with a real ``Engine`` and ``Checkpoint`` (``n_saved=2``) through
``TrackerSaver(<local folder>, registry=ClearMLRegistry(timeout=T))``, and the server goes
away in the middle of training. Every test starts its own :class:`ClearMLStandIn` (the
``server`` fixture), so stopping it never disturbs the session-wide one.

* Sync mode: the next save raises ``RegistryError`` naming the registry and the operation; the
  bound ``T`` is what ended the wait (the registry's own outage error, "timeout 3 s", or a request's
  read timeout), never the SDK's retries; a 500 is an answer and raises at once (one request).
* Async mode: the save made as the server went away returns, training goes on (an epoch's
  iterations run), and the error surfaces on a later save or on ``flush()``.
* Either way the earlier checkpoints stay live and true, and once the server is back a later
  save in the same process succeeds and nothing is left pending. Storage and registry are
  read directly afterwards (a fresh registry, the files): no lie, no extra object.
* Registry down, storage up: the bytes are committed but the record cannot become live; it
  stays ``pending`` (never loadable) until the registry is back, then the next save of the
  stream, ``fsck.repair`` or start-up recovery promotes it.
* A subprocess with the SDK's default retry settings (240 retries, waiting forever on a 503)
  still gets the ``RegistryError`` of its own ``timeout``: we do not depend on them.

No test reads the clock: each checks order and outcome. Where DESIGN promises the bound, the
error raised is the one the bound produces; after an outage, :func:`tests.waiting.let_time_pass`
moves the registry's clock past the half timeout in which it refuses requests (a later save).

(The object-store half is ``tests/test_outages.py``.)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import queue
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

from tests import forkserver
from tests.clearml_standin import ACCESS_KEY, SECRET_KEY, ClearMLStandIn
from tests.conftest_clearml import REQUIREMENTS, ClearMLServer
from tests.helpers import ROOT, process_env
from tests.waiting import let_time_pass, on_first_failure
from tracker_saver import RecordState, RegistryError, TrackerSaver, fsck
from tracker_saver.core.records import LOADABLE, Record, UploadInfo
from tracker_saver.integrations.clearml.registry import ClearMLRegistry
from tracker_saver.models import open_verified
from tracker_saver.registry import Query
from tracker_saver.storage import open_storage

pytestmark = pytest.mark.clearml

#: The bound under test: ``TrackerSaver(timeout=T)``.
T = 3.0
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
        self.since = (0, 0)  # how many requests the stand-in had answered and held when it went away

    def begin(self) -> None:
        self.since = (len(self.standin.calls), len(self.standin.hung))
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

    def requests(self, endpoint: str) -> list[int]:
        """The statuses of the ``endpoint`` requests that reached the server since it went away (0: held)."""
        answered = [c.status for c in self.standin.calls[self.since[0] :] if c.endpoint == endpoint]
        return answered + [0 for c in self.standin.hung[self.since[1] :] if c.endpoint == endpoint]

    def assert_the_bound_ended(self, message: str, endpoint: str | None = None) -> None:
        """What ended the wait is the registry's own bound, never the SDK's retries, and nothing waited
        on an answer: a 500 is raised at once; a request a frozen server holds ends by its read timeout
        (``T / 3``); a refused or 503 one is retried until the outage clock says "no answer for ...
        (timeout T s)". With ``endpoint`` (a create, never repeated after an unclear failure), the
        requests that reached the server are counted too."""
        bound = f"(timeout {T:g} s)"
        if self.kind == "500":
            assert "failed with 500/0" in message, message
        else:
            assert bound in message or (self.kind == "hanging" and "ReadTimeout" in message), message
        if endpoint is None:
            return
        tried = self.requests(endpoint)
        expected = {"500": [500], "hanging": [0], "stopped": []}  # one answer; one request held; none reached it
        if self.kind == "503":
            assert len(tried) >= 2 and set(tried) == {503}, tried  # a 503 was not processed: retried
        else:
            assert tried == expected[self.kind], tried


def registry_of(root: str, timeout: float = T) -> ClearMLRegistry:
    return ClearMLRegistry(project_root=root, timeout=timeout)


# -- training -------------------------------------------------------------------------------------------


class Training:
    """One saver and one ``Checkpoint``, trained in runs of real engines; what happened, in order, in ``events``."""

    def __init__(self, out: Path, registry: ClearMLRegistry, **saver_options: Any) -> None:
        torch.manual_seed(0)
        self.out = out
        self.net = torch.nn.Linear(4, 2)
        self.registry = registry
        self.saver = TrackerSaver(out, project=PROJECT, run=RUN, registry=registry, timeout=T, **saver_options)
        self.epoch = 0
        self.events: list[str] = []  # "iteration", "outage", "saved N", "save N raised"
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
            self.events.append("iteration")

        @trainer.on(Events.EPOCH_COMPLETED)
        def save(engine: Engine) -> None:
            self.epoch += 1
            if before_save and self.epoch in before_save:
                before_save[self.epoch]()
                self.events.append("outage")
            try:
                self.handler(engine)
            except BaseException:
                self.events.append(f"save {self.epoch} raised")
                raise
            self.events.append(f"saved {self.epoch}")

        self.saver.attach(trainer)  # flush at the end of the run (and on an error)
        trainer.run([0, 1, 2], max_epochs=epochs)

    def live(self) -> list[str]:
        return sorted(r.name for r in self.saver.records(live=True))


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
            let_time_pass(training.registry.transport._outage)
            training.saver.close()


# -- reading storage and registry directly ----------------------------------------------------------------


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def records(root: str) -> list[Record]:
    """This run's records, read by a fresh registry (nothing cached from the saver's)."""
    return registry_of(root).records.query(Query(project=PROJECT, run=RUN))


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
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and ".tracker_saver" not in p.parts)
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
def test_sync_the_next_save_raises_by_the_bound_and_a_later_one_succeeds(
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
        assert training.events[-2:] == ["iteration", "save 3 raised"]
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
        down.assert_the_bound_ended(message, "models.create")
        # Nothing changed on the server: the earlier records are live, no record was made.
        assert {m["name"] for m in server.models.values() if m.get("metadata")} == set(before)
        assert [state_on_server(server, n)["state"] for n in sorted(before)] == ["live", "live"]
    # Read back after the outage: the previous checkpoints are live and true, their files untouched.
    after = assert_true_and_small(training.out, root)
    assert {r.name: (r.state, r.sha256) for r in after} == {n: (r.state, r.sha256) for n, r in before.items()}
    let_time_pass(training.registry.transport._outage)
    training.run(1)  # the server is back: the next save succeeds
    assert training.live() == ["model_2.pt", "model_4.pt"]
    final = by_name(assert_true_and_small(training.out, root))
    assert final["model_4.pt"].state is RecordState.LIVE and final["model_1.pt"].state is RecordState.EVICTED
    assert "model_3.pt" not in final


def test_a_stop_shorter_than_half_the_bound_is_ridden_through(
    server: ClearMLStandIn, make_training: Callable[..., Training], root: str
) -> None:
    """The server is stopped before a save and back right after the save's first refused request:
    the save retries and succeeds, nothing is raised."""
    training = make_training()
    training.run(1)
    refused = on_first_failure(training.registry.transport._outage, server.resume)
    training.run(1, before_save={2: server.pause})
    assert refused and training.events[-2:] == ["outage", "saved 2"], (refused, training.events)
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
        # The save made as the outage began only took its snapshot and returned; training went on
        # (epoch 4's three iterations at least) while the background save met the outage, and its
        # error surfaced on a later save (or attach's flush).
        after = training.events[training.events.index("outage") :]
        assert after[1:5] == ["saved 3", "iteration", "iteration", "iteration"], training.events
        assert after[-1] in ("save 4 raised", "saved 4", "saved 5"), training.events
        assert "in the background: model_3.pt" in getattr(caught.value, "__notes__", []), caught.value
        assert "creating the model of 'model_3.pt'" in str(caught.value)
        down.assert_the_bound_ended(str(caught.value), "models.create")
        assert [state_on_server(server, n)["state"] for n in ("model_1.pt", "model_2.pt")] == ["live", "live"]
    finally:
        down.end()
    assert_true_and_small(training.out, root)
    let_time_pass(training.registry.transport._outage)
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
    ``registry.records.make_live``. The bytes of model_3 are in slot 0 and its record, staged with their
    digest, stays ``pending`` while the registry is down: not loadable, never a lie. Once the
    registry is back it becomes live by
    * ``next save``: the stream's next save (its ``open()`` re-runs ``settle_stream``);
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
    try:
        message = str(caught.value)
        (third_id,) = [i for i, m in server.models.items() if m.get("name") == "model_3.pt"]
        assert caught.value.record_id == third_id
        assert f"ClearML registry clearml://127.0.0.1:{server.api_host.rsplit(':', 1)[1]}/{root}" in message
        assert f"model {third_id}" in message, message
        assert ("failed with 500/0" if kind == "500" else "the server stopped answering") in message, message
        down.assert_the_bound_ended(message)
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
    let_time_pass(training.registry.transport._outage)
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
import json, sys
import torch
from clearml.config import ConfigWrapper
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint
from tracker_saver import TrackerSaver

config = ConfigWrapper._init()
saver = TrackerSaver(sys.argv[1], project="outage-child", run="r", registry="clearml", timeout=float(sys.argv[2]))
handler = Checkpoint({"model": torch.nn.Linear(2, 1)}, saver, n_saved=2)
trainer = Engine(lambda engine, batch: None)

@trainer.on(Events.EPOCH_COMPLETED)
def save(engine):
    if engine.state.epoch == 3:  # the parent takes the server away, then says go
        print(json.dumps({"saved": 2, "retries": config.get("api.http.retries.total", None),
                          "wait_on_maintenance_forever": config.get("api.http.wait_on_maintenance_forever", None)}),
              flush=True)
        sys.stdin.readline()
    handler(engine)

try:
    trainer.run([0], max_epochs=3)
    error = None
except Exception as exc:
    error = f"{type(exc).__name__}: {exc}"
print(json.dumps({"error": error}), flush=True)
"""


@pytest.mark.parametrize("kind", ["stopped", "hanging", "503"])
def test_a_training_process_with_the_sdks_default_retries_gets_the_error_of_its_own_timeout(
    server: ClearMLStandIn, tmp_path: Path, kind: str
) -> None:
    """The SDK's defaults (240 retries with back-off up to 120 s, waiting forever on a 503, 300 s
    reads) would block this save for many minutes; ``TrackerSaver(timeout=5)`` ends it: the error
    is the one of its own bound (the outage clock's "timeout 5 s", or a 5/3 s read timeout)."""
    timeout = 5.0
    home = tmp_path / "home"
    home.mkdir()
    config = tmp_path / "clearml.conf"  # no api.http section: the SDK's own defaults
    config.write_text(
        "sdk.development { report_use_subprocess: false, suppress_update_message: true,"
        f' detect_with_pip_freeze: "{REQUIREMENTS.as_posix()}" }}\n'
        f'sdk.storage.cache.default_base_dir: "{(tmp_path / "cache").as_posix()}"\n'
    )
    env = {**process_env(), "CLEARML_CONFIG_FILE": str(config), "HOME": str(home)}
    child = forkserver.spawn(  # a new process, forked from the tests' fork server (torch imported once)
        "-c", [CHILD, str(tmp_path / "output"), str(timeout)], env=env, cwd=ROOT, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
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
        try:
            result = json.loads(lines.get(timeout=300))  # a guard against a hang: the SDK's own waits are minutes
        except queue.Empty:
            pytest.fail(f"the child still waits on the {kind} server 300 s later: the SDK's retries, not ours")
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
    bound = "ReadTimeout" if kind == "hanging" else f"(timeout {timeout:g} s)"
    assert bound in result["error"], result


def records_in(standin: ClearMLStandIn, project: str) -> list[dict[str, Any]]:
    """The record models (with tracker_saver metadata) of ClearML project ``project``."""
    return [m for m in standin.models_in(project) if (m.get("metadata") or {}).get("state")]
