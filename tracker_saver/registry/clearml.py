"""The ClearML registry: one ClearML model per checkpoint record, attached to its run's task.

How a record maps to a ClearML model:

============== ==================================================================================
record         ClearML model
============== ==================================================================================
id             the model id
project        the model's project (``project_root/`` stripped when one is given)
run            metadata ``run``; the model's ``task`` is the run's task when the registry's task
               (``task=`` or ``Task.current_task()``) is in that project and ``run`` is
               ``<task name>.<task id>`` (:func:`task_run`: a run is a task id)
output_uri     metadata ``output_uri``: records at another output_uri are another stream
name           the model name. Set once, at creation; a rename in the web UI (or any client) is
               what ``get`` returns and no later save overwrites it
filename       metadata ``filename`` (Ignite's name; never changes)
stream         metadata ``stream`` and the tag ``stream:<stream>``
state          metadata ``state`` (the truth), mirrored for people and ``Model.query_models``:
               ``pending`` archived + tag ``pending`` + no uri; ``live`` not archived, uri set,
               listed in the task's output models; ``evicted`` archived + tag ``evicted``, no
               uri, taken off the task; ``failed`` archived + tag ``failed`` + no uri;
               ``revived`` like live + tag ``revived``. So ``Model.query_models(project,
               tags=["-evicted"])`` (which leaves archived models out) lists exactly the
               loadable checkpoints, and ClearML's ``get_weights()`` downloads nothing else
slot, key      metadata ``slot`` (int) and ``key``
uri            metadata ``uri``, from creation, kept for history. The model's uri is set only
               while live or revived (registered, never uploaded: tracker_saver writes the
               bytes itself): the slot of an evicted model holds other bytes
sha256, size   metadata ``sha256`` (str) and ``size`` (int)
metadata       typed metadata items: ``int``/``float``/``bool``/``str``, ``None`` as an empty
               type and value (``Model.get_metadata_casted`` reads them back as such)
tags           the model's tags, less ``stream:*`` and the state tags (which users cannot add)
created_at     metadata ``created_at`` (float seconds, the ClearML ``created`` is coarser)
error          metadata ``error``
============== ==================================================================================

Metadata keys ``stream``, ``filename``, ``run``, ``key``, ``state``, ``error`` and
``output_uri`` are the record's own fields: user metadata cannot use them (``ConfigError``).

State changes: ClearML has no compare-and-set, so each change reads the model, checks the
state it leaves, then writes. Toward a loadable state (``pending → live``, ``evicted →
live/revived``) metadata ``state`` is written first (the commit point) and the mirror after;
away from one (``live/revived → evicted``, ``pending → failed``) the mirror changes first
(archive, tags, uri cleared, off the task) and metadata ``state`` last. A failed follow-up
therefore never leaves a model that looks more loadable in ClearML than it is.
``stage`` reads both models in one request, checks both, writes the staged sha256/size, then
evicts the replaced record that way.

Stream claims (one writer per stream) are hidden models, one per claim: archived, no task, no
metadata ``state`` (so never a record), tag ``claim:<hash of the stream id>`` and the holder
as JSON in the comment, both set by the one ``models.create`` that makes the claim visible.
A claim by a live holder (:func:`tracker_saver.claims.is_alive`) makes the stream busy; dead
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

import hashlib
import json
import math
import re
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

from tracker_saver.claims import Holder, is_alive
from tracker_saver.errors import ConfigError, RecordNotFoundError, RegistryError
from tracker_saver.records import LOADABLE, MetaValue, Record, RecordState, StreamId, UploadInfo, clean_metadata
from tracker_saver.registry.base import RECORD_FIELDS, Query, Registry, busy, select

__all__ = ["CLAIM_TAG_PREFIX", "ClearMLRegistry", "STATE_TAGS", "STREAM_TAG_PREFIX", "task_run"]

_INSTALL_HINT = "registry='clearml' needs clearml: pip install 'tracker-saver[clearml]'"

#: Tag that shows a record's state in the ClearML UI (``live`` has none).
STATE_TAGS = {
    RecordState.PENDING: "pending",
    RecordState.EVICTED: "evicted",
    RecordState.FAILED: "failed",
    RecordState.REVIVED: "revived",
}
#: States whose model is archived: not usable, hidden by ``Model.query_models`` and the UI.
_ARCHIVED = (RecordState.PENDING, RecordState.EVICTED, RecordState.FAILED)
#: A record's stream as a tag, e.g. ``stream:best_model``.
STREAM_TAG_PREFIX = "stream:"
_ARCHIVED_TAG = "archived"
#: Metadata keys that hold the record's own fields; they are not in ``Record.metadata``.
_FIELD_KEYS = ("stream", "filename", "run", "key", "state", "error", "output_uri")
#: Metadata keys ``Record.metadata`` shows only once the record was committed (as SQLite does).
_COMMIT_KEYS = ("sha256", "size", "uri")
#: A stream's claim model carries the tag ``claim:<hash of the stream id>``.
CLAIM_TAG_PREFIX = "claim:"
_CLAIM_KEYS = ("output_uri", "project", "run", "stream")
_MIN_NAME = 3  # clearml-server refuses shorter model, task and project names
_PAGE = 500  # clearml-server's largest page
_FIELDS = ["id", "name", "project", "task", "uri", "tags", "system_tags", "metadata", "created"]
_NOT_FOUND = (400, 201)  # bad_request / invalid_model_id
_MIN_API = "2.13"  # models.add_or_update_metadata, tasks.add_or_update_model / delete_models


def task_run(task: Any) -> str:
    """The run of a ClearML task's checkpoints: ``<task name>.<task id>``, as ClearML names its folders.

    A new task with the same name is a new run; ``continue_last_task`` continues the same one.
    """
    return f"{task.name}.{task.id}"


def _import_clearml() -> Any:
    try:
        import clearml
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(_INSTALL_HINT) from exc
    return clearml


def _encode(key: str, value: MetaValue) -> dict[str, str]:
    if value is None:
        return {"key": key, "type": "", "value": ""}  # the SDK casts an empty type and value to None
    if isinstance(value, bool):
        return {"key": key, "type": "bool", "value": str(value)}
    if isinstance(value, int):
        return {"key": key, "type": "int", "value": str(value)}
    if isinstance(value, float):
        return {"key": key, "type": "float", "value": repr(value)}
    return {"key": key, "type": "str", "value": str(value)}


def _decode(item: Any) -> MetaValue:
    if not isinstance(item, dict):
        return None
    kind, value = str(item.get("type") or "").lower(), item.get("value")
    if value is None or (value == "" and kind in ("", "none", "nonetype")):
        return None
    try:
        if kind == "int":
            return int(value)
        if kind == "float":
            number = float(value)
            return None if math.isnan(number) else number  # ±inf is a priority Ignite compares
        if kind == "bool":
            return str(value).strip().lower() in ("true", "1", "yes")
    except ValueError:
        pass
    return str(value)


def _pushable(value: Any) -> bool:
    """Whether clearml-server matches ``value`` literally in a list filter."""
    return isinstance(value, str) and not value.startswith(("-", "__$"))


class ClearMLRegistry(Registry):
    """Records as ClearML models: the run's task lists its live checkpoints as output models.

    Args:
        task: the ClearML ``Task`` whose checkpoints these are; ``None`` uses
            ``Task.current_task()`` at each save (records of a project and run that match no
            task are models without a task). Reading needs no task.
        project_root: a ClearML project under which record projects live
            (``"team/ckpts"`` + project ``mnist`` → ClearML project ``team/ckpts/mnist``).
        framework: the framework shown on each model.

    Note:
        Safe to call from the upload worker thread: the SDK session is shared and the
        registry's own caches are locked.

    Raises:
        ConfigError: ClearML is not configured, the server cannot be reached, or it is too old.

    Examples:
        With a configured ClearML server::

            registry = ClearMLRegistry(project_root="experiments")
            registry.get("4f1c...").name   # 'best_model_17_val_acc=0.9312.pt'
    """

    def __init__(self, task: Any = None, *, project_root: str | None = None, framework: str = "PyTorch") -> None:
        _import_clearml()
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
            try:
                if self._task is not None:
                    session = self._task.session
                else:
                    from clearml.backend_interface.base import InterfaceBase

                    session = InterfaceBase._get_default_session()
            except Exception as exc:  # MissingConfigError, LoginError, requests errors ...
                raise ConfigError(
                    f"ClearML registry cannot connect ({type(exc).__name__}: {self._scrub(str(exc))}): check that "
                    "the ClearML server is up, and run `clearml-init` or set CLEARML_API_HOST, "
                    "CLEARML_API_ACCESS_KEY and CLEARML_API_SECRET_KEY"
                ) from exc
            if getattr(session, "_offline_mode", False):
                raise ConfigError(
                    "ClearML is in offline mode, which cannot hold a registry: unset CLEARML_OFFLINE_MODE "
                    "or use the SQLite registry"
                )
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
        for secret in (getattr(session, "secret_key", None), getattr(session, "access_key", None)):
            if secret:
                text = text.replace(str(secret), "***")
        return text

    def _send(self, request: Any, what: str, *, record_id: str | None = None) -> dict[str, Any]:
        """Send one API request; map every failure to ``RegistryError`` (chained)."""
        session = self._get_session()
        try:
            result = session.send(request)
        except Exception as exc:  # requests, urllib3, clearml LoginError/ValidationError ...
            raise RegistryError(
                f"ClearML registry {self.uri}: {what} failed ({type(exc).__name__}: {self._scrub(str(exc))}); "
                "check that the ClearML server is reachable and the credentials are valid",
                record_id=record_id,
            ) from exc
        if result is None:
            raise RegistryError(f"ClearML registry {self.uri}: {what} got no answer (offline mode?)", record_id=record_id)
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
                f"ClearML registry {self.uri}: {what} failed with {codes[0]}/{codes[1]} ({message})",
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
            if len(name) < _MIN_NAME:
                raise ConfigError(
                    f"project {project!r} is too short for ClearML (at least {_MIN_NAME} characters): "
                    "use a longer project name or a project_root"
                )
            pid = self._send(projects.CreateRequest(name=name, description="tracker_saver checkpoints"),
                             f"creating project {name!r}")["id"]
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

    def storage_options_for(self, output_uri: str, options: dict[str, Any]) -> dict[str, Any]:
        """Add clearml.conf's S3 credentials when neither ``options`` nor boto3's chain has any."""
        if any(k in options for k in ("aws_access_key_id", "profile")):
            return options
        from tracker_saver.clearml import clearml_s3_options

        return {**clearml_s3_options(output_uri, options.get("endpoint_url")), **options}

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
            self._services().tasks.AddOrUpdateModelRequest(task=task_id, name=filename, model=model["id"], type="output"),
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

    # -- models <-> records ------------------------------------------------------------------
    @staticmethod
    def _check_id(record_id: str) -> None:
        if not isinstance(record_id, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,128}", record_id):
            raise RecordNotFoundError(
                f"record id {record_id!r} is not a ClearML model id: see `tracker-saver models list` for ids",
                record_id=str(record_id),
            )

    @staticmethod
    def _checked(model: Any, record_id: str) -> dict[str, Any]:
        if not isinstance(model, dict) or "state" not in (model.get("metadata") or {}):
            raise RecordNotFoundError(
                f"ClearML model {record_id} is not a tracker_saver checkpoint record", record_id=record_id
            )
        return model

    def _fetch(self, record_id: str) -> dict[str, Any]:
        self._check_id(record_id)
        data = self._send(
            self._services().models.GetByIdRequest(model=record_id), f"reading model {record_id}", record_id=record_id
        )
        return self._checked(data.get("model"), record_id)

    def _fetch_many(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        """Several records' models in one request (a missing one is ``RecordNotFoundError``)."""
        for record_id in ids:
            self._check_id(record_id)
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
        meta = {k: _decode(v) for k, v in (model.get("metadata") or {}).items()}
        if names is None or (model.get("project") and model["project"] not in names):
            names = self._project_names_for([model.get("project") or ""])
        try:
            state = RecordState(meta.get("state"))
        except ValueError:
            state = RecordState.FAILED  # someone edited the state by hand: never treat it as loadable
        stream = str(meta.get("stream") or "")
        # a staged (pending) record already carries sha256 and size: metadata shows them once committed
        committed = state not in (RecordState.PENDING, RecordState.FAILED)
        user_meta = {
            k: v for k, v in meta.items() if k not in _FIELD_KEYS and (committed or k not in _COMMIT_KEYS)
        }
        managed = {STREAM_TAG_PREFIX + stream, *STATE_TAGS.values()}
        slot, size, created = meta.get("slot"), meta.get("size"), meta.get("created_at")
        return Record(
            id=str(model["id"]),
            project=self._record_project(names.get(model.get("project") or "", "")),
            run=str(meta.get("run") or ""),
            stream=stream,
            filename=str(meta.get("filename") or ""),
            name=str(model.get("name") or ""),
            state=state,
            slot=slot if isinstance(slot, int) and not isinstance(slot, bool) else None,
            key=meta.get("key") if isinstance(meta.get("key"), str) else None,  # type: ignore[arg-type]
            uri=(model.get("uri") or meta.get("uri") or None),  # type: ignore[arg-type]
            sha256=meta.get("sha256") if isinstance(meta.get("sha256"), str) else None,  # type: ignore[arg-type]
            size=size if isinstance(size, int) and not isinstance(size, bool) else None,
            metadata=user_meta,
            tags=tuple(sorted(t for t in model.get("tags") or [] if t not in managed)),
            created_at=float(created) if isinstance(created, (int, float)) else 0.0,
            error=meta.get("error") if isinstance(meta.get("error"), str) else None,  # type: ignore[arg-type]
            output_uri=str(meta["output_uri"]) if isinstance(meta.get("output_uri"), str) else None,
        )

    @staticmethod
    def _check_metadata(metadata: dict[str, MetaValue], what: str) -> dict[str, MetaValue]:
        try:
            clean = clean_metadata(metadata)
        except TypeError as exc:  # never let a TypeError escape: Ignite would retry without metadata
            raise ConfigError(f"{what}: {exc}") from exc
        taken = sorted(k for k in clean if k in _FIELD_KEYS)
        if taken:
            raise ConfigError(
                f"{what} metadata key(s) {', '.join(map(repr, taken))} are record fields in the ClearML "
                f"registry ({', '.join(_FIELD_KEYS)}): rename them in your callback"
            )
        return clean

    @staticmethod
    def _check_tags(tags: Iterable[str], what: str) -> list[str]:
        out = []
        for tag in tags:
            tag = str(tag)
            if not tag or tag in STATE_TAGS.values() or tag.startswith(STREAM_TAG_PREFIX):
                raise ConfigError(
                    f"tag {tag!r} for {what} is reserved by the ClearML registry (state tags "
                    f"{', '.join(STATE_TAGS.values())} and 'stream:*'): choose another tag"
                )
            out.append(tag)
        return out

    def _metadata_write(self, record_id: str, items: dict[str, MetaValue], what: str) -> None:
        self._send(
            self._services().models.AddOrUpdateMetadataRequest(
                model=record_id, metadata=[_encode(k, v) for k, v in items.items()], replace_metadata=False
            ),
            what,
            record_id=record_id,
        )

    def _show(self, model: dict[str, Any], state: RecordState, stream: str) -> dict[str, Any]:
        """Mirror ``state`` where ClearML's UI, ``Model.query_models`` and ``InputModel`` look: the tags,
        the archive flag and the uri (set only while loadable: ClearML must never download what a
        slot holds now for a model that is not its checkpoint; metadata ``uri`` keeps it)."""
        state_tags = set(STATE_TAGS.values())
        tags = [t for t in model.get("tags") or [] if t not in state_tags]
        if state in STATE_TAGS:
            tags.append(STATE_TAGS[state])
        if STREAM_TAG_PREFIX + stream not in tags:
            tags.append(STREAM_TAG_PREFIX + stream)
        system_tags = [t for t in model.get("system_tags") or [] if t != _ARCHIVED_TAG]
        if state in _ARCHIVED:
            system_tags.append(_ARCHIVED_TAG)
        uri = _decode((model.get("metadata") or {}).get("uri")) or model.get("uri") or ""
        fields: dict[str, Any] = {
            "tags": sorted(set(tags)),
            "system_tags": sorted(set(system_tags)),
            "uri": str(uri) if state.loadable else "",
        }
        self._send(
            self._services().models.EditRequest(model=model["id"], **fields),
            f"updating model {model['id']}",
            record_id=model["id"],
        )
        return {**model, **fields}

    # -- the Registry interface --------------------------------------------------------------
    def create_pending(self, info: UploadInfo, *, uri: str) -> Record:
        metadata = self._check_metadata(info.metadata, f"record {info.filename!r}")
        tags = self._check_tags(info.tags, f"record {info.filename!r}")
        if not isinstance(info.name, str) or len(info.name.strip()) < _MIN_NAME:
            raise ConfigError(
                f"record name {info.name!r} is too short for a ClearML model (at least {_MIN_NAME} characters): "
                "use a longer filename_prefix or name"
            )
        project_id = self._project_id(info.project, create=True)
        assert project_id is not None
        task_id = self._task_for(project_id, info.run)
        with self._lock:
            now = max(time.time(), self._last_created + 1e-6)  # creation order survives equal clock reads
            self._last_created = now
        fields = {
            **metadata,
            "slot": info.slot,
            "created_at": now,
            "stream": info.stream,
            "filename": info.filename,
            "run": info.run,
            "key": info.key,
            "uri": uri,
            "output_uri": info.output_uri,
            "state": RecordState.PENDING.value,
        }
        models = self._services().models
        data = self._send(
            models.CreateRequest(
                uri="",  # no uri until live: a pending model must not look loadable
                name=info.name,
                project=project_id,
                task=task_id,
                framework=self._framework,
                ready=False,
                tags=sorted({*tags, STREAM_TAG_PREFIX + info.stream, STATE_TAGS[RecordState.PENDING]}),
                system_tags=[_ARCHIVED_TAG],
                comment=f"tracker_saver checkpoint {info.filename} of run {info.run}",
            ),
            f"creating the model of {info.filename!r}",
        )
        record_id = str(data["id"])
        self._metadata_write(record_id, fields, f"writing the metadata of model {record_id} ({info.filename!r})")
        model = {
            "id": record_id, "name": info.name, "project": project_id, "task": task_id, "uri": "",
            "tags": sorted({*tags, STREAM_TAG_PREFIX + info.stream, "pending"}), "system_tags": [_ARCHIVED_TAG],
            "metadata": {k: _encode(k, v) for k, v in fields.items()},
        }
        return self._record(model)

    def commit(self, record_id: str, *, sha256: str, size: int, metadata: dict[str, MetaValue] | None = None) -> Record:
        model = self._fetch(record_id)
        record = self._record(model)
        if record.state is not RecordState.PENDING:
            raise RegistryError(
                f"record {record_id} is {record.state.value}, not pending: it cannot become live", record_id=record_id
            )
        extra = self._check_metadata(metadata or {}, f"record {record_id}")
        uri = record.uri or ""
        items = {**extra, "sha256": sha256, "size": int(size), "uri": uri, "state": RecordState.LIVE.value}
        self._metadata_write(record_id, items, f"committing model {record_id} ({record.filename!r})")  # commit point
        model["metadata"] = {**(model.get("metadata") or {}), **{k: _encode(k, v) for k, v in items.items()}}
        model = self._show(model, RecordState.LIVE, record.stream)
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
        written = {**(model.get("metadata") or {}), **{k: _encode(k, v) for k, v in items.items()}}
        what = f"marking model {record.id} ({record.filename!r}) {state.value}"
        if state.loadable:
            self._metadata_write(record.id, items, what)
            model = self._show({**model, "metadata": written}, state, record.stream)
            if not record.state.loadable:
                self._attach(model, record.filename)
        else:
            model = self._show(model, state, record.stream)
            if record.state.loadable:
                self._detach(model, record.filename)
            self._metadata_write(record.id, items, what)
            model = {**model, "metadata": written}
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
    @staticmethod
    def _claim_tag(stream: StreamId) -> str:
        key = json.dumps([getattr(stream, k) for k in _CLAIM_KEYS])
        return CLAIM_TAG_PREFIX + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    @staticmethod
    def _claim_text(stream: StreamId, holder: Holder) -> str:
        return json.dumps({
            "kind": "claim", **{k: getattr(stream, k) for k in _CLAIM_KEYS},
            "token": holder.token, "host": holder.host, "pid": holder.pid, "started": holder.started,
            "since": holder.since, "command": holder.command, "heartbeat": time.time(),
        })  # fmt: skip

    def _claims(self, stream: StreamId, project_id: str) -> list[tuple[str, Holder, float]]:
        """The stream's claims, oldest first: ``(model id, holder, heartbeat)``."""
        data = self._send(
            self._services().models.GetAllRequest(
                project=[project_id], tags=[self._claim_tag(stream)], only_fields=["id", "comment", "created"]
            ),
            f"reading the claims on stream {stream.label}",
        )
        found: list[tuple[str, Holder, float]] = []
        for model in sorted(data.get("models") or [], key=lambda m: (str(m.get("created") or ""), str(m.get("id")))):
            try:
                doc = json.loads(model.get("comment") or "")
                if doc.get("kind") != "claim" or any(doc.get(k) != getattr(stream, k) for k in _CLAIM_KEYS):
                    continue
                holder = Holder(token=str(doc["token"]), host=str(doc["host"]), pid=int(doc["pid"]),
                                started=int(doc["started"]), since=float(doc["since"]), command=str(doc["command"]))
                found.append((str(model["id"]), holder, float(doc["heartbeat"])))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # not a claim tracker_saver wrote
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
                    ready=False, tags=[self._claim_tag(stream)], system_tags=[_ARCHIVED_TAG],
                    comment=self._claim_text(stream, holder),
                ),
                f"claiming stream {stream.label}",
            )  # fmt: skip
            # Two savers may both have found the stream free: the oldest claim wins.
            winner, mine = self._settle(stream, project_id, holder)
        elif winner[0] in mine:
            self._send(
                self._services().models.EditRequest(model=winner[0], comment=self._claim_text(stream, holder)),
                f"renewing the claim on stream {stream.label}",
                record_id=winner[0],
            )
        if winner is not None and winner[0] not in mine:
            for model_id in mine:
                self._drop_claim(model_id)
            raise busy(stream, winner[1])

    def release(self, stream: StreamId, holder: Holder) -> None:
        project_id = self._project_id(stream.project, create=False)
        if project_id is None:
            return
        for model_id, other, _ in self._claims(stream, project_id):
            if other.token == holder.token:
                self._drop_claim(model_id)

    def rename(self, record_id: str, name: str) -> Record:
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"new name {name!r} for record {record_id} is empty: give a non-empty name")
        model = self._fetch(record_id)
        if len(name.strip()) < _MIN_NAME:
            raise ConfigError(
                f"new name {name!r} for record {record_id} is too short for a ClearML model "
                f"(at least {_MIN_NAME} characters): give a longer name"
            )
        self._send(self._services().models.EditRequest(model=record_id, name=name), f"renaming model {record_id}",
                   record_id=record_id)
        return self._record({**model, "name": name.strip()})

    def add_tags(self, record_id: str, tags: Iterable[str]) -> Record:
        new = self._check_tags(tags, f"record {record_id}")
        model = self._fetch(record_id)
        merged = sorted({*(model.get("tags") or []), *new})
        if merged != sorted(model.get("tags") or []):
            self._send(self._services().models.EditRequest(model=record_id, tags=merged),
                       f"tagging model {record_id}", record_id=record_id)
        return self._record({**model, "tags": merged})

    def get(self, record_id: str) -> Record:
        return self._record(self._fetch(record_id))

    def query(self, query: Query) -> list[Record]:
        for cond in query.where:
            if cond.key in RECORD_FIELDS:
                raise ConfigError(f"where key {cond.key!r} is a record field: filter it with the query's own argument")
        params: dict[str, Any] = {}
        if query.project is not None:
            pid = self._project_id(query.project, create=False)
            if pid is None:
                return []
            params["project"] = [pid]
        elif self._root:
            data = self._send(
                self._services().projects.GetAllRequest(
                    name=f"^{re.escape(self._root)}/", only_fields=["id", "name"]
                ),
                f"listing the projects under {self._root!r}",
            )
            ids = [p["id"] for p in data.get("projects") or []]
            if not ids:
                return []
            params["project"] = ids
        states = query.states if query.states is not None else tuple(RecordState)
        if not states:
            return []
        # Only tracker_saver models carry metadata "state"; this also pushes the state filter down.
        params["metadata.state.value"] = sorted({RecordState(s).value for s in states})
        for key in ("run", "stream", "filename", "output_uri"):
            value = getattr(query, key)
            if value is not None and _pushable(value):
                params[f"metadata.{key}.value"] = [value]
        if isinstance(query.slot, int) and not isinstance(query.slot, bool):
            params["metadata.slot.value"] = [str(query.slot)]
        for cond in query.where:
            name = f"metadata.{cond.key}.value"
            # a '.' or '$' in the key would be read as a path by the server
            if cond.key in _FIELD_KEYS or name in params or not re.fullmatch(r"[A-Za-z0-9_-]+", cond.key):
                continue
            values = [cond.value] if cond.op == "==" else list(cond.value) if cond.op == "in" else None
            if values and all(_pushable(v) for v in values):
                params[name] = values
        models: list[dict[str, Any]] = []
        page = 0
        while True:
            data = self._send(
                self._services().models.GetAllRequest(
                    only_fields=_FIELDS, order_by=["created"], page=page, page_size=_PAGE,
                    _allow_extra_fields_=True, **params,
                ),
                "querying models",
            )
            batch = data.get("models") or []
            models.extend(batch)
            if len(batch) < _PAGE:
                break
            page += 1
        names = self._project_names_for(m.get("project") or "" for m in models)
        return select((self._record(m, names) for m in models), query)
