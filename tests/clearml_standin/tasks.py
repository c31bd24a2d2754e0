"""The stand-in's ``tasks.*`` endpoints."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tests.clearml_standin.common import COMPANY_ID, USER_ID, StandInError, _bad_project, _bad_task, _new_id, _now
from tests.clearml_standin.query import Query
from tests.clearml_standin.rules import (
    check_edit_status,
    check_list_status,
    check_params_status,
    check_status_change,
    required,
)


class Tasks(Query):
    """Tasks: create, edit, status changes, model lists, artifacts, parameters."""

    def _new_task(self, data: dict[str, Any]) -> dict[str, Any]:
        required(data, "name", "type")
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

    def tasks_edit(self, data: dict[str, Any]) -> dict[str, Any]:
        check_edit_status(self._get("tasks", data.get("task"), _bad_task), data.get("force"))
        return self._edit_task(data)

    tasks_update = _edit_task  # no status rule: tags, comment and name of any task

    def tasks_update_batch(self, data: Any) -> dict[str, Any]:
        items = data if isinstance(data, list) else [data]
        for item in items:
            self._edit_task(item)
        return {"updated": len(items)}

    def _status(self, status: str, action: str = "") -> Callable[[dict[str, Any]], dict[str, Any]]:
        def change(data: dict[str, Any]) -> dict[str, Any]:
            task = self._get("tasks", data.get("task"), _bad_task)
            if action == "dequeue" and task.get("status") != "queued":
                return {"updated": 0, "fields": {}}  # the server dequeues only a queued task
            check_status_change(task, action, status, data.get("force"))
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
        check_status_change(task, "reset", "created", data.get("force"))
        task.update(status="created", status_changed=_now(), last_iteration=0)
        task.pop("started", None)
        task.pop("completed", None)
        if data.get("clear_all"):
            task["models"]["output"] = []
        return {"updated": 1, "fields": {"status": "created"}, "dequeued": {}, "frames": {}, "events": {}}

    def tasks_add_or_update_model(self, data: dict[str, Any]) -> dict[str, Any]:
        required(data, "task", "name", "model", "type")
        kind = data["type"]
        if kind not in ("input", "output"):
            raise StandInError(
                400, 12, f"Validation error (error for field 'type': value '{kind}' is not a valid choice..)"
            )
        task = self._get("tasks", data.get("task"), _bad_task)
        check_list_status(task)
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
        check_list_status(task)
        removed = 0
        for spec in data.get("models") or []:
            entries = task.setdefault("models", {}).setdefault(spec.get("type") or "output", [])
            keep = [e for e in entries if e.get("name") != spec.get("name")]
            removed += len(entries) - len(keep)
            entries[:] = keep
        return {"updated": int(bool(removed))}

    def _edit_named_dict(self, field_name: str, items_key: str, data: dict[str, Any]) -> dict[str, Any]:
        task = self._get("tasks", data.get("task"), _bad_task)
        check_params_status(task, data.get("force"))
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
        check_list_status(task)
        artifacts = task.setdefault("execution", {}).setdefault("artifacts", [])
        for art in data.get("artifacts") or []:
            artifacts[:] = [a for a in artifacts if (a.get("key"), a.get("mode")) != (art.get("key"), art.get("mode"))]
            artifacts.append(art)
        return {"updated": 1}

    def tasks_delete_artifacts(self, data: dict[str, Any]) -> dict[str, Any]:
        task = self._get("tasks", data.get("task"), _bad_task)
        check_list_status(task)
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

    @staticmethod
    def _batch_ids(data: dict[str, Any]) -> list[Any]:
        """A batch request's ``ids`` (apimodels/batch.py ``BatchRequest``): a non-empty list."""
        required(data, "ids")
        if not data["ids"]:
            raise StandInError(
                400,
                12,
                "Validation error (error for field 'ids': value '[]' length is lower than allowed minimum '1'..)",
            )
        return list(data["ids"])

    def _archive(self, kind: str, error: Callable[[str], StandInError], archive: bool) -> Callable[..., dict[str, Any]]:
        """``archive_many``/``unarchive_many``: add or pull the ``archived`` system tag, nothing else (a
        model stays on its task's list); an unknown id is a ``failed`` entry, never the whole call."""

        def change(data: dict[str, Any]) -> dict[str, Any]:
            succeeded, failed = [], []
            for ident in self._batch_ids(data):
                doc = self._collection(kind).get(ident)
                if doc is None:
                    bad = error(ident)
                    failed.append({"id": ident, "error": {"codes": [bad.code, bad.subcode], "msg": bad.msg}})
                    continue
                tags = set(doc.get("system_tags") or [])
                tags = tags | {"archived"} if archive else tags - {"archived"}
                doc["system_tags"] = sorted(tags)
                doc["last_update"] = _now()
                succeeded.append({"id": ident, ("archived" if archive else "unarchived"): True})
            return {"succeeded": succeeded, "failed": failed}

        return change
