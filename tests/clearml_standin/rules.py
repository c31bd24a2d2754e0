"""The real clearml-server's rules the stand-in copies, each with the answer the server gives.

Measured on clearml-server's apiserver 2.0.0 (API 2.31) run from its own code on loopback,
2026-12-06, and read from its code (the file named at each rule). A request the stand-in
accepts and the real server refuses is a defect of the stand-in:
``tests/test_clearml_standin_rules.py`` checks each rule here.
"""

from __future__ import annotations

from typing import Any

from tests.clearml_standin.common import StandInError

__all__ = [
    "MAX_PAGE_SIZE",
    "MIN_NAME",
    "check_edit_status",
    "check_status_change",
    "check_list_status",
    "check_metadata_items",
    "check_name",
    "check_params_status",
    "check_tags",
    "check_type",
    "metadata_key",
    "page_window",
    "required",
]

#: ``services/_mongo.conf`` ``max_page_size``: every ``get_all`` answers at most this many (also without paging).
MAX_PAGE_SIZE = 500
#: ``database/model/*.py``: ``name = StrippedStringField(min_length=3)`` for models, tasks and projects.
MIN_NAME = 3
#: ``bll/task/utils.get_task_for_update(force=True)``: the statuses in which a task's lists change.
_LIST_STATUSES = ("created", "in_progress")


def _status_error(status: str) -> StandInError:
    return StandInError(400, 110, f"Invalid task status: expected=created, status={status}")


def check_list_status(task: dict[str, Any]) -> None:
    """``tasks.add_or_update_model``, ``delete_models``, ``add_or_update_artifacts``, ``delete_artifacts``:
    only a ``created`` or ``in_progress`` task (400/110 otherwise, with or without ``force``)."""
    if task.get("status") not in _LIST_STATUSES:
        raise _status_error(str(task.get("status")))


#: The status changes clearml-server refuses without ``force`` (bll/task/utils.py ``state_machine``;
#: measured for every status and action): current status -> actions refused with ``400/110``.
_REFUSED_CHANGES = {
    "created": ("stopped", "completed", "failed", "publish", "close"),
    "in_progress": ("publish", "close", "enqueue"),
    "completed": ("stopped", "failed", "close", "enqueue"),
    "failed": ("started", "completed", "close"),
    "published": ("started", "stopped", "completed", "failed", "publish", "close", "reset", "enqueue"),
    "closed": ("started", "completed", "enqueue"),
}


def check_status_change(task: dict[str, Any], action: str, new_status: str, force: Any) -> None:
    """``tasks.<action>`` moving a task to ``new_status``: refused (400/110) as the server's state machine
    refuses it, unless ``force``; ``reset`` of a published task is refused even with ``force``."""
    current = str(task.get("status"))
    if action == "reset" and current == "published":
        raise StandInError(400, 110, f"Invalid task status: task_id={task['id']}, status=published")
    if not force and action in _REFUSED_CHANGES.get(current, ()):
        raise StandInError(
            400,
            110,
            f"Invalid task status (Invalid status change): current_status={current}, new_status={new_status}",
        )


def check_edit_status(task: dict[str, Any], force: Any) -> None:
    """``tasks.edit`` (services/tasks.py ``edit``): a ``created`` task, or any task with ``force``."""
    if not force and task.get("status") != "created":
        raise _status_error(str(task.get("status")))


def check_params_status(task: dict[str, Any], force: Any) -> None:
    """``tasks.edit_hyper_params``/``edit_configuration`` (bll/task/hyperparams.py): ``created``, or
    ``in_progress`` too with ``force``."""
    allowed = _LIST_STATUSES if force else ("created",)
    if task.get("status") not in allowed:
        raise _status_error(str(task.get("status")))


def required(data: dict[str, Any], *fields: str) -> None:
    """A request field the endpoint's schema requires: ``400/12 ... field is required!``."""
    for name in fields:
        if data.get(name) is None:
            raise StandInError(400, 12, f"Validation error (error for field '{name}'. field is required!)")


def check_type(data: dict[str, Any], field: str, kind: type, name: str) -> None:
    """A request field of the wrong JSON type: ``400/12 ... value is wrong, expected type "<name>"``."""
    value = data.get(field)
    if value is not None and not isinstance(value, kind):
        raise StandInError(
            400,
            12,
            f"Validation error (error for field '{field}': ('value is wrong, expected type \"{name}\"', {value!r}).)",
        )


