"""The stand-in's ``models.*`` endpoints."""

from __future__ import annotations

import copy
from typing import Any

from tests.clearml_standin.common import (
    COMPANY_ID,
    USER_ID,
    StandInError,
    _bad_model,
    _bad_project,
    _bad_task,
    _new_id,
    _now,
)
from tests.clearml_standin.tasks import Tasks


class Models(Tasks):
    """Models: create, edit, metadata, archive, delete, queries."""

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
