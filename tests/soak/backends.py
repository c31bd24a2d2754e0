"""The soak's back ends, read directly: local folder + SQLite, Ceph RGW + SQLite, the ClearML stand-in,
a real MLflow tracking server.

Nothing here goes through ``tracker_saver``: storage is read with ``os.walk`` or boto3
(``list_objects_v2``, ``list_multipart_uploads``, ``get_object``), the SQLite registry with
``sqlite3`` on the schema of ``tracker_saver/registry/migrations.py``, and the ClearML registry
from the stand-in's own store (the models the SDK created, their metadata items decoded here),
and the MLflow registry with MLflow's own client (the LoggedModels, their tags decoded here).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.clearml_standin import ACCESS_KEY, SECRET_KEY, ClearMLStandIn
from tests.conftest_ceph import empty_and_remove

__all__ = ["Backend", "Gateway", "KillingStandIn", "Obj", "Row", "open_backend"]

MiB = 1024 * 1024
#: Temp files of the local storage start with this (``tracker_saver/storage/local.py``).
TEMP_PREFIX = ".tmp-"
#: The S3 storage's write probe (``S3Storage.check``): not an object of any stream.
PROBE_NAME = ".tracker-saver-check"
#: The prefix of owner objects (one per stream: which registry owns it), never among a stream's objects.
RESERVED = ".tracker_saver/"
#: S3 storage options: 11 MiB checkpoints go up as 3 parts of at most 5 MiB (S3's minimum part).
S3_OPTIONS: dict[str, Any] = {
    "multipart_threshold": 5 * MiB,
    "multipart_chunksize": 5 * MiB,
    "max_concurrency": 2,
    "writer_part_size": 5 * MiB,  # the checkpoint writer's parts: the same 3
    "writer_concurrency": 2,
    "max_attempts": 8,
    "connect_timeout": 2,
    "read_timeout": 20,
}


@dataclass(frozen=True)
class Obj:
    """One complete object at output_uri: its key (relative to output_uri) and size."""

    key: str
    size: int


@dataclass(frozen=True)
class Row:
    """One record as the registry stores it (no ``tracker_saver`` code involved).

    ``shown`` is ClearML's own view: the model is not archived and has a uri, so ClearML's UI,
    ``Model.query_models`` and ``InputModel`` offer it as loadable (always ``False`` for SQLite).
    """

    id: str
    stream: str
    filename: str
    state: str
    slot: int | None
    key: str | None
    sha256: str | None
    size: int | None
    created: float
    priority: float | None
    shown: bool = False


@dataclass
class Backend:
    """Where a soak run writes, how its training process is configured, and how to read it back.

    Attributes:
        name: ``local``, ``s3``, ``clearml`` or ``mlflow``.
        output_uri: the saver's output_uri (a folder or ``s3://bucket/prefix``).
        registry: the training process's registry spec (a SQLite path or ``clearml:<root>``).
        env: environment for the training process (on top of this process's, less what it drops).
        drop_env: names removed from this process's environment for the training process.
        storage_options: the saver's storage options.
        pad_bytes: bytes only the last stream's checkpoints carry (S3: 11 MiB, a 3-part upload).
        max_delay: the longest random delay before a random-time kill, seconds.
        project, run: the run under test (a fresh run per soak run).
    """

    name: str
    output_uri: str
    registry: str
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)
    drop_env: tuple[str, ...] = ()
    storage_options: dict[str, Any] = field(default_factory=dict)
    pad_bytes: int = 64 * 1024
    max_delay: float = 1.5
    project: str = "soak"
    run: str = field(default_factory=lambda: f"run-{uuid.uuid4().hex[:8]}")
    s3: Any = None  # boto3 client (s3)
    bucket: str = ""
    prefix: str = ""
    standin: KillingStandIn | None = None
    gateway: Gateway | None = None
    mlflow: Any = None  # (the mlflow server process, None for a server not its own; its URI)

    # -- storage ------------------------------------------------------------------------------
    def listing(self) -> tuple[list[Obj], list[str]]:
        """``(complete objects, staged leftovers)`` under output_uri: temp files / multipart uploads."""
        if self.s3 is not None:
            return self._s3_listing()
        root = Path(self.output_uri)
        objects, staged = [], []
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                path = Path(dirpath) / name
                key = path.relative_to(root).as_posix()
                if name.startswith(TEMP_PREFIX):
                    staged.append(key)
                elif not key.startswith(RESERVED):  # owner objects: who owns each stream, not among its objects
                    objects.append(Obj(key, path.stat().st_size))
        return sorted(objects, key=lambda o: o.key), sorted(staged)

    def _s3_listing(self) -> tuple[list[Obj], list[str]]:
        base = f"{self.prefix}/"
        objects = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base):
            for item in page.get("Contents", []):
                key = item["Key"][len(base) :]
                if key != PROBE_NAME and not key.startswith(RESERVED):
                    objects.append(Obj(key, int(item["Size"])))
        staged = []
        for page in self.s3.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=base):
            staged += [f"{u['Key'][len(base) :]} (upload {u['UploadId'][:12]}…)" for u in page.get("Uploads", [])]
        return sorted(objects, key=lambda o: o.key), sorted(staged)

    def read(self, key: str) -> bytes | None:
        """The bytes of the object at ``key``, or ``None`` when there is none."""
        if self.s3 is not None:
            try:
                return bytes(self.s3.get_object(Bucket=self.bucket, Key=f"{self.prefix}/{key}")["Body"].read())
            except self.s3.exceptions.NoSuchKey:
                return None
        try:
            return (Path(self.output_uri) / key).read_bytes()
        except FileNotFoundError:
            return None

    @property
    def storage_uri(self) -> str:
        """output_uri as records carry it (``file:///abs/path`` or ``s3://bucket/prefix``)."""
        return self.output_uri if self.s3 is not None else Path(self.output_uri).resolve().as_uri()

    # -- registry -----------------------------------------------------------------------------
    def rows(self) -> list[Row]:
        """Every record of the run at this output_uri, oldest first."""
        if self.mlflow is not None:
            rows = self._mlflow_rows()
        else:
            rows = self._clearml_rows() if self.standin is not None else self._sqlite_rows()
        return sorted(rows, key=lambda r: (r.created, r.id.zfill(20)))

    def _sqlite_rows(self) -> list[Row]:
        if not Path(self.registry).exists():
            return []
        conn = sqlite3.connect(self.registry, timeout=60)
        try:
            found = conn.execute(
                "SELECT r.id, r.stream, r.filename, r.state, r.slot, r.key, r.sha256, r.size, r.created_at,"
                " m.type, m.text FROM records r"
                " LEFT JOIN metadata m ON m.record_id = r.id AND m.key = 'priority'"
                " WHERE r.project = ? AND r.run = ? AND r.output_uri = ?",
                (self.project, self.run, self.storage_uri),
            ).fetchall()
        finally:
            conn.close()
        return [
            Row(str(rid), stream, filename, state, slot, key, sha, size, created, _number(kind, text))
            for rid, stream, filename, state, slot, key, sha, size, created, kind, text in found
        ]

    def _clearml_rows(self) -> list[Row]:
        assert self.standin is not None
        with self.standin._lock:  # the server's threads change the models: read them in one go
            return [row for model in self.standin.models.values() if (row := self._clearml_row(model)) is not None]

    def _clearml_row(self, model: dict[str, Any]) -> Row | None:
        raw = model.get("metadata") or {}
        if "state" not in raw or _item(raw.get("run")) != self.run:
            return None  # not a record (a claim, another client's model), or another run's
        meta = {k: _item(v) for k, v in raw.items()}
        if meta.get("output_uri") != self.storage_uri:
            return None
        shown = "archived" not in (model.get("system_tags") or []) and bool(model.get("uri"))
        return Row(
            str(model["id"]), str(meta.get("stream")), str(meta.get("filename")), str(meta["state"]),
            _int(meta.get("slot")), _str(meta.get("slot_key")), _str(meta.get("sha256")), _int(meta.get("size")),
            float(meta.get("created_at") or 0.0), _float(meta.get("priority")), shown,
        )  # fmt: skip

    def _mlflow_rows(self) -> list[Row]:
        from mlflow import MlflowClient

        client = MlflowClient(self.mlflow[1])
        exp = client.get_experiment_by_name(self.project)
        if exp is None:
            return []
        rows, token = [], None
        while True:
            page = client.search_logged_models([exp.experiment_id], max_results=1000, page_token=token,
                                               filter_string=f"tags.`tracker_saver.run` IN ('{self.run}', '\"{self.run}\"')")  # fmt: skip
            for model in page:
                meta = _mlflow_fields(model.tags or {})
                if "state" not in meta or meta.get("output_uri") != self.storage_uri:
                    continue
                rows.append(Row(
                    str(model.model_id), str(meta["stream"]), str(meta["filename"]), str(meta["state"]),
                    _int(meta.get("slot")), _str(meta.get("key")), _str(meta.get("sha256")), _int(meta.get("size")),
                    float(meta.get("created_at") or 0.0), _float((meta.get("metadata") or {}).get("priority")),
                    str(getattr(model.status, "name", model.status)) == "READY",
                ))  # fmt: skip
            token = page.token
            if not token:
                return rows

    def aliases(self) -> dict[str, list[str]]:
        """The project's user aliases and the record ids each names, as stored: the SQLite ``aliases``
        table, the MLflow experiment's ``tracker_saver.alias.<name>`` tags, the ClearML models'
        ``alias:<name>`` tags (a record the alias names may be gone: a dangling alias)."""
        named: dict[str, list[str]] = {}
        if self.mlflow is not None:
            from mlflow import MlflowClient

            exp = MlflowClient(self.mlflow[1]).get_experiment_by_name(self.project)
            for key, value in ((exp.tags or {}) if exp is not None else {}).items():
                if key.startswith("tracker_saver.alias."):
                    named.setdefault(key.removeprefix("tracker_saver.alias."), []).append(str(value))
        elif self.standin is not None:
            with self.standin._lock:
                models = list(self.standin.models.values())
            for model in models:
                if _item((model.get("metadata") or {}).get("run")) != self.run:
                    continue  # another run's (the soak's project holds one run)
                for tag in model.get("tags") or []:
                    if tag.startswith("alias:"):
                        named.setdefault(tag.removeprefix("alias:"), []).append(str(model["id"]))
        elif Path(self.registry).exists():
            conn = sqlite3.connect(self.registry, timeout=60)
            try:
                found = conn.execute("SELECT alias, record_id FROM aliases WHERE project = ?", (self.project,))
                for alias, record_id in found.fetchall():
                    named.setdefault(alias, []).append(str(record_id))
            finally:
                conn.close()
        return named

    # -- the process and the end ------------------------------------------------------------------
    def process_env(self, crash: str) -> dict[str, str]:
        """The training process's environment, with ``TRACKER_SAVER_SOAK_CRASH`` set to ``crash``."""
        env = {k: v for k, v in os.environ.items() if not k.endswith("PROC_MASTER_ID") and k not in self.drop_env}
        env.update(self.env)
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
        env["OMP_NUM_THREADS"] = "1"
        env["TRACKER_SAVER_SOAK_CRASH"] = crash
        return env

    def close(self) -> None:
        """Stop the stand-in, remove the S3 bucket (the local files stay under ``workdir``)."""
        if self.standin is not None:
            self.standin.stop()
        if self.mlflow is not None and self.mlflow[0] is not None:  # a server of its own
            from tests.conftest_mlflow import stop_server

            stop_server(self.mlflow[0])
        if self.s3 is not None:
            empty_and_remove(self.s3, self.bucket)


def _item(item: Any) -> Any:
    """A ClearML metadata item ``{key, type, value}`` (values are strings) as a Python value."""
    if not isinstance(item, dict) or item.get("value") in (None, ""):
        return None
    kind = str(item.get("type") or "")
    return _number(kind, str(item["value"])) if kind in ("int", "float") else item["value"]


def _number(kind: str | None, text: str | None) -> Any:
    if text is None:
        return None
    try:
        return int(text) if kind == "int" else float(text) if kind == "float" else text
    except ValueError:
        return text


def _mlflow_fields(tags: dict[str, str]) -> dict[str, Any]:
    """A LoggedModel's ``tracker_saver.*`` fields, read without the package: schema 2 is plain text
    (metadata and tags JSON), schema 1 (no ``tracker_saver.schema`` tag) every value JSON."""
    plain = tags.get("tracker_saver.schema") == "2"
    out: dict[str, Any] = {}
    for key, text in tags.items():
        if not key.startswith("tracker_saver.") or key == "tracker_saver.schema":
            continue
        field = key.removeprefix("tracker_saver.")
        if not plain or field in ("metadata", "tags"):
            out[field] = json.loads(text)
        else:
            out[field] = int(text) if field in ("slot", "size") else float(text) if field == "created_at" else text
    return out


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


class KillingStandIn(ClearMLStandIn):
    """The ClearML stand-in, able to SIGKILL its client right after applying its ``n``-th request
    to one endpoint, before answering it: the process dies between two requests of one step."""

    def __init__(self) -> None:
        super().__init__()
        self._rule: list[Any] | None = None  # [endpoint, requests left, pid]
        self._rule_lock = threading.Lock()
        self.fired = False

    def arm(self, endpoint: str, count: int, pid: int) -> None:
        """Kill ``pid`` after the ``count``-th successful ``endpoint`` request from now."""
        with self._rule_lock:
            self._rule, self.fired = [endpoint, count, pid], False

    def disarm(self) -> None:
        with self._rule_lock:
            self._rule = None

    def _dispatch(self, endpoint: str, data: Any, version: str | None = None) -> tuple[int, int, str, Any]:
        answer = super()._dispatch(endpoint, data, version)
        with self._rule_lock:
            rule = self._rule
            if rule is not None and endpoint == rule[0] and answer[0] == 200:
                rule[1] -= 1
                if rule[1] == 0:
                    os.kill(rule[2], signal.SIGKILL)
                    self._rule, self.fired = None, True
        return answer

    def start(self) -> KillingStandIn:
        super().start()
        assert self._httpd is not None
        self._httpd.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
        return self


class Gateway:
    """Stops and starts the Ceph RGW of ``scripts/ceph-s3.sh`` (mon and osd keep running).

    It holds the gateway-use lock of ``tests/conftest_ceph.py`` exclusively while the gateway is
    down, so it never stops a gateway that tests in another process are using: when they go on
    using it for a minute, ``stop`` answers ``False`` and the soak counts the gateway fault as skipped.
    """

    def __init__(self, ceph: Any) -> None:
        self.ceph = ceph

    def stop(self) -> bool:
        """Stop radosgw; ``False`` (and nothing stopped) when it may not be stopped now."""
        if not self.ceph.can_restart:
            return False
        if self.ceph.lock is not None and not self.ceph.lock.exclusive(timeout=60):
            return False
        try:
            self.ceph.stop_rgw()
        except BaseException:
            self.start()
            raise
        return True

    def start(self) -> None:
        """Start radosgw again and wait until it answers; give the lock back."""
        try:
            self.ceph.start_rgw()
        finally:
            if self.ceph.lock is not None:
                self.ceph.lock.shared()


def ceph_from_env() -> Any:
    """The gateway the environment names (``TRACKER_SAVER_CEPH=1``, as ``scripts/ceph-s3.sh env`` exports)."""
    from tests.conftest_ceph import CephS3, gateway_use

    missing = [n for n in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if not os.environ.get(n)]
    if os.environ.get("TRACKER_SAVER_CEPH") != "1" or missing:
        raise SystemExit(
            "--backend s3 needs a running Ceph RGW: "
            'eval "$(bash scripts/ceph-s3.sh start)" (exports AWS_ENDPOINT_URL, the keys and TRACKER_SAVER_CEPH=1)'
        )
    lock = gateway_use()
    lock.shared()  # for the whole soak: tests in other processes never stop the gateway under it
    return CephS3(
        endpoint_url=os.environ["AWS_ENDPOINT_URL"],
        access_key=os.environ["AWS_ACCESS_KEY_ID"],
        secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        lock=lock,
    )


_AWS_DROP = (
    "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL_S3",
    "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)  # fmt: skip
_CLEARML_DROP = ("CLEARML_AUTH_TOKEN", "CLEARML_TASK_ID", "CLEARML_OFFLINE_MODE", "CLEARML_API_HOST")


@contextlib.contextmanager
def open_backend(
    name: str, *, ceph: Any = None, workdir: str | None = None, mlflow_uri: str | None = None
) -> Iterator[Backend]:
    """A fresh, empty back end for one soak run; ``ceph`` is the gateway for ``s3`` (else the env's),
    ``mlflow_uri`` a running server for ``mlflow`` (else one of its own, stopped at the end)."""
    with contextlib.ExitStack() as stack:
        root = Path(workdir) if workdir else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="soak-")))
        root.mkdir(parents=True, exist_ok=True)
        home = root / "home"
        home.mkdir(exist_ok=True)
        base = {"HOME": str(home)}
        registry = str(root / "registry" / "registry.db")
        if name == "local":
            backend = Backend(name, str(root / "output"), registry, root, env=base)
        elif name == "s3":
            ceph = ceph if ceph is not None else ceph_from_env()
            client = ceph.client()
            bucket = f"soak-{uuid.uuid4().hex[:12]}"
            client.create_bucket(Bucket=bucket)
            nowhere = str(root / "no-aws-config")
            env = {**base, **ceph.env(), "AWS_CONFIG_FILE": nowhere, "AWS_SHARED_CREDENTIALS_FILE": nowhere,
                   "AWS_EC2_METADATA_DISABLED": "true"}  # fmt: skip
            backend = Backend(
                name, f"s3://{bucket}/soak", registry, root, env=env, drop_env=_AWS_DROP,
                storage_options=dict(S3_OPTIONS), pad_bytes=11 * MiB, max_delay=4.0, s3=client, bucket=bucket,
                prefix="soak", gateway=Gateway(ceph),
            )  # fmt: skip
        elif name == "clearml":
            backend = _clearml_backend(root, base)
        elif name == "mlflow":
            from tests.conftest_mlflow import start_mlflow_server

            server = (None, mlflow_uri) if mlflow_uri else start_mlflow_server(root / "mlflow")
            env = {**base, "MLFLOW_TRACKING_URI": server[1]}
            backend = Backend(name, str(root / "output"), f"mlflow:{server[1]}", root, env=env, max_delay=3.0,
                              mlflow=server)  # fmt: skip
        else:
            raise ValueError(f"backend {name!r} is not one of local, s3, clearml, mlflow")
        stack.callback(backend.close)
        yield backend


