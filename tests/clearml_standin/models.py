"""The stand-in's ``models.*`` endpoints."""

from __future__ import annotations

import copy
from typing import Any

from tests.clearml_standin.common import (
    COMPANY_ID,
    USER_ID,
    StandInError,
    _bad_model,
    _new_id,
    _now,
)
from tests.clearml_standin.rules import check_metadata_items, check_tags, check_type, metadata_key, required
from tests.clearml_standin.tasks import Tasks


class Models(Tasks):
    """Models: create, edit, metadata, archive, delete, queries."""

    # -- models ------------------------------------------------------------------------------
    #: services/models.py ``create_fields``: what ``models.create`` and ``models.edit`` set.
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
    #: ``models.update`` sets only the fields the server's Model marks ``user_set_allowed``; it ignores the rest.
    _UPDATE_FIELDS = ("name", "tags", "system_tags", "comment", "uri", "project", "created", "metadata")
    _STRING_FIELDS = ("comment", "framework")

    def _model_fields(self, data: dict[str, Any], how: str = "edit") -> dict[str, Any]:
        """The fields a ``models.create``/``edit``/``update`` (``how``) sets, checked as clearml-server checks them.

        Unknown fields are ignored, as the server does (``filter_fields``/``parse_from_call``).
        """
        names = self._UPDATE_FIELDS if how == "update" else self._MODEL_FIELDS
        fields = {k: data[k] for k in names if data.get(k) is not None}
        if "name" in fields:
            fields["name"] = self._check_name("model", fields["name"])
        for key in ("tags", "system_tags"):
            if key in fields:
                fields[key] = check_tags(fields[key], create=how == "create")
        if "uri" in fields and not isinstance(fields["uri"], str):
            raise StandInError(500, 0, f"'{type(fields['uri']).__name__}' object has no attribute 'strip'")
        for key in self._STRING_FIELDS:
            if key in fields and not isinstance(fields[key], str):
                raise StandInError(400, 800, f"Data validation error: {key}=StringField only accepts string values")
        if "ready" in fields and not isinstance(fields["ready"], bool):
            raise StandInError(400, 800, "Data validation error: ready=BooleanField only accepts boolean values")
        labels = data.get("labels")
        if isinstance(labels, dict) and any(not isinstance(v, int) for v in labels.values()):
            bad = ", ".join(str(v) for v in labels.values() if not isinstance(v, int))
            raise StandInError(400, 12, f"Validation error (labels values must be integers): values=({bad})")
        if "metadata" in fields:
            # clearml-server 2.0 takes an object here (key -> item) while the SDK's schema still
            # says array: a list is refused (create) or crashes (edit, update). The SDK itself only
            # sends metadata through models.add_or_update_metadata; so must everyone else.
            if not isinstance(fields["metadata"], dict):
                if how != "create":
                    raise StandInError(500, 0, f"'{type(fields['metadata']).__name__}' object has no attribute 'items'")
                check_type(fields, "metadata", dict, "dict")
            if how == "create":
                fields["metadata"] = self._metadata(fields["metadata"])
            else:  # edit and update store the items unchecked, keys stripped
                fields["metadata"] = {str(k).strip(): copy.deepcopy(v) for k, v in fields["metadata"].items()}
        self._check_references(fields, how, data)
        return fields

    def _check_references(self, fields: dict[str, Any], how: str, data: dict[str, Any]) -> None:
        """The ids a model refers to: each endpoint has its own answer for an unknown one."""
        if fields.get("project"):
            if how == "create" and fields["project"] not in self.projects:
                raise StandInError(400, 12, f"Validation error (Invalid project ids): project={fields['project']}")
            if how == "edit" and fields["project"] not in self.projects:
                raise StandInError(
                    400, 16, f"Invalid value for fields (expecting Project id): id={fields['project']}, field=project"
                )
            self._check_writable(fields["project"])
        task = data.get("task")
        if task is not None and task not in self.tasks:
            if how == "edit":
                raise StandInError(400, 16, f"Invalid value for fields (expecting Task id): id={task}, field=task")
            raise StandInError(400, 101, f"Invalid task id: id={task}, company={COMPANY_ID}")
        if how == "edit" and fields.get("parent") and fields["parent"] not in self.models:
            raise StandInError(
                400, 16, f"Invalid value for fields (expecting Model id): id={fields['parent']}, field=parent"
            )
        if data.get("iteration") is not None and not isinstance(data["iteration"], int):
            raise StandInError(
                400, 12, f"Validation error (invalid literal for int() with base 10: {data['iteration']!r})"
            )

    def models_create(self, data: dict[str, Any]) -> dict[str, Any]:
        required(data, "uri", "name")
        fields = self._model_fields(data, "create")
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

    def _change_model(self, data: dict[str, Any], how: str) -> dict[str, Any]:
        required(data, "model")
        model = self._get("models", data.get("model"), _bad_model)
        self._check_writable(model.get("project"))
        fields = self._model_fields(data, how)
        model.update(copy.deepcopy(fields))
        if data.get("iteration") is not None:
            model["last_iteration"] = int(data["iteration"])
        if fields:
            model["last_update"] = model["last_change"] = _now()
        return {"updated": int(bool(fields)), "fields": fields}

    def models_edit(self, data: dict[str, Any]) -> dict[str, Any]:
        return self._change_model(data, "edit")

    def models_update(self, data: dict[str, Any]) -> dict[str, Any]:
        """The web UI's call: a rename, new tags or a comment; fields ``update`` does not set are ignored."""
        return self._change_model(data, "update")

    def models_update_tags(self, data: dict[str, Any]) -> dict[str, Any]:
        """The web app's table tag menu: ``add_tags`` added once each, ``remove_tags`` pulled (bll/organization
        ``edit_entity_tags``); unknown ids are skipped, as the server's update skips them."""
        ids, add, remove = data.get("ids") or [], data.get("add_tags") or [], data.get("remove_tags") or []
        if not ids:
            raise StandInError(400, 12, "Validation error (No entity ids provided for editing tags)")
        if not (add or remove):
            raise StandInError(400, 12, "Validation error (Either add tags or remove tags should be provided)")
        updated = 0
        for model in (self.models[i] for i in ids if i in self.models):
            tags = [*(model.get("tags") or []), *(t for t in add if t not in (model.get("tags") or []))]
            model["tags"] = [t for t in tags if t not in remove]
            model["last_change"] = _now()
            updated += bool(add) + bool(remove)
        return {"updated": updated}

    def models_update_for_task(self, data: dict[str, Any]) -> dict[str, Any]:
        """Gone since API 2.13 (the SDK sends 2.20 and later): the server's ``301/1``."""
        raise StandInError(
            301, 1, "This endpoint is no longer supported for the requested api version (use tasks.add_or_update_model)"
        )

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
        """Gone since API 2.13, as :meth:`models_update_for_task`."""
        raise StandInError(
            301,
            1,
            "This endpoint is no longer supported for the requested api version (use models.get_by_id/get_all apis)",
        )

    def models_add_or_update_metadata(self, data: dict[str, Any]) -> dict[str, Any]:
        required(data, "model")
        items = check_metadata_items(data.get("metadata"))
        model = self._get("models", data.get("model"), _bad_model)
        self._check_writable(model.get("project"))
        replace = bool(data.get("replace_metadata"))
        stored = {}
        for item in items:
            key = metadata_key(item["key"], replace=replace)
            stored[key] = {"key": item["key"], "type": item["type"], "value": item["value"]}
        if replace:
            model["metadata"] = stored
        else:
            model.setdefault("metadata", {}).update(stored)
        model["last_update"] = model["last_change"] = _now()
        return {"updated": 1}

    def models_delete_metadata(self, data: dict[str, Any]) -> dict[str, Any]:
        required(data, "model", "keys")
        if not data["keys"]:
            raise StandInError(
                400,
                12,
                "Validation error (error for field 'keys': value '[]' length is lower than allowed minimum '1'..)",
            )
        model = self._get("models", data.get("model"), _bad_model)
        self._check_writable(model.get("project"))
        for key in data["keys"]:
            model.setdefault("metadata", {}).pop(str(key).strip(), None)
        model["last_update"] = model["last_change"] = _now()
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

    def _delete_model(self, ident: Any, force: Any) -> dict[str, Any]:
        """bll/model ``delete_model``: refused for a model a task uses as input, or whose task is
        published, without ``force``; its entry leaves its (unpublished) task's output models."""
        model = self._get("models", ident, _bad_model)
        self._check_writable(model.get("project"))
        users = [t for t in self.tasks.values() if ident in [e.get("model") for e in t["models"].get("input") or []]]
        if users and not force:
            raise StandInError(
                400,
                205,
                f"Model is used by tasks (as execution model, use force=True to delete): num_tasks={len(users)}",
            )
        task = self.tasks.get(model.get("task") or "")
        if task is not None and task.get("status") == "published" and not force:
            raise StandInError(
                400,
                206,
                f"Task that created this model exists (and published, use force=True to delete): task={task['id']}",
            )
        if task is not None and task.get("status") != "published":
            outputs = task["models"].setdefault("output", [])
            outputs[:] = [e for e in outputs if e.get("model") != ident]
        del self.models[model["id"]]
        return model

    def models_delete(self, data: dict[str, Any]) -> dict[str, Any]:
        required(data, "model")
        model = self._delete_model(data["model"], data.get("force"))
        return {"deleted": True, "url": model.get("uri")}

    def models_delete_many(self, data: dict[str, Any]) -> dict[str, Any]:
        """The web UI's delete: one result per id, a refused or unknown one among ``failed``."""
        succeeded, failed = [], []
        for ident in self._batch_ids(data):
            try:
                model = self._delete_model(ident, data.get("force"))
            except StandInError as exc:
                failed.append({"id": ident, "error": {"codes": [exc.code, exc.subcode], "msg": exc.msg}})
            else:
                succeeded.append({"id": ident, "deleted": True, "url": model.get("uri")})
        return {"succeeded": succeeded, "failed": failed}

    def models_get_frameworks(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"frameworks": sorted({m["framework"] for m in self.models.values() if m.get("framework")})}
