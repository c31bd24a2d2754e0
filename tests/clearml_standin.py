"""An in-memory stand-in of the ClearML API server, for tests only; it is not a ClearML server.

The real server needs Docker, MongoDB, Elasticsearch and Redis. This stand-in speaks just
enough of its REST protocol (``POST|GET /v<version>/<service>.<action>`` with a JSON body,
answers wrapped as ``{"meta": {...}, "data": {...}}``) for the *real* clearml SDK to run
``Task.init``, ``OutputModel``, ``Model.query_models``, ignite's ``ClearMLSaver`` and
``Task.import_offline_session`` (``tasks.create``, ``edit``, ``started``, ``completed`` and the
session's logs and metrics as ``events.add_batch``, accepted and dropped) against it.
Entities live in plain dicts so tests can assert on exactly what the SDK sent.

What it mirrors from clearml-server (apiserver/database/model/base.py, services/models.py):

* ``auth.login`` answers a JWT whose payload carries ``api_version``/``server_version``
  (the SDK decodes it, unverified, to choose its API level).
* ``get_all``/``get_all_ex`` filters: ``name``/``comment`` are regular expressions; ``id``,
  ``project``, ``task``, ``tags``, ``system_tags``, ``status``, ``type``, ``user``,
  ``framework``, ``uri``, ``parent`` and ``metadata.<key>.value`` are *list fields* with the
  server's operators: a plain list is OR, ``-tag`` or ``__$not tag`` excludes, ``__$all`` /
  ``__$and`` switch to AND, ``__$any`` / ``__$or`` back to OR. The buckets are joined with the
  first operator seen (OR by default), exactly like the server: ``["a", "-b"]`` means
  "has a OR lacks b". ``ready`` is equality; ``only_fields``, ``order_by``, ``page``/``page_size``
  and ``size``/``scroll_id`` are honoured.
* models: ``name`` needs at least 3 characters, tags are stored sorted, ``metadata`` is a dict
  ``key -> {key, type, value}`` (values are strings), ``models.create``/``edit`` replace fields,
  ``add_or_update_metadata`` merges (or replaces), ``archive_many``/``unarchive_many`` toggle the
  ``archived`` system tag, an unknown id is ``400/201 invalid model id``.
* tasks: ``add_or_update_model`` replaces the output-model entry of the same name or appends;
  ``delete_models`` removes entries by name; status calls (``started``, ``completed``, ...) move
  ``status``; an unknown id is ``400/101 invalid task id``.
* ``events.*`` batches are accepted and dropped (only counted).

* permissions: ``auth.login`` refuses any other key pair (``401/22 Unauthorized (invalid
  credentials)``); a project marked with :meth:`ClearMLStandIn.read_only` may be read, but
  creating, changing or deleting a model, task or subproject in it answers ``403/21 Forbidden
  (modification not allowed)``, the server's ``NoWritePermission``.

Anything else is answered with an empty success and remembered in :attr:`ClearMLStandIn.unknown_calls`
so a test can assert that nothing important was ignored. Faults can be injected with
:meth:`ClearMLStandIn.fail` to test error mapping.

Outages (``tests/test_clearml_outages.py``): :meth:`ClearMLStandIn.pause` stops listening and
drops every open connection (a client is refused, as by a server that went away) and
:meth:`ClearMLStandIn.resume` listens again on the same port with every entity kept;
:meth:`ClearMLStandIn.hang` accepts connections and reads requests but answers none (a frozen
server) until :meth:`ClearMLStandIn.unhang`, which drops the held requests unprocessed.

Examples:
    >>> server = ClearMLStandIn().start()
    >>> server.api_host.startswith("http://127.0.0.1:")
    True
    >>> server.stop()
"""

from __future__ import annotations

import base64
import contextlib
import copy
import http.server
import json
import logging
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["ACCESS_KEY", "SECRET_KEY", "Call", "ClearMLStandIn", "StandInError"]

log = logging.getLogger(__name__)

#: Test credentials the stand-in accepts (they protect nothing: the server only listens on 127.0.0.1).
ACCESS_KEY = "STANDIN_ACCESS_KEY"
SECRET_KEY = "standin-secret-key-not-a-real-secret"

API_VERSION = "2.31"
SERVER_VERSION = "1.17.0"
USER_ID, USER_NAME, COMPANY_ID, COMPANY_NAME = "standin-user", "Stand-in User", "standin-company", "stand-in"
USER: dict[str, Any] = {"id": USER_ID, "name": USER_NAME, "company": {"id": COMPANY_ID, "name": COMPANY_NAME}}
_BUILD = {"version": SERVER_VERSION, "build": "standin", "commit": "standin"}


class StandInError(Exception):
    """An API error the stand-in answers with (HTTP status = ``code``)."""

    def __init__(self, code: int, subcode: int, msg: str) -> None:
        super().__init__(msg)
        self.code, self.subcode, self.msg = code, subcode, msg


@dataclass
class Call:
    """One request the stand-in received (body already parsed)."""

    endpoint: str
    data: Any
    at: float
    status: int = 200


@dataclass
class _Fault:
    pattern: re.Pattern[str]
    code: int
    subcode: int
    msg: str
    times: int | None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _new_id() -> str:
    return uuid.uuid4().hex


def _invalid(what: str, code: int, subcode: int) -> Callable[[str], StandInError]:
    return lambda value: StandInError(code, subcode, f"Invalid {what} id: id={value}")


_bad_model = _invalid("model", 400, 201)
_bad_task = _invalid("task", 400, 101)
_bad_project = _invalid("project", 400, 401)


def _forbidden() -> StandInError:
    """clearml-server's ``errors.forbidden.NoWritePermission``."""
    return StandInError(403, 21, "Forbidden (modification not allowed)")


#: List fields per entity kind, as clearml-server declares them in ``get_all_query_options``.
_LIST_FIELDS = {
    "models": ("tags", "system_tags", "framework", "uri", "id", "user", "project", "task", "parent", "metadata.*"),
    "tasks": (
        "id",
        "user",
        "tags",
        "system_tags",
        "type",
        "status",
        "project",
        "parent",
        "hyperparams.*",
        "execution.queue",
        "models.input.model",
    ),
    "projects": ("id", "user", "tags", "system_tags", "parent", "basename"),
}
_PATTERN_FIELDS = {"models": ("name", "comment"), "tasks": ("name", "comment"), "projects": ("name", "basename")}
_EQ_FIELDS = {"models": ("ready",), "tasks": (), "projects": ()}