def check_name(name: Any) -> str:
    """A model, task or project name: a string of at least 3 characters once stripped (400/800),
    a non-string is the server's crash (500). Returns it stripped, as ``StrippedStringField`` stores it."""
    if not isinstance(name, str):
        raise StandInError(500, 0, f"'{type(name).__name__}' object has no attribute 'strip'")
    if len(name.strip()) < MIN_NAME:
        raise StandInError(400, 800, "Data validation error: name=String value is too short")
    return name.strip()


def check_tags(value: Any, *, create: bool) -> list[str]:
    """``tags``/``system_tags`` (services/utils.conform_tag_fields): a list of strings, sorted, duplicates kept.

    ``models.create`` refuses a string (400/12); ``models.edit``/``update`` take a string as a list of
    its characters (mongoengine's ``ListField``). A non-string item crashes (500), a ``__$`` prefix is
    refused (400/16).
    """
    if isinstance(value, str):
        if create:
            raise StandInError(
                400,
                12,
                f"Validation error (error for field 'tags': ('value is wrong, expected type \"list\"', {value!r}).)",
            )
        value = list(value)
    if not isinstance(value, list):
        raise StandInError(400, 12, f"Validation error (error for field 'tags': value {value!r} is not a list.)")
    for tag in value:
        if not isinstance(tag, str):
            raise StandInError(500, 0, f"'{type(tag).__name__}' object has no attribute 'startswith'")
        if tag.startswith("__$"):
            raise StandInError(400, 16, f"Invalid value for fields (unsupported tag prefix): values=({tag})")
    return sorted(value)


def metadata_key(key: str, *, replace: bool) -> str:
    """A metadata key as ``models.add_or_update_metadata`` stores it (bll/model/metadata.py).

    Stripped (``utilities/parameter_key_escaper.py``); empty is 400/12. Without ``replace_metadata``
    each key is the mongoengine update ``set__metadata__<key>``: ``key``, ``type`` and ``value``
    resolve to the metadata item's own fields (400/800), ``S`` is the positional operator (500).
    """
    key = key.strip()
    if not key:
        raise StandInError(400, 12, "Validation error (Empty key is not allowed)")
    if not replace and key in ("key", "type", "value"):
        raise StandInError(400, 800, f"Data validation error: {key}=StringField only accepts string values")
    if not replace and key == "S":
        raise StandInError(
            500,
            0,
            'Field name cannot contain the null character and top-level field name cannot start with "$" (found: $)',
        )
    return key


def check_metadata_items(items: Any) -> list[dict[str, Any]]:
    """``models.add_or_update_metadata``'s ``metadata``: a non-empty list of items with string key, type, value."""
    if not isinstance(items, list):
        raise StandInError(
            400,
            12,
            f"Validation error (error for field 'metadata': ('value is wrong, expected type \"list\"', {items!r}).)",
        )
    if not items:
        raise StandInError(
            400,
            12,
            "Validation error (error for field 'metadata': value '[]' length is lower than allowed minimum '1'..)",
        )
    for item in items:
        for field in ("key", "type", "value"):
            value = item.get(field) if isinstance(item, dict) else None
            if value is None:
                raise StandInError(
                    400,
                    12,
                    f"Validation error (error for field 'metadata': (\"error for field '{field}'.\", "
                    "validationerror('field is required!')).)",
                )
            if not isinstance(value, str):
                raise StandInError(
                    400,
                    12,
                    f"Validation error (error for field 'metadata': error for field '{field}': "
                    f"('value is wrong, expected type \"str\"', {value!r})..)",
                )
    return items


def page_window(data: dict[str, Any]) -> tuple[int, int]:
    """``(start, size)`` of a ``get_all`` page (database/model/base.py ``validate_paging``): ``page_size``
    defaults to and is capped at :data:`MAX_PAGE_SIZE`; ``page`` < 0 or ``page_size`` < 1 is 400/12."""
    page, size = data.get("page"), data.get("page_size")
    if page is not None and not isinstance(page, int):
        raise StandInError(500, 0, "'<' not supported between instances of 'str' and 'int'")
    if page is not None and page < 0:
        raise StandInError(400, 12, "Validation error (page must be >=0): field=page")
    if size is not None and (not isinstance(size, int) or size < 1):
        raise StandInError(400, 12, "Validation error (page_size must be >0): field=page_size")
    size = min(size or MAX_PAGE_SIZE, MAX_PAGE_SIZE)
    return (page or 0) * size, size
