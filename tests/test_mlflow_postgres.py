"""The MLflow registry on a tracking server whose backend store is PostgreSQL (issue 28).

A throwaway PostgreSQL cluster per module (``initdb`` into a temp folder, trust auth, a free
port on 127.0.0.1, its unix socket in that folder), an ``mlflow server`` on it (the same
``start_mlflow_server`` as tests/conftest_mlflow.py), and a real Ignite training saving
through ``TrackerSaver`` into it, resumed once. Both servers are stopped and the folder removed
at the end. Skips when PostgreSQL or mlflow is missing, except in CI (``CI=true``), where it fails.

PostgreSQL refuses to run as root: as root the cluster runs as the ``postgres`` user, in a
folder of its own directly in ``/tmp`` (pytest's folders are ``0700`` root's, which that user
cannot enter), removed at the end like the rest.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest_mlflow import free_port, start_mlflow_server, stop_server
from tests.helpers import SCORES, Target, attach, model, trainer_engine

pytestmark = [pytest.mark.mlflow, pytest.mark.postgres]

#: Seconds a fresh cluster may take to accept connections.
PG_START_TIMEOUT_S = 60.0


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"PostgreSQL/MLflow is required in CI but unavailable: {reason}", pytrace=False)
    pytest.skip(f"{reason} (apt-get install postgresql; pip install -e '.[mlflow,test]' -c constraints.txt)")


def _pg_bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        _unavailable(f"no PostgreSQL {name} on PATH or in /usr/lib/postgresql/*/bin")
    return str(found)


class Cluster:
    """A PostgreSQL cluster in ``root`` on 127.0.0.1:``port``, superuser ``postgres``, trust auth."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.as_user: dict[str, Any] = {}
        if os.geteuid() == 0:  # initdb and postgres refuse root
            pw = pwd.getpwnam("postgres")
            self.as_user = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
            os.chown(root, pw.pw_uid, pw.pw_gid)
        data, sock = root / "data", root / "sock"
        self._run([_pg_bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
        self._run(["mkdir", str(sock)])
        log = (root / "postgres.log").open("wb")
        self.proc = subprocess.Popen(
            [_pg_bin("postgres"), "-D", str(data), "-p", str(self.port), "-h", "127.0.0.1", "-k", str(sock),
             "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **self.as_user,
        )  # fmt: skip
        log.close()
        try:
            self._wait_ready()
            self._run([_pg_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "mlflow"])
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + PG_START_TIMEOUT_S
        while subprocess.run([_pg_bin("pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)]).returncode:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.root / "postgres.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"PostgreSQL on port {self.port} did not start; its log ends:\n{tail}")
            time.sleep(0.1)

    def _run(self, argv: list[str]) -> None:
        done = subprocess.run(argv, capture_output=True, text=True, **self.as_user)
        if done.returncode:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")

    def uri(self, driver: str = "") -> str:
        """The ``mlflow`` database's URI; ``driver="+psycopg2"`` for SQLAlchemy (2.1 defaults to psycopg 3)."""
        return f"postgresql{driver}://postgres@127.0.0.1:{self.port}/mlflow"

    def stop(self) -> None:
        stop_server(self.proc, 2)  # SIGINT: PostgreSQL's fast shutdown


@pytest.fixture(scope="module")
def pg_mlflow() -> Iterator[tuple[str, Cluster]]:
    """An ``mlflow server`` on a throwaway PostgreSQL backend store: (tracking URI, cluster)."""
    try:
        import mlflow  # noqa: F401
        import psycopg2  # noqa: F401
    except ModuleNotFoundError as exc:
        _unavailable(f"{exc.name} is not installed")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            _unavailable("running as root and there is no 'postgres' user to run PostgreSQL as")
    root = Path(tempfile.mkdtemp(prefix="tracker-saver-pg-", dir="/tmp" if os.geteuid() == 0 else None))
    try:
        cluster = Cluster(root)
        try:
            proc, uri = start_mlflow_server(root / "mlflow", backend_store_uri=cluster.uri("+psycopg2"))
            try:
                yield uri, cluster
            finally:
                stop_server(proc)
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


class Training:
    """One process's training: a best stream (``n_saved=2``, scored) and a last stream
    ``checkpoint`` (``n_saved=2``, model + trainer), through one saver into the MLflow registry."""

    def __init__(self, tmp_path: Path, uri: str, *, resume: bool) -> None:
        from tracker_saver import resume as resume_run
        from tracker_saver.integrations.mlflow.registry import MLflowRegistry

        self.target = Target(output_uri=str(tmp_path / "out"), registry=MLflowRegistry(uri, timeout=20))
        self.saver = self.target.saver()
        self.net = model()
        self.trainer = trainer_engine(self.net)
        handlers = [
            attach(self.trainer, self.saver, {"model": self.net}, n_saved=2, prefix="best", scores=SCORES),
            attach(self.trainer, self.saver, {"model": self.net, "trainer": self.trainer}, n_saved=2),
        ]
        if resume:
            loaded = resume_run(self.saver, {"model": self.net, "trainer": self.trainer}, handlers)
            assert loaded is not None and self.trainer.state.epoch == 4, loaded

    def run(self, max_epochs: int) -> None:
        self.trainer.run([0], max_epochs=max_epochs)
        self.saver.close()


def _mlflow_status(uri: str) -> dict[str, str]:
    """MLflow's own view: the status of every logged model of experiment ``p``, by model name."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("p")
    return {m.name: str(m.status) for m in client.search_logged_models(experiment_ids=[exp.experiment_id])}


def _check(tmp_path: Path, uri: str, target: Target, best: list[tuple[int, float]], last: list[int],
           evicted: list[str]) -> None:  # fmt: skip
    from tracker_saver import find_models
    from tracker_saver.registry import open_registry

    assert target.counts() == {"best_model": 2, "checkpoint": 2}
    registry = f"mlflow:{uri}"
    assert open_registry(registry).uri == registry
    live = find_models(project="p", run="r", live=True, order_by=["stream", "-global_step"], registry=registry)
    want_best = [f"best_model_{e}_val_acc={s:.4f}.pt" for e, s in best]
    want_last = [f"checkpoint_{e}.pt" for e in last]
    assert [(r.stream, r.filename) for r in live] == [("best_model", f) for f in want_best] + [
        ("checkpoint", f) for f in want_last
    ]
    assert [r.score for r in live if r.stream == "best_model"] == [s for _, s in best]
    assert [r.name for r in live] == [r.filename for r in live]  # the semantic name, as Ignite made it
    status = _mlflow_status(uri)
    for filename in want_best + want_last:
        assert status[filename.removesuffix(".pt").replace(".", "_")] == "READY", (filename, status)
    for name in evicted:
        assert status[name] != "READY", (name, status)
    assert len(status) == len(want_best) + len(want_last) + len(evicted), status


def test_training_and_resume_on_a_postgres_backed_mlflow_server(pg_mlflow, tmp_path: Path) -> None:
    uri, cluster = pg_mlflow
    first = Training(tmp_path, uri, resume=False)
    first.run(max_epochs=4)  # scores 0.5 0.7 0.6 0.9
    _check(tmp_path, uri, first.target, best=[(4, 0.9), (2, 0.7)], last=[4, 3],
           evicted=["best_model_1_val_acc=0_5000", "best_model_3_val_acc=0_6000", "checkpoint_1", "checkpoint_2"])  # fmt: skip

    second = Training(tmp_path, uri, resume=True)  # a new process's engine, Checkpoints and saver
    second.run(max_epochs=7)  # scores 0.4 0.95 0.8
    _check(tmp_path, uri, second.target, best=[(6, 0.95), (4, 0.9)], last=[7, 6],
           evicted=["best_model_1_val_acc=0_5000", "best_model_3_val_acc=0_6000", "best_model_2_val_acc=0_7000",
                    "checkpoint_1", "checkpoint_2", "checkpoint_3", "checkpoint_4",
                    "checkpoint_5"])  # fmt: skip

    import psycopg2

    with psycopg2.connect(cluster.uri()) as conn, conn.cursor() as cur:  # the records are PostgreSQL rows
        cur.execute("SELECT status, count(*) FROM logged_models GROUP BY status ORDER BY status")
        rows = dict(cur.fetchall())
    conn.close()
    assert sum(rows.values()) == 12 and len(rows) == 2, rows