def _get_path(doc: dict[str, Any], path: str) -> Any:
    value: Any = doc
    for part in path.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list):  # e.g. models.input.model: collect from each element
            value = [v.get(part) for v in value if isinstance(v, dict)]
        else:
            return None
    return value


def _as_set(value: Any) -> set[Any]:
    if value is None:
        return set()
    if isinstance(value, list):
        return {v for v in value if v is not None}
    return {value}


def _pattern_test(name: str, regex: re.Pattern[str]) -> Callable[[dict[str, Any]], bool]:
    return lambda doc: isinstance(doc.get(name), str) and bool(regex.search(doc[name]))


def _equal_test(key: str, value: Any) -> Callable[[dict[str, Any]], bool]:
    return lambda doc: bool(doc.get(key) == value)


def _list_field_test(path: str, data: Any) -> Callable[[dict[str, Any]], bool]:
    """The server's NewListFieldBucketHelper: buckets in/nin/all/not_all joined by the first operator."""
    if not isinstance(data, (list, tuple)):
        data = [data]
    operators = {"__$all": "and", "__$and": "and", "__$any": "or", "__$or": "or"}
    context, global_op, allow_empty, negate_next = "or", None, False, False
    buckets: dict[str, list[Any]] = {}
    for value in data:
        if value is None:
            allow_empty = True
            global_op = global_op or context
            continue
        if not isinstance(value, str):
            raise StandInError(400, 16, f"invalid value type, string expected: field={path} value={value!r}")
        if value.startswith("__$"):
            if value in ("__$not", "__$nop"):
                negate_next = value == "__$not"
                continue
            if value not in operators:
                raise StandInError(400, 16, f"Unsupported operator: field={path} operator={value}")
            context = operators[value]
            global_op = global_op or context
            continue
        global_op = global_op or context
        include = not negate_next
        negate_next = False
        if value.startswith("-"):
            value, include = value[1:], False
            if not value:
                raise StandInError(400, 16, f"Missing value after the exclude prefix -: field={path}")
        action = {("or", True): "in", ("or", False): "nin", ("and", True): "all", ("and", False): "not_all"}[
            (context, include)
        ]
        buckets.setdefault(action, []).append(value)
    global_op = global_op or "or"

    def test(doc: dict[str, Any]) -> bool:
        have = _as_set(_get_path(doc, path))
        results = []
        for action, values in buckets.items():
            want = set(values)
            if action == "in":
                results.append(bool(have & want))
            elif action == "nin":
                results.append(not (have & want))
            elif action == "all":
                results.append(want <= have)
            else:
                results.append(not want <= have)
        ok = (all(results) if global_op == "and" else any(results)) if results else True
        if allow_empty:
            ok = ok or not have
        return ok

    return test


