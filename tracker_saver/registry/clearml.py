"""The ClearML registry: records as ClearML models, read and written over the API through one ``_send``.

How records map to models (and claims to hidden models) is
:mod:`tracker_saver.registry.clearml_codec`; this module is the transport: which requests, in
which order, and the one place ClearML errors become ``RegistryError``.

State changes: ClearML has no compare-and-set, so each change reads the model, checks the
state it leaves, then writes. Toward a loadable state (``pending → live``, ``evicted →
live/revived``) metadata ``state`` is written first (the commit point) and the mirror after;
away from one (``live/revived → evicted``, ``pending → failed``) the mirror changes first
(archive, tags, uri cleared, off the task) and metadata ``state`` last. A failed follow-up
therefore never leaves a model that looks more loadable in ClearML than it is.
``stage`` reads both models in one request, checks both, writes the staged sha256/size, then
evicts the replaced record that way.

Stream claims (one writer per stream) are hidden models, one per claim (the codec says how),
made visible with their tag and holder by one ``models.create``. A claim by a live holder (:func:`tracker_saver.claims.is_alive`) makes the stream busy; dead
holders' claims are deleted; a holder renews its own (the comment's ``heartbeat``). Two
savers that find a stream free at once both create a claim, look again, and the oldest
claim (server ``created``, then id) wins; the other deletes its own and raises
``StreamBusyError``.

Queries push down what ``models.get_all`` (the call behind ``Model.query_models``) can
answer exactly: project, run, stream, filename, output_uri, slot, states, and ``==``/``in`` conditions on
string values, all as ``metadata.<key>.value`` list filters (a value starting with ``-`` or
``__$`` is an operator to the server, so it is never pushed). Ranges, ``!=``, numbers and the
sort are done client-side by :func:`tracker_saver.registry.base.select`, the same function
that defines the SQLite semantics, so both backends answer the same. Models without
tracker_saver metadata (e.g. made by ignite's ``ClearMLSaver``) are never records.

Requests per operation, measured against the stand-in (``tests/test_clearml_registry.py``
asserts them): ``create_pending`` 2 (``models.create`` + ``models.add_or_update_metadata``;
once per project 1 more to look it up); ``commit`` 4 (get, metadata, edit,
``tasks.add_or_update_model``); ``evict`` 4 (get, edit, ``tasks.delete_models``, metadata; 5
when another process listed the model, to read the task's list first); ``stage`` 5 with a
replaced record (``models.get_all``, metadata, then the eviction's edit, delete_models,
metadata); ``claim`` 3 when the stream is free (get_all, create, get_all), 2 to renew (get_all,
edit); ``release`` 2 (get_all, ``models.delete``); ``get`` 1; ``query`` 1 per 500 models.
ClearML's own ``OutputModel`` + ``update_weights`` + ``set_all_metadata`` + ``tags`` makes
~18, and ignite's ``ClearMLSaver`` ~21 per save.

Every ClearML, ``requests`` or urllib3 error is mapped to ``RegistryError`` in
:meth:`ClearMLRegistry._send`, the one boundary, with the cause chained.

Examples:
    Needs a ClearML server (``tests/test_clearml_*.py`` run these against the stand-in)::

        from clearml import Task
        task = Task.init("mnist", "resnet-lr0.1")
        registry = ClearMLRegistry()  # records of this task
        live = registry.query(Query(project="mnist", states=(RecordState.LIVE,)))
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from tracker_saver.claims import Holder, is_alive
from tracker_saver.errors import ConfigError, RecordNotFoundError, RegistryError
from tracker_saver.integrations.clearml_binding import skip_saves_while
from tracker_saver.integrations.clearml_conf import with_clearml_credentials
from tracker_saver.masking import raise_masked, strip_userinfo
from tracker_saver.outage import DEFAULT_TIMEOUT_S, Outage, OutageError, check_timeout
from tracker_saver.records import (
    DERIVED_ALIASES,
    LOADABLE,
    MetaValue,
    Record,
    RecordState,
    StreamId,
    UploadInfo,
    check_alias,
    check_display_name,
)
from tracker_saver.registry.base import Candidate, Query, Registry, busy, derived_aliases, select, with_aliases
from tracker_saver.registry.clearml_codec import (
    ALIAS_TAG_PREFIX,
    ARCHIVED_TAG,
    CLAIM_TAG_PREFIX,
    MIN_NAME,
    STATE_TAGS,
    STREAM_TAG_PREFIX,
    check_id,
    check_metadata,
    check_tags,
    claim_comment,
    claim_tag,
    encode_value,
    is_record_model,
    metadata_filters,
    mirror,
    model_record,
    pending_fields,
    pending_model,
    read_claim,
    task_run,
    with_metadata,
)
from tracker_saver.registry.clearml_codec import decode_value as decode_item
from tracker_saver.registry.clearml_session import open_session, send

__all__ = ["CLAIM_TAG_PREFIX", "ClearMLRegistry", "STATE_TAGS", "STREAM_TAG_PREFIX", "task_run"]

_INSTALL_HINT = "registry='clearml' needs clearml: pip install 'clearml>=1.16' (the clearml extra)"
_PAGE = 500  # clearml-server's largest page
_FIELDS = ["id", "name", "project", "task", "uri", "tags", "system_tags", "metadata", "created"]
_NOT_FOUND = (400, 201)  # bad_request / invalid_model_id
_MIN_API = "2.13"  # models.add_or_update_metadata, tasks.add_or_update_model / delete_models
#: What to do about an API error, by HTTP code (clearml-server's apierrors/errors.conf).
_FIXES = {
    401: ": the server no longer accepts these credentials; check CLEARML_API_ACCESS_KEY/CLEARML_API_SECRET_KEY",
    403: (
        ": the ClearML user of these credentials may not change this project; ask its owner for write "
        "access, or save to a project you own (TrackerSaver(project=...) or ClearMLRegistry(project_root=...))"
    ),
}


def _import_clearml() -> Any:
    try:
        import clearml
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(_INSTALL_HINT) from exc
    return clearml


class ClearMLRegistry(Registry):
    """Records as ClearML models: the run's task lists its live checkpoints as output models.

    Args:
        task: the ClearML ``Task`` whose checkpoints these are; ``None`` uses
            ``Task.current_task()`` at each save (records of a project and run that match no
            task are models without a task). Reading needs no task.
        project_root: a ClearML project under which record projects live
            (``"team/ckpts"`` + project ``mnist`` → ClearML project ``team/ckpts/mnist``).
        framework: the framework shown on each model.
        timeout: seconds one call may wait on a ClearML server that stopped answering (refused,
            hanging, or answering 5xx) before it raises ``RegistryError``; default 60. The
            registry logs in with a session of its own, so this never changes the SDK's
            settings (:mod:`tracker_saver.registry.clearml_session`, docs/outages.md).

    Note:
        Safe to call from the upload worker thread: the session is thread-safe and the
        registry's own caches are locked.

    Raises:
        ConfigError: ClearML is not configured, the server cannot be reached, or it is too old.

    Examples:
        With a configured ClearML server::

            registry = ClearMLRegistry(project_root="experiments")
            registry.get("4f1c...").name   # 'best_model_17_val_acc=0.9312.pt'
    """

    def __init__(
        self,
        task: Any = None,
        *,
        project_root: str | None = None,
        framework: str = "PyTorch",
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        _import_clearml()
        self._outage = Outage(check_timeout("timeout", timeout))
        if task is not None and not all(hasattr(task, a) for a in ("id", "name", "project", "session")):
            raise ConfigError(
                f"task {task!r} is not a clearml.Task: pass the result of Task.init(...), or None for the current task"
            )
        if not isinstance(framework, str) or not framework:
            raise ConfigError(f"framework {framework!r} must be a framework name such as 'PyTorch'")
        if project_root is not None:
            if not isinstance(project_root, str) or not project_root.strip("/ "):
                raise ConfigError(f"project_root {project_root!r} is empty: give a ClearML project name or None")
            project_root = project_root.strip("/ ")
        self._task = task
        self._root = project_root
        self._framework = framework
        self._session: Any = None
        self._lock = threading.RLock()
        self._project_ids: dict[str, str] = {}  # ClearML project name -> id
        self._project_names: dict[str, str] = {}  # id -> ClearML project name
        self._attached: dict[tuple[str, str], str] = {}  # (task id, entry name) -> model id we listed
        self._last_created = 0.0
        self.uri = "clearml" + (f":{self._root}" if self._root else "")
        self._get_session()  # connect now: a bad configuration fails here, before any training

    # -- the one boundary to ClearML ------------------------------------------------------------
    def _get_session(self) -> Any:
        with self._lock:
            if self._session is not None:
                return self._session
            if _import_clearml().Task.is_offline():  # checked first: offline, the SDK cannot even log in
                raise ConfigError(
                    "ClearML is in offline mode, where a ClearMLRegistry has no server: use ClearMLSaver or "
                    "TrackerSaver(registry='clearml'), which keep a journal (docs/clearml.md, Offline mode)"
                )
            try:
                host = self._task.session.host if self._task is not None else None
                session = open_session(host, self._outage.timeout)
            except Exception as exc:  # MissingConfigError, LoginError, requests errors ...
                detail = f"{type(exc).__name__}: {self._scrub(str(exc))}"
                if "error 401" in str(exc) or "invalid credentials" in str(exc).lower():
                    refused = ConfigError(
                        f"the ClearML server refused the credentials ({detail}): check CLEARML_API_ACCESS_KEY and "
                        "CLEARML_API_SECRET_KEY, or the api.credentials of clearml.conf (`clearml-init` writes them)"
                    )
                    raise_masked(refused, exc, self._scrub)
                unreachable = ConfigError(
                    f"ClearML registry cannot connect ({detail}): check that "
                    "the ClearML server is up, and run `clearml-init` or set CLEARML_API_HOST, "
                    "CLEARML_API_ACCESS_KEY and CLEARML_API_SECRET_KEY"
                )
                raise_masked(unreachable, exc, self._scrub)
            check = getattr(type(session), "check_min_api_version", None)
            if check is not None and not check(_MIN_API):
                raise ConfigError(
                    f"the ClearML server speaks API {getattr(session, 'api_version', '?')}, but the ClearML registry "
                    f"needs API {_MIN_API} (model metadata, task model lists): upgrade clearml-server to 1.0 or newer"
                )
            host = urlsplit(str(getattr(session, "host", "") or ""))
            if host.hostname:
                self.uri = f"clearml://{host.hostname}{':' + str(host.port) if host.port else ''}" + (
                    f"/{self._root}" if self._root else ""
                )
            self._session = session
            return session

    def _scrub(self, text: str) -> str:
        session = self._session
        text = strip_userinfo(text)
        for secret in (getattr(session, "secret_key", None), getattr(session, "access_key", None)):
            if secret:
                text = text.replace(str(secret), "***")
        return text

    def _send(self, request: Any, what: str, *, record_id: str | None = None) -> dict[str, Any]:
        """Send one API request; map every failure to ``RegistryError`` (chained)."""
        session = self._get_session()
        try:
            result = send(session, request, self._outage)
        except OutageError as exc:
            down = RegistryError(
                f"ClearML registry {self.uri}: {what} failed: the server stopped answering ({exc}); "
                "check that it is up, or allow a longer wait with TrackerSaver(timeout=...)",
                record_id=record_id,
            )
            raise_masked(down, exc, self._scrub)
        except Exception as exc:  # requests, urllib3, clearml LoginError/ValidationError ...
            failed = RegistryError(
                f"ClearML registry {self.uri}: {what} failed ({type(exc).__name__}: {self._scrub(str(exc))}); "
                "check that the ClearML server is reachable and the credentials are valid",
                record_id=record_id,
            )
            raise_masked(failed, exc, self._scrub)
        if result is None:
            raise RegistryError(
                f"ClearML registry {self.uri}: {what} got no answer (offline mode?)", record_id=record_id
            )
        meta = result.meta
        if meta.result_code != 200:
            codes = (meta.result_code, meta.result_subcode)
            message = self._scrub(str(meta.result_msg or ""))
            if codes == _NOT_FOUND and record_id is not None:
                raise RecordNotFoundError(
                    f"record {record_id} does not exist in {self.uri} (no such ClearML model): "
                    "see `tracker-saver models list` for ids",
                    record_id=record_id,
                )
            raise RegistryError(
                f"ClearML registry {self.uri}: {what} failed with {codes[0]}/{codes[1]} ({message})"
                + _FIXES.get(codes[0], ""),
                record_id=record_id,
            )
        data = result.response_data
        return data if isinstance(data, dict) else {}

    def _services(self) -> Any:
        # The request classes follow the API level the server announced at login, so log in first.
        self._get_session()
        from clearml.backend_api import services

        return services

    # -- projects and tasks ------------------------------------------------------------------
    def _clearml_project(self, project: str) -> str:
        return f"{self._root}/{project}" if self._root else project

    def _record_project(self, clearml_name: str) -> str:
        if self._root and clearml_name.startswith(self._root + "/"):
            return clearml_name[len(self._root) + 1 :]
        return clearml_name

    def _project_id(self, project: str, *, create: bool) -> str | None:
        name = self._clearml_project(project)
        with self._lock:
            if name in self._project_ids:
                return self._project_ids[name]
        projects = self._services().projects
        data = self._send(
            projects.GetAllRequest(name=f"^{re.escape(name)}$", only_fields=["id", "name"]),
            f"looking up project {name!r}",
        )
        found = [p for p in data.get("projects") or [] if p.get("name") == name]
        if found:
            pid = found[0]["id"]
        elif not create:
            return None
        else:
            if len(name) < MIN_NAME:
                raise ConfigError(
                    f"project {project!r} is too short for ClearML (at least {MIN_NAME} characters): "
                    "use a longer project name or a project_root"
                )
            pid = self._send(
                projects.CreateRequest(name=name, description="tracker_saver checkpoints"), f"creating project {name!r}"
            )["id"]
        with self._lock:
            self._project_ids[name] = pid
            self._project_names[pid] = name
        return str(pid)

    def _project_names_for(self, ids: Iterable[str]) -> dict[str, str]:
        with self._lock:
            missing = sorted({i for i in ids if i and i not in self._project_names})
        if missing:
            data = self._send(
                self._services().projects.GetAllRequest(id=missing, only_fields=["id", "name"]),
                "looking up project names",
            )
            with self._lock:
                for p in data.get("projects") or []:
                    self._project_names[p["id"]] = p["name"]
                    self._project_ids.setdefault(p["name"], p["id"])
        with self._lock:
            return dict(self._project_names)

    def _current_task(self) -> Any:
        if self._task is not None:
            return self._task
        from clearml import Task

        return Task.current_task()

    def artifact_task(self) -> Any:
        """The ClearML task that runs now (``None`` if none): ``LogUploader(saver=...)`` attaches logs to it."""
        return self._current_task()

    def _task_for(self, project_id: str, run: str) -> str | None:
        """The id of the registry's task when ``run`` is that task (``<task name>.<task id>``) in this project."""
        task = self._current_task()
        if task is None:
            return None
        try:
            task_project, this_run = task.project, task_run(task)
        except Exception as exc:
            raise RegistryError(f"ClearML registry {self.uri}: cannot read the current task ({exc})") from exc
        return str(task.id) if task_project == project_id and this_run == run else None

    # -- what a TrackerSaver asks of a registry that knows its run (tracker_saver.saver.RunContext)
    def run_defaults(self) -> dict[str, str]:
        """The task's project, run (``<task name>.<task id>``) and output_uri, for a ``TrackerSaver`` given none."""
        found = self.task_project_run
        if found is None:
            return {}
        defaults = {"project": found[0], "run": found[1]}
        output_uri = getattr(self._current_task(), "output_uri", None)
        if output_uri:
            defaults["output_uri"] = str(output_uri)
        return defaults

    def storage_options_for(self, output_uri: str, options: Mapping[str, Any]) -> dict[str, Any]:
        """Add clearml.conf's S3 credentials when neither ``options`` nor boto3's chain has any."""
        return with_clearml_credentials(output_uri, options)

    def guard_writes(self, is_writing: Callable[[], bool]) -> None:
        """Make ClearML's ``torch.save`` binding (``Task.init`` patches it) skip what is saved while ``is_writing()``."""
        skip_saves_while(is_writing)

    @property
    def task_project_run(self) -> tuple[str, str] | None:
        """``(project, run)`` of the registry's task, as records name them; ``None`` without a task."""
        task = self._current_task()
        if task is None:
            return None
        names = self._project_names_for([task.project])
        return self._record_project(names.get(task.project, "")), task_run(task)

    def _attach(self, model: dict[str, Any], filename: str) -> None:
        """List the model among its task's output models (entry name: Ignite's filename)."""
        task_id = model.get("task")
        if not task_id:
            return
        self._send(
            self._services().tasks.AddOrUpdateModelRequest(
                task=task_id, name=filename, model=model["id"], type="output"
            ),
            f"listing model {model['id']} on task {task_id}",
            record_id=model["id"],
        )
        with self._lock:
            self._attached[(task_id, filename)] = model["id"]

    def _detach(self, model: dict[str, Any], filename: str) -> None:
        """Take the model off its task's output models, unless the entry now names another model."""
        task_id = model.get("task")
        if not task_id:
            return
        tasks = self._services().tasks
        with self._lock:
            known = self._attached.get((task_id, filename))
        if known is None:  # attached by another process: look before deleting by name
            data = self._send(
                tasks.GetAllRequest(id=[task_id], only_fields=["id", "models.output"]),
                f"reading the models of task {task_id}",
                record_id=model["id"],
            )
            entries = [e for t in data.get("tasks") or [] for e in ((t.get("models") or {}).get("output") or [])]
            known = next((e.get("model") for e in entries if e.get("name") == filename), None)
        # Entries are keyed by name: a later save of the same filename (e.g. after a restart)
        # replaced ours, and that live model must stay listed.
        if known != model["id"]:
            return
        self._send(
            tasks.DeleteModelsRequest(task=task_id, models=[{"name": filename, "type": "output"}]),
            f"taking model {model['id']} off task {task_id}",
            record_id=model["id"],
        )
        with self._lock:
            self._attached.pop((task_id, filename), None)

    # -- models <-> records (the mapping itself is the codec's) ---------------------------------
    @staticmethod
    def _checked(model: Any, record_id: str) -> dict[str, Any]:
        if not is_record_model(model):
            raise RecordNotFoundError(
                f"ClearML model {record_id} is not a tracker_saver checkpoint record", record_id=record_id
            )
        return model

    def _fetch(self, record_id: str) -> dict[str, Any]:
        check_id(record_id)
        data = self._send(
            self._services().models.GetByIdRequest(model=record_id), f"reading model {record_id}", record_id=record_id
        )
        return self._checked(data.get("model"), record_id)

    def _fetch_many(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        """Several records' models in one request (a missing one is ``RecordNotFoundError``)."""
        for record_id in ids:
            check_id(record_id)
        data = self._send(
            self._services().models.GetAllRequest(id=ids, only_fields=_FIELDS), f"reading models {', '.join(ids)}"
        )
        found = {str(m.get("id")): m for m in data.get("models") or []}
        for record_id in ids:
            if record_id not in found:
                raise RecordNotFoundError(
                    f"record {record_id} does not exist in {self.uri} (no such ClearML model): "
                    "see `tracker-saver models list` for ids",
                    record_id=record_id,
                )
            self._checked(found[record_id], record_id)
        return found

    def _record(self, model: dict[str, Any], names: dict[str, str] | None = None) -> Record:
        if names is None or (model.get("project") and model["project"] not in names):
            names = self._project_names_for([model.get("project") or ""])
        return model_record(model, self._record_project(names.get(model.get("project") or "", "")))

    def _metadata_write(self, record_id: str, items: dict[str, MetaValue], what: str) -> None:
        self._send(
            self._services().models.AddOrUpdateMetadataRequest(
                model=record_id, metadata=[encode_value(k, v) for k, v in items.items()], replace_metadata=False
            ),
            what,
            record_id=record_id,
        )

    def _show(self, model: dict[str, Any], state: RecordState, stream: str) -> dict[str, Any]:
        """Mirror ``state`` where ClearML's UI, ``Model.query_models`` and ``InputModel`` look (:func:`mirror`)."""
        fields = mirror(model, state, stream)
        self._send(
            self._services().models.EditRequest(model=model["id"], **fields),
            f"updating model {model['id']}",
            record_id=model["id"],
        )
        return {**model, **fields}

    # -- the Registry interface --------------------------------------------------------------
    def create_pending(self, info: UploadInfo, *, uri: str) -> Record:
        metadata = check_metadata(info.metadata, f"record {info.filename!r}")
        tags = check_tags(info.tags, f"record {info.filename!r}")
        if not isinstance(info.name, str) or len(info.name.strip()) < MIN_NAME:
            raise ConfigError(
                f"record name {info.name!r} is too short for a ClearML model (at least {MIN_NAME} characters): "
                "use a longer filename_prefix or name"
            )
        project_id = self._project_id(info.project, create=True)
        assert project_id is not None
        task_id = self._task_for(project_id, info.run)
        with self._lock:
            now = max(time.time(), self._last_created + 1e-6)  # creation order survives equal clock reads
            self._last_created = now
        fields = pending_fields(info, uri=uri, metadata=metadata, created_at=now)
        new = pending_model(info, tags)
        data = self._send(
            self._services().models.CreateRequest(
                **new, project=project_id, task=task_id, framework=self._framework, ready=False
            ),
            f"creating the model of {info.filename!r}",
        )
        record_id = str(data["id"])
        self._metadata_write(record_id, fields, f"writing the metadata of model {record_id} ({info.filename!r})")
        return self._record(with_metadata({**new, "id": record_id, "project": project_id, "task": task_id}, fields))

    def commit(self, record_id: str, *, sha256: str, size: int, metadata: dict[str, MetaValue] | None = None) -> Record:
        model = self._fetch(record_id)
        record = self._record(model)
        if record.state is not RecordState.PENDING:
            raise RegistryError(
                f"record {record_id} is {record.state.value}, not pending: it cannot become live", record_id=record_id
            )
        extra = check_metadata(metadata or {}, f"record {record_id}")
        uri = record.uri or ""
        items = {**extra, "sha256": sha256, "size": int(size), "uri": uri, "state": RecordState.LIVE.value}
        self._metadata_write(record_id, items, f"committing model {record_id} ({record.filename!r})")  # commit point
        model = self._show(with_metadata(model, items), RecordState.LIVE, record.stream)
        self._attach(model, record.filename)
        return self._record(model)

    def _move(self, model: dict[str, Any], record: Record, state: RecordState, error: str | None = None) -> Record:
        """Change a checked record's state: metadata ``state`` is the truth, the rest mirrors it.

        Toward loadable the truth is written first; away from it, what ClearML's UI and
        ``Model.query_models`` see (archive, tags, uri, the task's list) changes first and the truth
        last. Either way a failed follow-up leaves the model looking no more loadable than it is.
        """
        items: dict[str, MetaValue] = {"state": state.value}
        if error is not None:
            items["error"] = str(error)
        what = f"marking model {record.id} ({record.filename!r}) {state.value}"
        if state.loadable:
            self._metadata_write(record.id, items, what)
            model = self._show(with_metadata(model, items), state, record.stream)
            if not record.state.loadable:
                self._attach(model, record.filename)
        else:
            model = self._show(model, state, record.stream)
            if record.state.loadable:
                self._detach(model, record.filename)
            self._metadata_write(record.id, items, what)
            model = with_metadata(model, items)
        return self._record(model)

    @staticmethod
    def _expect(record: Record, state: RecordState, expected: Sequence[RecordState]) -> None:
        if record.state not in expected:
            raise RegistryError(
                f"record {record.id} is {record.state.value}: it can become {state.value} only from "
                f"{', '.join(RecordState(s).value for s in expected)}",
                record_id=record.id,
            )

    def set_state(
        self, record_id: str, state: RecordState, *, expected: Sequence[RecordState], error: str | None = None
    ) -> Record:
        state = RecordState(state)
        model = self._fetch(record_id)
        record = self._record(model)
        self._expect(record, state, expected)
        return self._move(model, record, state, error)

    def stage(self, record_id: str, *, sha256: str, size: int, replaces: str | None) -> None:
        """Note the staged digest on the pending record, then evict ``replaces``; both are checked first.

        ClearML has no transaction: both models are read (one request) and checked before anything
        is written, then the digest is written, then the eviction (see :meth:`_move`).
        """
        models = self._fetch_many([record_id] if replaces is None else [record_id, replaces])
        record = self._record(models[record_id])
        if record.state is not RecordState.PENDING:
            raise RegistryError(
                f"record {record_id} is {record.state.value}, no longer pending: its save cannot commit",
                record_id=record_id,
            )
        old = self._record(models[replaces]) if replaces is not None else None
        if old is not None and old.state not in LOADABLE:
            raise RegistryError(
                f"record {old.id}, which record {record_id} replaces in its slot, is {old.state.value}, no longer "
                "live: another writer changed the slot",
                record_id=old.id,
            )
        self._metadata_write(
            record_id, {"sha256": sha256, "size": int(size)}, f"noting the staged digest of model {record_id}"
        )
        if old is not None:
            self._move(models[old.id], old, RecordState.EVICTED)

    # -- stream claims: one hidden model per claim -------------------------------------------
    def _claims(self, stream: StreamId, project_id: str) -> list[tuple[str, Holder, float]]:
        """The stream's claims, oldest first: ``(model id, holder, heartbeat)``."""
        data = self._send(
            self._services().models.GetAllRequest(
                project=[project_id], tags=[claim_tag(stream)], only_fields=["id", "comment", "created"]
            ),
            f"reading the claims on stream {stream.label}",
        )
        found: list[tuple[str, Holder, float]] = []
        for model in sorted(data.get("models") or [], key=lambda m: (str(m.get("created") or ""), str(m.get("id")))):
            claim = read_claim(model, stream)
            if claim is not None:  # else not a claim tracker_saver wrote
                found.append((str(model["id"]), *claim))
        return found

    def _settle(self, stream: StreamId, project_id: str, holder: Holder) -> tuple[tuple[str, Holder] | None, list[str]]:
        """``(the claim that holds the stream, holder's claim models)``; dead holders' claims are deleted.

        The oldest claim of a live holder (or of ``holder``) holds the stream.
        """
        winner: tuple[str, Holder] | None = None
        mine: list[str] = []
        for model_id, other, heartbeat in self._claims(stream, project_id):
            if other.token == holder.token:
                mine.append(model_id)
            elif not is_alive(other, heartbeat=heartbeat):
                self._drop_claim(model_id)
                continue
            winner = winner or (model_id, other)
        return winner, mine

    def _drop_claim(self, model_id: str) -> None:
        try:
            self._send(self._services().models.DeleteRequest(model=model_id, force=True),
                       f"deleting claim model {model_id}", record_id=model_id)  # fmt: skip
        except RecordNotFoundError:
            pass  # someone else deleted it first

    def claim(self, stream: StreamId, holder: Holder) -> None:
        project_id = self._project_id(stream.project, create=True)
        assert project_id is not None
        winner, mine = self._settle(stream, project_id, holder)
        if winner is None:
            self._send(
                self._services().models.CreateRequest(
                    uri="", name=f"tracker_saver claim: {stream.stream}"[:250], project=project_id,
                    ready=False, tags=[claim_tag(stream)], system_tags=[ARCHIVED_TAG],
                    comment=claim_comment(stream, holder, time.time()),
                ),
                f"claiming stream {stream.label}",
            )  # fmt: skip
            # Two savers may both have found the stream free: the oldest claim wins.
            winner, mine = self._settle(stream, project_id, holder)
        elif winner[0] in mine:
            self._send(
                self._services().models.EditRequest(
                    model=winner[0], comment=claim_comment(stream, holder, time.time())
                ),
                f"renewing the claim on stream {stream.label}",
                record_id=winner[0],
            )
        if winner is not None and winner[0] not in mine:
            for model_id in mine:
                self._drop_claim(model_id)
            raise busy(stream, winner[1])

    def holder(self, stream: StreamId) -> Holder | None:
        project_id = self._project_id(stream.project, create=False)
        if project_id is None:
            return None
        alive = (
            other for _, other, heartbeat in self._claims(stream, project_id) if is_alive(other, heartbeat=heartbeat)
        )
        return next(alive, None)

    def release(self, stream: StreamId, holder: Holder) -> None:
        project_id = self._project_id(stream.project, create=False)
        if project_id is None:
            return
        for model_id, other, _ in self._claims(stream, project_id):
            if other.token == holder.token:
                self._drop_claim(model_id)

    def rename(self, record_id: str, name: str) -> Record:
        check_display_name(record_id, name)
        model = self._fetch(record_id)
        if len(name.strip()) < MIN_NAME:
            raise ConfigError(
                f"new name {name!r} for record {record_id} is too short for a ClearML model "
                f"(at least {MIN_NAME} characters): give a longer name"
            )
        self._send(
            self._services().models.EditRequest(model=record_id, name=name),
            f"renaming model {record_id}",
            record_id=record_id,
        )
        return self._record({**model, "name": name.strip()})

    def add_tags(self, record_id: str, tags: Iterable[str]) -> Record:
        new = check_tags(tags, f"record {record_id}")
        model = self._fetch(record_id)
        merged = sorted({*(model.get("tags") or []), *new})
        if merged != sorted(model.get("tags") or []):
            self._send(
                self._services().models.EditRequest(model=record_id, tags=merged),
                f"tagging model {record_id}",
                record_id=record_id,
            )
        return self._record({**model, "tags": merged})

    def remove_tags(self, record_id: str, tags: Iterable[str]) -> Record:
        gone = set(check_tags(tags, f"record {record_id}"))
        model = self._fetch(record_id)
        kept = sorted(t for t in model.get("tags") or [] if t not in gone)
        if kept != sorted(model.get("tags") or []):
            self._send(
                self._services().models.EditRequest(model=record_id, tags=kept),
                f"untagging model {record_id}",
                record_id=record_id,
            )
        return self._record({**model, "tags": kept})

    def _alias_holders(self, project_id: str, alias: str) -> list[dict[str, Any]]:
        data = self._send(
            self._services().models.GetAllRequest(
                project=[project_id], tags=[ALIAS_TAG_PREFIX + alias], only_fields=["id", "tags"]
            ),
            f"looking up alias {alias!r}",
        )
        return [m for m in data.get("models") or [] if ALIAS_TAG_PREFIX + alias in (m.get("tags") or [])]

    def _edit_tags(self, model: dict[str, Any], tags: list[str], what: str) -> None:
        self._send(self._services().models.EditRequest(model=model["id"], tags=sorted(set(tags))), what,
                   record_id=str(model["id"]))  # fmt: skip

    def set_alias(self, record_id: str, alias: str) -> Record:
        """Tag the model ``alias:<alias>`` and untag every other model of its project that had it.

        ClearML has no transaction: the new holder is tagged first, so the alias always names
        a record (for a moment, two).
        """
        check_alias(alias)
        model = self._fetch(record_id)
        record = self._record(model)
        if not record.state.loadable:
            raise RegistryError(
                f"record {record_id} is {record.state.value}: an alias names a loadable record (live, revived or "
                "pinned); pick a live record (tracker-saver models list --live)",
                record_id=record_id,
            )
        tag = ALIAS_TAG_PREFIX + alias
        tags = [*(model.get("tags") or []), tag]
        self._edit_tags(model, tags, f"setting alias {alias!r} on model {record_id}")
        for other in self._alias_holders(str(model.get("project") or ""), alias):
            if str(other["id"]) != record_id:
                rest = [t for t in other.get("tags") or [] if t != tag]
                self._edit_tags(other, rest, f"moving alias {alias!r} off model {other['id']}")
        return self.get(record_id)

    def remove_alias(self, project: str, alias: str) -> None:
        project_id = self._project_id(project, create=False)
        holders = self._alias_holders(project_id, alias) if project_id is not None else []
        if not holders:
            raise RecordNotFoundError(
                f"project {project!r} has no alias {alias!r} in {self.uri}: see `tracker-saver models list "
                f"--project {project}` for its aliases"
            )
        for model in holders:
            rest = [t for t in model.get("tags") or [] if t != ALIAS_TAG_PREFIX + alias]
            self._edit_tags(model, rest, f"removing alias {alias!r} from model {model['id']}")

    def create_pinned(self, info: UploadInfo, *, uri: str, sha256: str, size: int) -> Record:
        """Create the model archived (as a pending one), write its metadata with state ``pinned``
        (the commit point), then show it: a failure in between leaves nothing that looks loadable."""
        metadata = check_metadata(info.metadata, f"record {info.filename!r}")
        tags = check_tags(info.tags, f"record {info.filename!r}")
        project_id = self._project_id(info.project, create=True)
        assert project_id is not None
        task_id = self._task_for(project_id, info.run)
        with self._lock:
            now = max(time.time(), self._last_created + 1e-6)
            self._last_created = now
        fields = {
            **pending_fields(info, uri=uri, metadata=metadata, created_at=now),
            "sha256": sha256,
            "size": int(size),
            "state": RecordState.PINNED.value,
        }
        new = pending_model(info, tags)
        data = self._send(
            self._services().models.CreateRequest(
                **new, project=project_id, task=task_id, framework=self._framework, ready=False
            ),
            f"creating the pinned model of {info.filename!r}",
        )
        record_id = str(data["id"])
        self._metadata_write(record_id, fields, f"writing the metadata of pinned model {record_id}")
        model = with_metadata({**new, "id": record_id, "project": project_id, "task": task_id}, fields)
        return self._record(self._show(model, RecordState.PINNED, info.stream))

    def delete_pinned(self, record_id: str) -> None:
        record = self._record(self._fetch(record_id))
        if record.state is not RecordState.PINNED:
            raise RegistryError(
                f"record {record_id} is {record.state.value}, not pinned: only a pinned record can be deleted "
                "(slot records stay as history)",
                record_id=record_id,
            )
        self._send(self._services().models.DeleteRequest(model=record_id, force=True),
                   f"deleting pinned model {record_id}", record_id=record_id)  # fmt: skip

    def _candidates(self, records: list[Record]) -> list[Candidate]:
        """The loadable records of the streams of ``records`` that may hold a derived alias: one query."""
        streams = {r.stream_id for r in records if r.state in LOADABLE}
        if not streams:
            return []
        projects = sorted({s.project for s in streams})
        ids = [pid for pid in (self._project_id(p, create=False) for p in projects) if pid is not None]
        params: dict[str, Any] = {"metadata.state.value": [s.value for s in LOADABLE]}
        for key in ("run", "stream"):
            values = sorted({getattr(s, key) for s in streams})
            if all(isinstance(v, str) and v and not v.startswith(("-", "__$")) for v in values):
                params[f"metadata.{key}.value"] = values
        out: list[Candidate] = []
        for model in self._all_models({"project": ids, **params}, ["id", "project", "metadata"], "reading aliases"):
            if not is_record_model(model):
                continue
            meta = {k: decode_item(v) for k, v in (model.get("metadata") or {}).items()}
            names = self._project_names_for([model.get("project") or ""])
            stream = StreamId(
                str(meta.get("output_uri") or ""),
                self._record_project(names.get(model.get("project") or "", "")),
                str(meta.get("run") or ""),
                str(meta.get("stream") or ""),
            )
            if stream in streams and meta.get("state") in ("live", "revived"):
                created, score = meta.get("created_at"), meta.get("score")
                out.append((
                    str(model["id"]), stream, float(created) if isinstance(created, (int, float)) else 0.0,
                    float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None,
                ))  # fmt: skip
        return out

    def _aliased(self, records: list[Record], known: list[Record] | None = None) -> list[Record]:
        """``records`` with derived aliases; ``known``: every loadable record of their streams, if at hand."""
        if known is not None:
            candidates: list[Candidate] = [
                (r.id, r.stream_id, r.created_at, r.score) for r in known if r.state in LOADABLE
            ]
        else:
            candidates = self._candidates(records)
        return with_aliases(records, derived_aliases(candidates), {r.id: r.aliases for r in records})

    def _all_models(self, params: dict[str, Any], fields: list[str], what: str) -> list[dict[str, Any]]:
        models: list[dict[str, Any]] = []
        page = 0
        while True:
            data = self._send(
                self._services().models.GetAllRequest(
                    only_fields=fields, order_by=["created"], page=page, page_size=_PAGE,
                    _allow_extra_fields_=True, **params,
                ),
                what,
            )  # fmt: skip
            batch = data.get("models") or []
            models.extend(batch)
            if len(batch) < _PAGE:
                return models
            page += 1

    def get(self, record_id: str) -> Record:
        return self._aliased([self._record(self._fetch(record_id))])[0]

    def query(self, query: Query) -> list[Record]:
        params: dict[str, Any] = {}
        if query.project is not None:
            pid = self._project_id(query.project, create=False)
            if pid is None:
                return []
            params["project"] = [pid]
        elif self._root:
            data = self._send(
                self._services().projects.GetAllRequest(name=f"^{re.escape(self._root)}/", only_fields=["id", "name"]),
                f"listing the projects under {self._root!r}",
            )
            ids = [p["id"] for p in data.get("projects") or []]
            if not ids:
                return []
            params["project"] = ids
        pushed = query
        if query.alias in DERIVED_ALIASES:  # only a live/revived record holds latest or best
            states = LOADABLE if query.states is None else tuple(s for s in query.states if s in LOADABLE)
            pushed = replace(query, states=states)
        elif query.alias is not None:
            params["tags"] = [ALIAS_TAG_PREFIX + query.alias]
        filters = metadata_filters(pushed)
        if filters is None:
            return []
        params.update(filters)
        models = self._all_models(params, _FIELDS, "querying models")
        names = self._project_names_for(m.get("project") or "" for m in models)
        records = [self._record(m, names) for m in models]
        # Without narrowing filters, the answer already holds every loadable record of its streams.
        whole = (
            not (query.where or query.filename or query.slot is not None or query.name or query.tag)
            and (pushed.states is None or set(LOADABLE) <= set(pushed.states))
            and query.alias in (None, *DERIVED_ALIASES)
        )
        return select(self._aliased(records, records if whole else None), query)