def _clearml_backend(root: Path, base: dict[str, str]) -> Backend:
    from tests.conftest_clearml import clearml_config_text

    cache = root / "clearml-cache"
    cache.mkdir(exist_ok=True)
    config = root / "clearml.conf"
    config.write_text(clearml_config_text(cache))
    standin = KillingStandIn().start()
    host = standin.api_host
    env = {
        **base, "CLEARML_API_HOST": host, "CLEARML_WEB_HOST": host, "CLEARML_FILES_HOST": host,
        "CLEARML_CONFIG_FILE": str(config), "CLEARML_CACHE_DIR": str(cache), "CLEARML_SUPPRESS_UPDATE_MESSAGE": "1",
        "CLEARML_DISABLE_VAULT_SUPPORT": "1", "CLEARML_LOG_ENVIRONMENT": "", "CLEARML_API_ACCESS_KEY": ACCESS_KEY,
        "CLEARML_API_SECRET_KEY": SECRET_KEY,
    }  # fmt: skip
    root_project = f"soak-{uuid.uuid4().hex[:8]}"
    return Backend(
        "clearml", str(root / "output"), f"clearml:{root_project}", root, env=env, drop_env=_CLEARML_DROP,
        max_delay=3.0, standin=standin,
    )  # fmt: skip
