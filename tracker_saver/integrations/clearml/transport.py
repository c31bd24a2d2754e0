"""The ClearML registry's transport: its own session, every request through one ``send``, projects, model reads.

Every ClearML, ``requests`` or urllib3 error is mapped to ``RegistryError`` in
:meth:`ClearMLTransport.send`, the one boundary, with the cause chained. The registry
(:class:`tracker_saver.integrations.clearml.registry.ClearMLRegistry`) holds one transport and
hands it to each of its collaborators (tasks, states, labels, claims).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from tracker_saver.core.errors import ConfigError, RecordNotFoundError, RegistryError
from tracker_saver.core.extras import missing_extra
from tracker_saver.core.masking import raise_masked, strip_userinfo
from tracker_saver.core.outage import DEFAULT_TIMEOUT_S, Outage, OutageError, check_timeout
from tracker_saver.core.records import MetaValue, Record
from tracker_saver.integrations.clearml.codec import MIN_NAME, check_id, encode_value, is_record_model, model_record
from tracker_saver.integrations.clearml.session import open_session, send

__all__ = ["MODEL_FIELDS", "ClearMLTransport", "TaskNotWritableError"]

_PAGE = 500  # clearml-server's largest page
MODEL_FIELDS = ["id", "name", "project", "task", "uri", "tags", "system_tags", "metadata", "created"]
_NOT_FOUND = (400, 201)  # bad_request / invalid_model_id
#: ``bad_request.invalid_task_status``: clearml-server changes a task's model list (and its artifacts)
#: only while the task is ``created`` or ``in_progress`` (``bll/task/utils.get_task_for_update``).
_TASK_NOT_WRITABLE = (400, 110)
_MIN_API = "2.13"  # models.add_or_update_metadata, tasks.add_or_update_model / delete_models
#: What to do about an API error, by HTTP code (clearml-server's apierrors/errors.conf).
_FIXES = {
    401: ": the server no longer accepts these credentials; check CLEARML_API_ACCESS_KEY/CLEARML_API_SECRET_KEY",
    403: (
        ": the ClearML user of these credentials may not change this project; ask its owner for write "
        "access, or save to a project you own (TrackerSaver(project=...) or ClearMLRegistry(project_root=...))"
    ),
}


class TaskNotWritableError(RegistryError):
    """The server refused to change a task because it has finished (``400/110 Invalid task status``).

    Caught where a finished task is expected (listing a model on it): the model stays linked by
    its ``task`` field only.
    """


def _import_clearml() -> Any:
    try:
        import clearml
    except ModuleNotFoundError as exc:
        raise missing_extra("registry='clearml'", "clearml", exc) from exc
    return clearml


class ClearMLTransport:
    """A ClearML registry's connection: the session it logs in with, ``send``, its projects and model reads.

    Args:
        task: a ``clearml.Task`` whose session's server to log in to; ``None``: the configured server.
        project_root: a ClearML project under which record projects live (``None``: none).
        timeout: seconds one call may wait on a server that stopped answering.

    The arguments are checked here; the first request (or :meth:`session`) logs in.

    Examples:
        Needs a ClearML server (``tests/test_clearml_*.py`` run these against the stand-in)::

            transport = ClearMLTransport(project_root="experiments")
            transport.record(transport.fetch("4f1c...")).project   # 'mnist'
    """

    def __init__(
        self, task: Any = None, *, project_root: str | None = None, timeout: float = DEFAULT_TIMEOUT_S
    ) -> None:
        _import_clearml()
        self._outage = Outage(check_timeout("timeout", timeout))
        if task is not None and not all(hasattr(task, a) for a in ("id", "name", "project", "session")):
            raise ConfigError(
                f"task {task!r} is not a clearml.Task: pass the result of Task.init(...), or None for the current task"
            )
        if project_root is not None:
            if not isinstance(project_root, str) or not project_root.strip("/ "):
                raise ConfigError(f"project_root {project_root!r} is empty: give a ClearML project name or None")
            project_root = project_root.strip("/ ")
        self._task = task
        #: The ClearML project that record projects live under (``None``: none).
        self.root = project_root
        self._session: Any = None
        self._lock = threading.RLock()
        self._project_ids: dict[str, str] = {}  # ClearML project name -> id
        self._project_names: dict[str, str] = {}  # id -> ClearML project name
        #: A URI-like description for messages: ``clearml://HOST[:PORT][/ROOT]`` once logged in.
        self.uri = "clearml" + (f":{self.root}" if self.root else "")

    # -- the one boundary to ClearML ------------------------------------------------------------
    def session(self) -> Any:
        """The logged-in API session (logs in on the first call; ``ConfigError`` with the fix if it cannot)."""
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
                    f"/{self.root}" if self.root else ""
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

    def send(self, request: Any, what: str, *, record_id: str | None = None) -> dict[str, Any]:
        """Send one API request; map every failure to ``RegistryError`` (chained)."""
        session = self.session()
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
            if codes == _TASK_NOT_WRITABLE:
                raise TaskNotWritableError(
                    f"ClearML registry {self.uri}: {what} failed with {codes[0]}/{codes[1]} ({message}): "
                    "the task has finished, and clearml-server changes a task only while it is created or "
                    "in_progress",
                    record_id=record_id,
                )
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

    def services(self) -> Any:
        """``clearml.backend_api.services``, whose request classes follow the API level the server announced."""
        self.session()  # log in first, so the classes match the server
        from clearml.backend_api import services

        return services

    # -- projects -----------------------------------------------------------------------------
    def _clearml_project(self, project: str) -> str:
        return f"{self.root}/{project}" if self.root else project

    def record_project(self, clearml_name: str) -> str:
        """A record's project for a ClearML project name (the root taken off)."""
        if self.root and clearml_name.startswith(self.root + "/"):
            return clearml_name[len(self.root) + 1 :]
        return clearml_name

    def project_id(self, project: str, *, create: bool) -> str | None:
        """The id of ``project``'s ClearML project, made if ``create``, else ``None`` when it has none."""
        name = self._clearml_project(project)
        with self._lock:
            if name in self._project_ids:
                return self._project_ids[name]
        projects = self.services().projects
        data = self.send(
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
            pid = self.send(
                projects.CreateRequest(name=name, description="tracker_saver checkpoints"), f"creating project {name!r}"
            )["id"]
        with self._lock:
            self._project_ids[name] = pid
            self._project_names[pid] = name
        return str(pid)

    def project_names(self, ids: Iterable[str]) -> dict[str, str]:
        """ClearML project id → name, every one of ``ids`` included (looked up once, then cached)."""
        with self._lock:
            missing = sorted({i for i in ids if i and i not in self._project_names})
        if missing:
            data = self.send(
                self.services().projects.GetAllRequest(id=missing, only_fields=["id", "name"]),
                "looking up project names",
            )
            with self._lock:
                for p in data.get("projects") or []:
                    self._project_names[p["id"]] = p["name"]
                    self._project_ids.setdefault(p["name"], p["id"])
        with self._lock:
            return dict(self._project_names)

    # -- models <-> records (the mapping itself is the codec's) ---------------------------------
    @staticmethod
    def _checked(model: Any, record_id: str) -> dict[str, Any]:
        if not is_record_model(model):
            raise RecordNotFoundError(
                f"ClearML model {record_id} is not a tracker_saver checkpoint record", record_id=record_id
            )
        return model

    def fetch(self, record_id: str) -> dict[str, Any]:
        """The model of record ``record_id`` (``RecordNotFoundError`` if none, or not a record's)."""
        check_id(record_id)
        data = self.send(
            self.services().models.GetByIdRequest(model=record_id), f"reading model {record_id}", record_id=record_id
        )
        return self._checked(data.get("model"), record_id)

    def fetch_many(self, ids: list[str], *, missing_ok: Iterable[str] = ()) -> dict[str, dict[str, Any]]:
        """Several records' models in one request (a missing one is ``RecordNotFoundError``, unless in ``missing_ok``)."""
        for record_id in ids:
            check_id(record_id)
        data = self.send(
            self.services().models.GetAllRequest(id=ids, only_fields=MODEL_FIELDS), f"reading models {', '.join(ids)}"
        )
        found = {str(m.get("id")): m for m in data.get("models") or []}
        for record_id in ids:
            if record_id not in found and record_id in set(missing_ok):
                continue
            if record_id not in found:
                raise RecordNotFoundError(
                    f"record {record_id} does not exist in {self.uri} (no such ClearML model): "
                    "see `tracker-saver models list` for ids",
                    record_id=record_id,
                )
            self._checked(found[record_id], record_id)
        return found

    def record(self, model: dict[str, Any], names: dict[str, str] | None = None) -> Record:
        """The record ``model`` holds; ``names``: project id → ClearML name, if at hand."""
        if names is None or (model.get("project") and model["project"] not in names):
            names = self.project_names([model.get("project") or ""])
        return model_record(model, self.record_project(names.get(model.get("project") or "", "")))

    def write_metadata(self, record_id: str, items: dict[str, MetaValue], what: str) -> None:
        """Add or replace ``items`` in the model's metadata (other keys stay)."""
        self.send(
            self.services().models.AddOrUpdateMetadataRequest(
                model=record_id, metadata=[encode_value(k, v) for k, v in items.items()], replace_metadata=False
            ),
            what,
            record_id=record_id,
        )

    def all_models(self, params: dict[str, Any], fields: list[str], what: str) -> list[dict[str, Any]]:
        """Every model ``models.get_all`` finds for ``params``, oldest first, page by page."""
        models: list[dict[str, Any]] = []
        page = 0
        while True:
            data = self.send(
                self.services().models.GetAllRequest(
                    only_fields=fields,
                    order_by=["created"],
                    page=page,
                    page_size=_PAGE,
                    _allow_extra_fields_=True,
                    **params,
                ),
                what,
            )
            batch = data.get("models") or []
            models.extend(batch)
            if len(batch) < _PAGE:
                return models
            page += 1