class _Store:
    """The entities and the endpoint implementations; every method runs under one lock."""

    def __init__(self) -> None:
        self.projects: dict[str, dict[str, Any]] = {}
        self.tasks: dict[str, dict[str, Any]] = {}
        self.models: dict[str, dict[str, Any]] = {}
        self.events: dict[str, int] = {}
        self.read_only: set[str] = set()  # names of projects this user may read but not change
        self._scrolls: dict[str, int] = {}

    def _check_writable(self, project_id: Any) -> None:
        """Refuse a change in a read-only project (or under one) as the server does."""
        name = (self.projects.get(project_id) or {}).get("name") if isinstance(project_id, str) else None
        if name is not None and any(name == ro or name.startswith(ro + "/") for ro in self.read_only):
            raise _forbidden()

    # -- generic query machinery -------------------------------------------------------------
    def _collection(self, kind: str) -> dict[str, dict[str, Any]]:
        return {"models": self.models, "tasks": self.tasks, "projects": self.projects}[kind]

    def _select(self, kind: str, data: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        data = dict(data or {})
        tests: list[Callable[[dict[str, Any]], bool]] = []
        for name in _PATTERN_FIELDS[kind]:
            pattern = data.get(name)
            if pattern:
                try:
                    regex = re.compile(pattern)
                except re.error as exc:
                    raise StandInError(400, 21, f"malformed regular expression: {exc}") from None
                tests.append(_pattern_test(name, regex))
        for key, value in data.items():
            if value is None:
                continue
            for pattern in _LIST_FIELDS[kind]:
                if key == pattern or (pattern.endswith("*") and key.startswith(pattern[:-1])):
                    tests.append(_list_field_test(key, value))
                    break
            else:
                if key in _EQ_FIELDS[kind]:
                    tests.append(_equal_test(key, value))
        if kind == "projects" and not data.get("search_hidden") and not data.get("include_hidden"):
            tests.append(lambda d: "hidden" not in (d.get("system_tags") or []))
        docs = [d for d in self._collection(kind).values() if all(t(d) for t in tests)]
        order = data.get("order_by") or []
        if isinstance(order, str):
            order = [order]
        for key in reversed([k for k in order if k and not k.startswith("@")]):
            desc = key.startswith("-")
            path = key.lstrip("-")
            present = [d for d in docs if _get_path(d, path) is not None]
            absent = [d for d in docs if _get_path(d, path) is None]
            present.sort(
                key=lambda d: (
                    str(_get_path(d, path)) if not isinstance(_get_path(d, path), (int, float)) else _get_path(d, path)
                ),
                reverse=desc,
            )
            docs = (absent + present) if not desc else (present + absent)
        extra: dict[str, Any] = {}
        if data.get("scroll_id") is not None or data.get("size"):
            scroll_id = data.get("scroll_id") or _new_id()
            start = 0 if data.get("refresh_scroll") else self._scrolls.get(scroll_id, 0)
            size = int(data.get("size") or 500)
            docs = docs[start : start + size]
            self._scrolls[scroll_id] = start + len(docs)
            extra["scroll_id"] = scroll_id
        elif data.get("page_size") is not None:
            page, size = int(data.get("page") or 0), int(data["page_size"])
            docs = docs[page * size : (page + 1) * size]
        only = data.get("only_fields") or data.get("projection")
        return [self._project(d, only) for d in docs], extra

    @staticmethod
    def _project(doc: dict[str, Any], only: list[str] | None) -> dict[str, Any]:
        if not only:
            return copy.deepcopy(doc)
        out: dict[str, Any] = {"id": doc["id"]}
        for path in only:
            if path.startswith("-"):
                continue
            src: Any = doc
            parts = path.split(".")
            for part in parts:
                src = src.get(part) if isinstance(src, dict) else None
            if src is None:
                continue
            dst = out
            for part in parts[:-1]:
                dst = dst.setdefault(part, {})
            dst[parts[-1]] = copy.deepcopy(src)
        return out

    def _get(self, kind: str, ident: Any, error: Callable[[str], StandInError]) -> dict[str, Any]:
        doc = self._collection(kind).get(ident) if isinstance(ident, str) else None
        if doc is None:
            raise error(str(ident))
        return doc

    @staticmethod
    def _check_name(kind: str, name: Any) -> str:
        if not isinstance(name, str) or len(name.strip()) < 3:
            raise StandInError(400, 12, f"Validation error: {kind} name {name!r} must have at least 3 characters")
        return name.strip()

    @staticmethod
    def _tags(value: Any) -> list[str]:
        return sorted(set(value or []))

    @staticmethod
    def _metadata(items: Any) -> dict[str, dict[str, str]]:
        if isinstance(items, dict):
            items = list(items.values())
        out: dict[str, dict[str, str]] = {}
        for item in items or []:
            # the server's MetadataItem: key, type and value are required strings
            if not isinstance(item, dict) or not all(isinstance(item.get(k), str) for k in ("key", "type", "value")):
                raise StandInError(400, 12, f"Validation error: metadata item {item!r} needs string key, type, value")
            out[item["key"]] = {"key": item["key"], "type": item["type"], "value": item["value"]}
        return out

    # -- auth / users / server ----------------------------------------------------------------
    def users_get_current_user(self, data: dict[str, Any]) -> dict[str, Any]:
        return {
            "user": {**USER, "role": "admin", "email": "standin@example.invalid"},
            "getting_started": {},
            "settings": {},
        }

    def server_info(self, data: dict[str, Any]) -> dict[str, Any]:
        return {**_BUILD, "api_version": API_VERSION, "uid": "standin"}

    # -- projects ----------------------------------------------------------------------------
    def projects_create(self, data: dict[str, Any]) -> dict[str, Any]:
        name = self._check_name("project", data.get("name"))
        if any(name.startswith(ro + "/") for ro in self.read_only):
            raise _forbidden()
        if any(p["name"] == name for p in self.projects.values()):
            raise StandInError(409, 0, f"Value combination already exists (unique field): name={name}")
        pid = _new_id()
        parent = None
        if "/" in name:  # the server creates the parent projects of a path name
            parent_name = name.rsplit("/", 1)[0]
            parent = next((p["id"] for p in self.projects.values() if p["name"] == parent_name), None)
            if parent is None:
                parent = self.projects_create({"name": parent_name})["id"]
        now = _now()
        self.projects[pid] = {
            "id": pid,
            "name": name,
            "basename": name.rsplit("/", 1)[-1],
            "description": data.get("description", ""),
            "tags": self._tags(data.get("tags")),
            "system_tags": self._tags(data.get("system_tags")),
            "default_output_destination": data.get("default_output_destination"),
            "user": USER_ID,
            "company": COMPANY_ID,
            "created": now,
            "last_update": now,
            "parent": parent,
        }
        return {"id": pid}

    def projects_get_all(self, data: dict[str, Any]) -> dict[str, Any]:
        docs, extra = self._select("projects", data)
        return {"projects": docs, **extra}

    projects_get_all_ex = projects_get_all

    def projects_get_by_id(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"project": copy.deepcopy(self._get("projects", data.get("project"), _bad_project))}

    def projects_update(self, data: dict[str, Any]) -> dict[str, Any]:
        project = self._get("projects", data.get("project"), _bad_project)
        fields = {k: v for k, v in data.items() if k not in ("project", "id")}
        project.update(fields)
        return {"updated": 1, "fields": fields}

    def projects_get_hidden(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"projects": []}

    # -- tasks -------------------------------------------------------------------------------
    def _new_task(self, data: dict[str, Any]) -> dict[str, Any]:
        name = self._check_name("task", data.get("name"))
        if data.get("project"):
            self._get("projects", data["project"], _bad_project)
            self._check_writable(data["project"])
        now = _now()
        tid = _new_id()
        task: dict[str, Any] = {
            "id": tid,
            "name": name,
            "type": data.get("type") or "training",
            "status": "created",
            "status_changed": now,
            "status_reason": "",
            "status_message": "",
            "comment": data.get("comment", ""),
            "created": now,
            "last_update": now,
            "last_change": now,
            "user": USER_ID,
            "company": COMPANY_ID,
            "project": data.get("project"),
            "parent": data.get("parent"),
            "tags": self._tags(data.get("tags")),
            "system_tags": self._tags(data.get("system_tags")),
            "script": data.get("script") or {},
            "execution": data.get("execution") or {},
            "output": data.get("output") or {},
            "hyperparams": data.get("hyperparams") or {},
            "configuration": data.get("configuration") or {},
            "container": data.get("container") or {},
            "runtime": data.get("runtime") or {},
            "models": {"input": [], "output": []},
            "last_iteration": 0,
            "last_metrics": {},
        }
        for key, value in data.items():
            if key not in task and value is not None:
                task[key] = value
        self.tasks[tid] = task
        return task

    def tasks_create(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"id": self._new_task(data)["id"]}

    def tasks_clone(self, data: dict[str, Any]) -> dict[str, Any]:
        src = self._get("tasks", data.get("task"), _bad_task)
        clone = {k: copy.deepcopy(v) for k, v in src.items() if k not in ("id", "status", "models")}
        clone["name"] = data.get("new_task_name") or src["name"]
        clone["project"] = data.get("new_task_project") or src.get("project")
        return {"id": self._new_task(clone)["id"], "new_project": None}

    def tasks_get_all(self, data: dict[str, Any]) -> dict[str, Any]:
        docs, extra = self._select("tasks", data)
        return {"tasks": docs, **extra}

    tasks_get_all_ex = tasks_get_all

    def tasks_get_by_id(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"task": copy.deepcopy(self._get("tasks", data.get("task"), _bad_task))}

    def tasks_get_by_id_ex(self, data: dict[str, Any]) -> dict[str, Any]:
        ids = data.get("id") or []
        return {"tasks": [copy.deepcopy(self.tasks[i]) for i in ids if i in self.tasks]}

    def _edit_task(self, data: dict[str, Any]) -> dict[str, Any]:
        task = self._get("tasks", data.get("task"), _bad_task)
        fields = {k: v for k, v in data.items() if k not in ("task", "force") and v is not None}
        if "name" in fields:
            fields["name"] = self._check_name("task", fields["name"])
        for key in ("tags", "system_tags"):
            if key in fields:
                fields[key] = self._tags(fields[key])
        for key, value in fields.items():
            if (
                isinstance(value, dict)
                and isinstance(task.get(key), dict)
                and key not in ("hyperparams", "configuration")
            ):
                task[key].update(value)  # embedded documents are merged, like the server's edit
            else:
                task[key] = copy.deepcopy(value)
        task["last_update"] = task["last_change"] = _now()
        return {"updated": 1, "fields": fields}

    tasks_edit = _edit_task
    tasks_update = _edit_task

    def tasks_update_batch(self, data: Any) -> dict[str, Any]:
        items = data if isinstance(data, list) else [data]
        for item in items:
            self._edit_task(item)
        return {"updated": len(items)}

    def _status(self, status: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def change(data: dict[str, Any]) -> dict[str, Any]:
            task = self._get("tasks", data.get("task"), _bad_task)
            task["status"] = status
            task["status_changed"] = task["last_update"] = _now()
            if data.get("status_reason") is not None:
                task["status_reason"] = data["status_reason"]
            if data.get("status_message") is not None:
                task["status_message"] = data["status_message"]
            if status == "in_progress":
                task["started"] = task.get("started") or _now()
            if status in ("completed", "stopped", "failed", "closed"):
                task["completed"] = _now()
            return {"updated": 1, "fields": {"status": status}}

        return change

    def tasks_reset(self, data: dict[str, Any]) -> dict[str, Any]:
        task = self._get("tasks", data.get("task"), _bad_task)
        task.update(status="created", status_changed=_now(), last_iteration=0)
        task.pop("started", None)
        task.pop("completed", None)
        if data.get("clear_all"):
            task["models"]["output"] = []
        return {"updated": 1, "fields": {"status": "created"}, "dequeued": {}, "frames": {}, "events": {}}

    def tasks_add_or_update_model(self, data: dict[str, Any]) -> dict[str, Any]:
        task = self._get("tasks", data.get("task"), _bad_task)
        kind = data.get("type") or "output"
        if kind not in ("input", "output"):
            raise StandInError(400, 12, f"Validation error: model type {kind!r}")
        item = {"name": data.get("name"), "model": data.get("model"), "updated": _now()}
        entries = task.setdefault("models", {}).setdefault(kind, [])
        for i, entry in enumerate(entries):
            if entry.get("name") == item["name"]:
                entries[i] = item
                break
        else:
            entries.append(item)
        if data.get("iteration") is not None:
            task["last_iteration"] = max(task.get("last_iteration") or 0, int(data["iteration"]))
        return {"updated": 1}

    def tasks_delete_models(self, data: dict[str, Any]) -> dict[str, Any]:
        task = self._get("tasks", data.get("task"), _bad_task)
        removed = 0
        for spec in data.get("models") or []:
            entries = task.setdefault("models", {}).setdefault(spec.get("type") or "output", [])
            keep = [e for e in entries if e.get("name") != spec.get("name")]
            removed += len(entries) - len(keep)
            entries[:] = keep
        return {"updated": int(bool(removed))}

    def _edit_named_dict(self, field_name: str, items_key: str, data: dict[str, Any]) -> dict[str, Any]:
        task = self._get("tasks", data.get("task"), _bad_task)
        target = task.setdefault(field_name, {})
        if data.get("replace_" + field_name) in (True, "all"):
            target.clear()
        items = data.get(items_key) or []
        for item in items:
            if field_name == "hyperparams":
                target.setdefault(item.get("section", "General"), {})[item.get("name")] = item
            else:
                target[item.get("name")] = item
        return {"updated": 1}

    def tasks_edit_hyper_params(self, data: dict[str, Any]) -> dict[str, Any]:
        return self._edit_named_dict("hyperparams", "hyperparams", data)

    def tasks_edit_configuration(self, data: dict[str, Any]) -> dict[str, Any]:
        return self._edit_named_dict("configuration", "configuration", data)

    def tasks_get_hyper_params(self, data: dict[str, Any]) -> dict[str, Any]:
        return {
            "params": [
                {
                    "task": t,
                    "hyperparams": [
                        v for s in self._get("tasks", t, _bad_task)["hyperparams"].values() for v in s.values()
                    ],
                }
                for t in data.get("tasks") or []
            ]
        }

    def tasks_get_configurations(self, data: dict[str, Any]) -> dict[str, Any]:
        return {
            "configurations": [
                {"task": t, "configuration": list(self._get("tasks", t, _bad_task)["configuration"].values())}
                for t in data.get("tasks") or []
            ]
        }

    def tasks_add_or_update_artifacts(self, data: dict[str, Any]) -> dict[str, Any]:
        task = self._get("tasks", data.get("task"), _bad_task)
        artifacts = task.setdefault("execution", {}).setdefault("artifacts", [])
        for art in data.get("artifacts") or []:
            artifacts[:] = [a for a in artifacts if (a.get("key"), a.get("mode")) != (art.get("key"), art.get("mode"))]
            artifacts.append(art)
        return {"updated": 1}

    def tasks_delete_artifacts(self, data: dict[str, Any]) -> dict[str, Any]:
        task = self._get("tasks", data.get("task"), _bad_task)
        keys = {a.get("key") for a in data.get("artifacts") or []}
        artifacts = task.setdefault("execution", {}).setdefault("artifacts", [])
        artifacts[:] = [a for a in artifacts if a.get("key") not in keys]
        return {"deleted": 1}

    def tasks_ping(self, data: dict[str, Any]) -> dict[str, Any]:
        self._get("tasks", data.get("task"), _bad_task)
        return {}

    def tasks_set_requirements(self, data: dict[str, Any]) -> dict[str, Any]:
        task = self._get("tasks", data.get("task"), _bad_task)
        task.setdefault("script", {})["requirements"] = data.get("requirements")
        return {"updated": 1}

    def tasks_get_types(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"types": sorted({t["type"] for t in self.tasks.values()})}

    def _archive(self, kind: str, error: Callable[[str], StandInError], archive: bool) -> Callable[..., dict[str, Any]]:
        def change(data: dict[str, Any]) -> dict[str, Any]:
            succeeded, failed = [], []
            for ident in data.get("ids") or []:
                doc = self._collection(kind).get(ident)
                if doc is None:
                    failed.append({"id": ident, "error": {"codes": [400, 201], "msg": str(error(ident))}})
                    continue
                tags = set(doc.get("system_tags") or [])
                tags = tags | {"archived"} if archive else tags - {"archived"}
                doc["system_tags"] = sorted(tags)
                doc["last_update"] = _now()
                succeeded.append({"id": ident, ("archived" if archive else "unarchived"): True})
            return {"succeeded": succeeded, "failed": failed}

        return change

    # -- models ------------------------------------------------------------------------------
    _MODEL_FIELDS = (
        "name",
        "tags",
        "system_tags",
        "task",
        "comment",
        "uri",
        "project",
        "parent",
        "framework",
        "design",
        "labels",
        "ready",
        "metadata",
    )

    def _model_fields(self, data: dict[str, Any]) -> dict[str, Any]:
        fields = {k: data[k] for k in self._MODEL_FIELDS if data.get(k) is not None}
        if "name" in fields:
            fields["name"] = self._check_name("model", fields["name"])
        for key in ("tags", "system_tags"):
            if key in fields:
                fields[key] = self._tags(fields[key])
        if "metadata" in fields:
            # clearml-server >= 1.14 takes an object here (key -> item) while the SDK's schema still
            # says array: a list is refused (create) or crashes (edit). The SDK itself only sends
            # metadata through models.add_or_update_metadata; so must everyone else.
            if not isinstance(fields["metadata"], dict):
                raise StandInError(
                    400,
                    12,
                    "Validation error: metadata must be an object of key -> item; "
                    "use models.add_or_update_metadata to send a list",
                )
            fields["metadata"] = self._metadata(fields["metadata"])
        if fields.get("project"):
            self._get("projects", fields["project"], _bad_project)
            self._check_writable(fields["project"])
        if fields.get("task"):
            self._get("tasks", fields["task"], _bad_task)
        return fields

    def models_create(self, data: dict[str, Any]) -> dict[str, Any]:
        if "name" not in data or "uri" not in data:
            raise StandInError(400, 11, "Missing required fields: name, uri")
        fields = self._model_fields(data)
        mid = _new_id()
        now = _now()
        self.models[mid] = {
            "id": mid,
            "name": fields.get("name"),
            "user": USER_ID,
            "company": COMPANY_ID,
            "created": now,
            "last_update": now,
            "last_change": now,
            "tags": [],
            "system_tags": [],
            "uri": "",
            "framework": None,
            "design": {},
            "labels": {},
            "ready": False,
            "metadata": {},
            "project": None,
            "task": None,
            "parent": None,
            "comment": "",
            "last_iteration": 0,
            **fields,
        }
        return {"id": mid, "created": True}

    def models_edit(self, data: dict[str, Any]) -> dict[str, Any]:
        model = self._get("models", data.get("model"), _bad_model)
        self._check_writable(model.get("project"))
        fields = self._model_fields(data)
        model.update(copy.deepcopy(fields))
        if data.get("iteration") is not None:
            model["last_iteration"] = int(data["iteration"])
        model["last_update"] = model["last_change"] = _now()
        return {"updated": int(bool(fields)), "fields": fields}

    def models_update(self, data: dict[str, Any]) -> dict[str, Any]:
        return self.models_edit(data)

    def models_update_for_task(self, data: dict[str, Any]) -> dict[str, Any]:
        task = self._get("tasks", data.get("task"), _bad_task)
        override = data.get("override_model_id")
        if override:
            model = self._get("models", override, _bad_model)
            mid, created = model["id"], False
        else:
            out = (task.get("models") or {}).get("output") or []
            if out:
                mid, created = out[-1]["model"], False
                self.models_edit({**data, "model": mid})
            else:
                mid = self.models_create(
                    {
                        "name": data.get("name") or task["name"],
                        "uri": data.get("uri") or "",
                        "project": task.get("project"),
                        "task": task["id"],
                        **{k: v for k, v in data.items() if k in self._MODEL_FIELDS and k != "uri"},
                    }
                )["id"]
                created = True
        self.tasks_add_or_update_model({"task": task["id"], "name": "Output Model", "model": mid, "type": "output"})
        return {"id": mid, "created": created, "updated": 1}

    def models_get_all(self, data: dict[str, Any]) -> dict[str, Any]:
        docs, extra = self._select("models", data)
        return {"models": docs, **extra}

    models_get_all_ex = models_get_all

    def models_get_by_id(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"model": copy.deepcopy(self._get("models", data.get("model"), _bad_model))}

    def models_get_by_id_ex(self, data: dict[str, Any]) -> dict[str, Any]:
        ids = data.get("id") or []
        return {"models": [copy.deepcopy(self.models[i]) for i in ids if i in self.models]}

    def models_get_by_task_id(self, data: dict[str, Any]) -> dict[str, Any]:
        task = self._get("tasks", data.get("task"), _bad_task)
        out = (task.get("models") or {}).get("output") or []
        if not out:
            raise StandInError(400, 122, "task is missing expected fields: field=models.output")
        return {"model": copy.deepcopy(self._get("models", out[-1]["model"], _bad_model))}

    def models_add_or_update_metadata(self, data: dict[str, Any]) -> dict[str, Any]:
        model = self._get("models", data.get("model"), _bad_model)
        self._check_writable(model.get("project"))
        if not isinstance(data.get("metadata"), list) or not data["metadata"]:
            raise StandInError(400, 12, "Validation error: metadata must be a non-empty list of items")
        items = self._metadata(data.get("metadata"))
        if data.get("replace_metadata"):
            model["metadata"] = items
        else:
            model.setdefault("metadata", {}).update(items)
        model["last_update"] = _now()
        return {"updated": 1}

    def models_delete_metadata(self, data: dict[str, Any]) -> dict[str, Any]:
        model = self._get("models", data.get("model"), _bad_model)
        for key in data.get("keys") or []:
            model.setdefault("metadata", {}).pop(key, None)
        return {"updated": 1}

    def models_set_ready(self, data: dict[str, Any]) -> dict[str, Any]:
        model = self._get("models", data.get("model"), _bad_model)
        model["ready"] = True
        return {"updated": 1, "published_task": None}

    def models_publish_many(self, data: dict[str, Any]) -> dict[str, Any]:
        succeeded = []
        for ident in data.get("ids") or []:
            if ident in self.models:
                self.models[ident]["ready"] = True
                succeeded.append({"id": ident, "updated": 1})
        return {"succeeded": succeeded, "failed": []}

    def models_delete(self, data: dict[str, Any]) -> dict[str, Any]:
        model = self._get("models", data.get("model"), _bad_model)
        self._check_writable(model.get("project"))
        del self.models[model["id"]]
        return {"deleted": True, "url": model.get("uri")}

    def models_delete_many(self, data: dict[str, Any]) -> dict[str, Any]:
        succeeded = []
        for ident in data.get("ids") or []:
            model = self.models.pop(ident, None)
            if model is not None:
                succeeded.append({"id": ident, "deleted": True, "url": model.get("uri")})
        return {"succeeded": succeeded, "failed": []}

    def models_get_frameworks(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"frameworks": sorted({m["framework"] for m in self.models.values() if m.get("framework")})}

    # -- events ------------------------------------------------------------------------------
    def events_add_batch(self, data: Any) -> dict[str, Any]:
        events = data if isinstance(data, list) else [data]
        for event in events:
            if isinstance(event, dict):
                key = str(event.get("task"))
                self.events[key] = self.events.get(key, 0) + 1
        return {"added": len(events), "errors": 0, "errors_info": None}

    def events_add(self, data: Any) -> dict[str, Any]:
        return self.events_add_batch([data])

    def workers_status_report(self, data: Any) -> dict[str, Any]:
        return {}

    def workers_register(self, data: Any) -> dict[str, Any]:
        return {}

    def workers_unregister(self, data: Any) -> dict[str, Any]:
        return {}

    def workers_get_all(self, data: Any) -> dict[str, Any]:
        return {"workers": []}

    def queues_get_all(self, data: Any) -> dict[str, Any]:
        return {"queues": []}

    def queues_get_default(self, data: Any) -> dict[str, Any]:
        raise StandInError(400, 703, "no default queue")

    def handlers(self) -> dict[str, Callable[[Any], dict[str, Any]]]:
        table: dict[str, Callable[[Any], dict[str, Any]]] = {}
        for attr in dir(self):
            if attr.startswith(
                ("projects_", "tasks_", "models_", "events_", "users_", "server_", "workers_", "queues_")
            ):
                service, _, action = attr.partition("_")
                table[f"{service}.{action}"] = getattr(self, attr)
        for action, status in (
            ("started", "in_progress"),
            ("stopped", "stopped"),
            ("stop", "stopped"),
            ("completed", "completed"),
            ("mark_completed", "completed"),
            ("failed", "failed"),
            ("close", "closed"),
            ("publish", "published"),
            ("enqueue", "queued"),
            ("dequeue", "created"),
        ):
            table[f"tasks.{action}"] = self._status(status)
        table["models.archive_many"] = self._archive("models", _bad_model, True)
        table["models.unarchive_many"] = self._archive("models", _bad_model, False)
        table["tasks.archive_many"] = self._archive("tasks", _bad_task, True)
        table["tasks.unarchive_many"] = self._archive("tasks", _bad_task, False)
        return table


class ClearMLStandIn:
    """An in-memory ClearML API server stand-in on ``127.0.0.1:<free port>`` (tests only).

    Attributes:
        projects, tasks, models: the entities, ``id -> dict`` as the server would return them.
        calls: every request received, in order (``Call(endpoint, data, at, status)``).
        unknown_calls: endpoints the stand-in does not implement (answered with empty success).

    Examples:
        >>> with ClearMLStandIn() as server:
        ...     with server.count() as calls:
        ...         pass
        ...     len(calls)
        0
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, latency: float = 0.0) -> None:
        self.host, self.port, self.latency = host, port, latency
        self._store = _Store()
        self._handlers = self._store.handlers()
        self._lock = threading.RLock()
        self._faults: list[_Fault] = []
        self.calls: list[Call] = []
        self.unknown_calls: list[Call] = []
        self._httpd: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._bound_port: int | None = None  # kept across pause()/resume()
        self._connections: set[socket.socket] = set()  # open client connections (keep-alive ones too)
        self._hang: re.Pattern[str] | None = None  # requests to these endpoints wait for _released
        self._released = threading.Event()
        self._hang_after = 0  # matching requests hang() still answers before it freezes
        self.hung: list[Call] = []  # requests held by hang(), never answered

    # -- entities ----------------------------------------------------------------------------
    @property
    def projects(self) -> dict[str, dict[str, Any]]:
        return self._store.projects

    @property
    def tasks(self) -> dict[str, dict[str, Any]]:
        return self._store.tasks

    @property
    def models(self) -> dict[str, dict[str, Any]]:
        return self._store.models

    @property
    def events(self) -> dict[str, int]:
        """Number of events received per task id (their content is dropped)."""
        return self._store.events

    def project_id(self, name: str) -> str | None:
        """The id of the project called ``name``, if any."""
        return next((p["id"] for p in self.projects.values() if p["name"] == name), None)

    def models_in(self, project: str) -> list[dict[str, Any]]:
        """The models of project ``name``, oldest first."""
        pid = self.project_id(project)
        return sorted((m for m in self.models.values() if m.get("project") == pid and pid), key=lambda m: m["created"])

    def edit_model(self, model_id: str, **fields: Any) -> None:
        """Change a model as another client (the web UI) would, bypassing the SDK."""
        with self._lock:
            self._store.models_edit({"model": model_id, **fields})

    # -- control -----------------------------------------------------------------------------
    @property
    def api_host(self) -> str:
        """``http://127.0.0.1:<port>``: the value for ``CLEARML_API_HOST`` (also while paused)."""
        if self._bound_port is None:
            raise RuntimeError("the ClearML stand-in is not started: call start() first")
        return f"http://{self.host}:{self._bound_port}"

    @property
    def listening(self) -> bool:
        """Whether it accepts connections (started and not paused)."""
        return self._httpd is not None

    def start(self) -> ClearMLStandIn:
        """Listen on a free port (``port`` if given) in a daemon thread; returns ``self``."""
        self._listen(self.port)
        return self

    def _listen(self, port: int) -> None:
        standin = self

        class Handler(_Handler):
            server_ref = standin

        class Server(http.server.ThreadingHTTPServer):
            allow_reuse_address = True  # resume() binds the port again while old connections sit in TIME_WAIT
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                # a connection that pause() or stop() closed under a request: the client sees it dropped
                log.debug("ClearML stand-in: request from %s ended by an error", client_address, exc_info=True)

        self._httpd = Server((self.host, port), Handler)
        self._bound_port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="clearml-standin", daemon=True
        )  # pause() and stop() wait up to one poll interval
        self._thread.start()

    def stop(self) -> None:
        """Stop listening, release held requests and close every connection (keep-alive ones too)."""
        self._close()
        self._bound_port = None

    def pause(self) -> None:
        """Go away: stop listening and close every connection; entities are kept for :meth:`resume`.

        Clients get ``connection refused``; a request being answered or held by :meth:`hang` is
        dropped unanswered, and a kept-alive connection is closed, so its next request is refused too.
        """
        if self._httpd is None:
            raise RuntimeError("the ClearML stand-in is not listening: nothing to pause")
        self._close()

    def resume(self) -> ClearMLStandIn:
        """Listen again on the port it had before :meth:`pause`, with every entity kept; returns ``self``."""
        if self._bound_port is None:
            raise RuntimeError("the ClearML stand-in was never started (or was stopped): call start()")
        if self._httpd is None:
            self._listen(self._bound_port)
        return self

    def _close(self) -> None:
        self.unhang()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        with self._lock:
            connections = list(self._connections)
        for connection in connections:  # the client sees it closed; its handler reads EOF and ends
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def hang(self, endpoint: str = "", *, after: int = 0) -> contextlib.AbstractContextManager[None]:
        """Freeze: accept connections and read requests (matching the regex ``endpoint``; all by
        default, ``auth.login`` included) but answer none of them until :meth:`unhang`.

        ``after=n`` answers the first ``n`` matching requests as usual and freezes from the next
        one: a client then stops at an exact point (``tests/test_clearml_offline.py`` kills a
        sync there).

        Returns a context manager that unhangs on exit, so both ``server.hang(); ...;
        server.unhang()`` and ``with server.hang(): ...`` work. The held requests are never
        processed: on release their connections are closed without an answer.
        """
        with self._lock:
            self._released = threading.Event()
            self._hang = re.compile(endpoint)
            self._hang_after = after

        @contextlib.contextmanager
        def hanging() -> Iterator[None]:
            try:
                yield
            finally:
                self.unhang()

        return hanging()

    def unhang(self) -> None:
        """Answer requests again; the ones held by :meth:`hang` are dropped (their connections closed)."""
        with self._lock:
            self._hang = None
            self._released.set()

    def _hold(self, endpoint: str, data: Any) -> bool:
        """Hold a request while :meth:`hang` says so; ``True`` when it was held (and is never answered)."""
        with self._lock:
            pattern, released = self._hang, self._released
            if pattern is None or not pattern.search(endpoint):
                return False
            if self._hang_after > 0:
                self._hang_after -= 1
                return False
            self.hung.append(Call(endpoint, data, time.time(), status=0))
        released.wait()
        return True

    def __enter__(self) -> ClearMLStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def fail(
        self,
        endpoint: str,
        *,
        code: int = 500,
        subcode: int = 0,
        msg: str = "stand-in injected fault",
        times: int | None = 1,
    ) -> None:
        """Answer the next ``times`` calls whose endpoint matches the regex ``endpoint`` with an error.

        ``times=None`` fails until :meth:`clear_faults`. Codes the SDK retries (429, 502, 503, 504)
        make it back off, so tests should use 4xx/500.
        """
        with self._lock:
            self._faults.append(_Fault(re.compile(endpoint), code, subcode, msg, times))

    def clear_faults(self) -> None:
        """Remove the injected faults and every read-only mark."""
        with self._lock:
            self._faults.clear()
            self._store.read_only.clear()

    def read_only(self, project: str) -> str:
        """Make ``project`` (created if missing, as its owner would) readable but not writable; its id.

        Until :meth:`clear_faults`, creating, changing or deleting anything in it answers
        ``403/21 Forbidden (modification not allowed)``, like a real server for a user without
        write permission.
        """
        with self._lock:
            pid = self.project_id(project) or self._store.projects_create({"name": project})["id"]
            self._store.read_only.add(project)
            return str(pid)

    @contextlib.contextmanager
    def count(self, endpoint: str = "") -> Iterator[list[Call]]:
        """Collect the calls made inside the ``with`` block (those matching the regex ``endpoint``).

        Calls to ``auth.login`` and ``events.*`` are left out: they are the SDK's background noise.
        """
        seen: list[Call] = []
        start = len(self.calls)
        try:
            yield seen
        finally:
            pattern = re.compile(endpoint)
            seen.extend(
                c
                for c in self.calls[start:]
                if pattern.search(c.endpoint) and not c.endpoint.startswith(("auth.", "events."))
            )

    # -- dispatch ----------------------------------------------------------------------------
    def _dispatch(self, endpoint: str, data: Any) -> tuple[int, int, str, Any]:
        with self._lock:
            call = Call(endpoint, data, time.time())
            self.calls.append(call)
            for fault in self._faults:
                if fault.pattern.search(endpoint):
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            self._faults.remove(fault)
                    call.status = fault.code
                    return fault.code, fault.subcode, fault.msg, {}
            handler = self._handlers.get(endpoint)
            if handler is None:
                self.unknown_calls.append(call)
                log.info("ClearML stand-in: unknown endpoint %s answered with empty success", endpoint)
                return 200, 0, "OK", {}
            try:
                return 200, 0, "OK", handler(data if data is not None else {})
            except StandInError as exc:
                call.status = exc.code
                return exc.code, exc.subcode, exc.msg, {}


def _make_token(expires_in: int = 30 * 24 * 3600) -> str:
    import jwt  # a dependency of the clearml SDK

    now = int(time.time())
    payload = {
        "identity": {
            "user": USER_ID,
            "company": COMPANY_ID,
            "role": "admin",
            "user_name": USER_NAME,
            "company_name": COMPANY_NAME,
        },
        "api_version": API_VERSION,
        "server_version": SERVER_VERSION,
        "server_build": "standin",
        "feature_set": "basic",
        "env": "standin",
        "iat": now,
        "exp": now + expires_in,
    }
    return jwt.encode(payload, "stand-in signing key: tests only, signs nothing real", algorithm="HS256")


class _Handler(http.server.BaseHTTPRequestHandler):
    server_ref: ClearMLStandIn
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as two writes: avoid the 40 ms delayed-ACK stall

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read .calls instead
        log.debug("ClearML stand-in: " + format, *args)

    def setup(self) -> None:
        super().setup()
        with self.server_ref._lock:
            self.server_ref._connections.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:  # the client went away (it gave up on a held request)
            pass
        finally:
            with self.server_ref._lock:
                self.server_ref._connections.discard(self.connection)

    def do_GET(self) -> None:
        self._handle()

    do_POST = do_PUT = do_GET

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            return None
        text = raw.decode("utf-8")
        try:
            return json.loads(text)
        except ValueError:
            # events.add_batch sends newline-separated JSON documents
            return [json.loads(line) for line in text.splitlines() if line.strip()]

    def _handle(self) -> None:
        standin = self.server_ref
        url = urlsplit(self.path)
        parts = [p for p in url.path.split("/") if p]
        version = parts[0][1:] if parts and re.fullmatch(r"v\d+(\.\d+)*", parts[0]) else None
        endpoint = parts[-1] if parts else ""
        try:
            body = self._read_body()
        except ValueError:
            self._reply(endpoint, version, 400, 12, "Validation error: malformed JSON body", {})
            return
        if standin.latency:
            time.sleep(standin.latency)
        if standin._hold(endpoint, body):
            self.close_connection = True  # frozen, then gone: the request is dropped unanswered
            return
        if endpoint == "auth.login":
            self._login(endpoint, version)
            return
        if not (self.headers.get("Authorization") or "").startswith("Bearer "):
            self._reply(endpoint, version, 401, 20, "Unauthorized (missing credentials)", {})
            return
        if body is None and url.query:
            body = {k: v if len(v) > 1 else v[0] for k, v in parse_qs(url.query).items()}
        code, subcode, msg, data = standin._dispatch(endpoint, body)
        self._reply(endpoint, version, code, subcode, msg, data)

    def _login(self, endpoint: str, version: str | None) -> None:
        standin = self.server_ref
        with standin._lock:
            standin.calls.append(Call(endpoint, None, time.time()))
        header = self.headers.get("Authorization") or ""
        if header.startswith("Basic "):
            try:
                key, _, secret = base64.b64decode(header[6:]).decode().partition(":")
            except ValueError:
                key, secret = "", ""
            if (key, secret) != (ACCESS_KEY, SECRET_KEY):
                self._reply(endpoint, version, 401, 22, "Unauthorized (invalid credentials)", {})
                return
        elif not header.startswith("Bearer "):
            self._reply(endpoint, version, 401, 20, "Unauthorized (missing credentials)", {})
            return
        self._reply(endpoint, version, 200, 0, "OK", {"token": _make_token()})

    def _reply(self, endpoint: str, version: str | None, code: int, subcode: int, msg: str, data: Any) -> None:
        meta = {
            "id": _new_id(),
            "trx": _new_id(),
            "endpoint": {"name": endpoint, "requested_version": version or "1.5", "actual_version": version or "1.5"},
            "result_code": code,
            "result_subcode": subcode,
            "result_msg": msg,
            "error_stack": None,
            "error_data": {},
        }
        payload = json.dumps({"meta": meta, "data": data}, default=str).encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def main(argv: list[str] | None = None) -> None:
    """``python -m tests.clearml_standin [--port N]``: a first look at ClearML without a server.

    Serves until Ctrl-C or SIGTERM and prints, on stdout, the ``export`` line that points the
    ClearML SDK here. A test double: it answers the calls tracker_saver and ignite make, no more.
    """
    import argparse
    import shutil
    import signal
    import sys
    import tempfile
    from pathlib import Path

    from tests.conftest_clearml import clearml_config_text

    parser = argparse.ArgumentParser(description="the ClearML API stand-in (a test double, not a server)")
    parser.add_argument("--port", type=int, default=8008, help="port on 127.0.0.1 (default: 8008)")
    port = parser.parse_args(argv).port
    root = Path(tempfile.mkdtemp(prefix="clearml-standin-"))
    (root / "cache").mkdir()
    (root / "clearml.conf").write_text(clearml_config_text(root / "cache"))
    # Before the export line: whoever read it may stop us at once, and must find us able to clean up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server = ClearMLStandIn(port=port).start()
        host = server.api_host
        try:
            print(
                f"export CLEARML_API_HOST={host} CLEARML_WEB_HOST={host} CLEARML_FILES_HOST={host} "
                f"CLEARML_API_ACCESS_KEY={ACCESS_KEY} CLEARML_API_SECRET_KEY={SECRET_KEY} "
                f"CLEARML_CONFIG_FILE={root / 'clearml.conf'} CLEARML_CACHE_DIR={root / 'cache'}",
                flush=True,
            )
            print(f"ClearML stand-in (a test double) on {host}; Ctrl-C stops it", file=sys.stderr)
            signal.pause()
        finally:
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)  # its clearml.conf and cache: nothing is left in /tmp


if __name__ == "__main__":
    main()
