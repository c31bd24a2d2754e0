"""The stand-in's entities and its endpoint table: projects, users, events, workers, queues; tasks and models."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tests.clearml_standin.common import (
    _BUILD,
    API_VERSION,
    COMPANY_ID,
    USER,
    USER_ID,
    StandInError,
    _bad_model,
    _bad_project,
    _bad_task,
    _forbidden,
    _new_id,
    _now,
)
from tests.clearml_standin.models import Models


class Store(Models):
    """The entities and the endpoint implementations; every method runs under one lock."""

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
        if data.get("name") is None:
            raise StandInError(400, 11, "Missing required fields: missing=(name)")
        name = self._check_name("project", data.get("name"))
        if any(name.startswith(ro + "/") for ro in self.read_only):
            raise _forbidden()
        if any(p["name"] == name for p in self.projects.values()):
            raise StandInError(
                400, 801, f"Project with the same name already exists: name={name}, company={COMPANY_ID}"
            )
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
            ("failed", "failed"),
            ("close", "closed"),
            ("publish", "published"),
            ("enqueue", "queued"),
            ("dequeue", "created"),
        ):
            table[f"tasks.{action}"] = self._status(status, action)
        table["models.archive_many"] = self._archive("models", _bad_model, True)
        table["models.unarchive_many"] = self._archive("models", _bad_model, False)
        table["tasks.archive_many"] = self._archive("tasks", _bad_task, True)
        table["tasks.unarchive_many"] = self._archive("tasks", _bad_task, False)
        return table
