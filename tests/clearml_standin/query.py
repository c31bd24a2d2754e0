"""The query machinery of ``get_all``: clearml-server's list fields, patterns, ordering and paging."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from tests.clearml_standin.common import StandInError, _forbidden, _new_id
from tests.clearml_standin.rules import check_name, page_window

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
    """clearml-server 2.0's ``NewListFieldBucketHelper`` (database/model/base.py), measured on the server.

    Values go to buckets by the current context (OR by default: ``in``/``nin``; after ``__$all`` or
    ``__$and``: ``all``/``nin``, since the server does not support ``not_all``), a value excluded by a
    leading ``-`` (only until the first explicit operator, or after ``__$nop``) or by ``__$not``. The
    buckets are joined by the first explicit operator if it comes before any value, else by AND:
    ``["a", "-b"]`` means "has a AND lacks b". ``None`` also matches an empty field.
    """
    if not isinstance(data, (list, tuple)):
        data = [data]
    operators = {"__$all": "and", "__$and": "and", "__$any": "or", "__$or": "or"}
    context, global_op, allow_empty, negate_next, legacy = "or", None, False, False, True
    buckets: dict[str, list[Any]] = {}
    for value in data:
        if value is None:
            allow_empty, negate_next = True, False
            global_op = global_op or "and"
            continue
        if not isinstance(value, str):
            raise StandInError(
                400, 16, f"Invalid value for fields (invalid value type, string expected): field={path}, value={value}"
            )
        if value == "__$nop":
            context, legacy, negate_next = "or", True, False
            global_op = global_op or "and"
            continue
        if value.startswith("__$"):
            if negate_next:
                raise StandInError(400, 16, f"Invalid value for fields (Value is expected after): field={path}")
            if value == "__$not":
                negate_next = True
                continue
            if value not in operators:
                raise StandInError(
                    400, 16, f"Invalid value for fields (Unsupported operator): field={path}, operator={value}"
                )
            context, legacy = operators[value], False
            global_op = global_op or context
            continue
        global_op = global_op or "and"
        include = not negate_next
        if not negate_next and legacy and value.startswith("-"):
            value, include = value[1:], False
            if not value:
                raise StandInError(
                    400,
                    16,
                    f"Invalid value for fields (Missing value after the exclude prefix -): field={path}, value=",
                )
        negate_next = False
        action = {("or", True): "in", ("or", False): "nin", ("and", True): "all", ("and", False): "nin"}[
            (context, include)
        ]
        buckets.setdefault(action, []).append(value)
    if negate_next:
        raise StandInError(400, 16, "Invalid value for fields (Value is expected after): operator=__$not")
    joined = global_op or "and"

    def test(doc: dict[str, Any]) -> bool:
        have = _as_set(_get_path(doc, path))
        results = []
        for action, values in buckets.items():
            want = set(values)
            if action == "in":
                results.append(bool(have & want))
            elif action == "nin":
                results.append(not (have & want))
            else:
                results.append(want <= have)
        ok = (all(results) if joined == "and" else any(results)) if results else True
        if allow_empty:
            ok = ok or not have
        return ok

    return test


class Query:
    """The entities and what every service does with them: look up, check, select, project."""

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
                    raise StandInError(400, 21, f"Malformed regular expression: err={exc}") from None
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
        else:  # without paging too: the server answers one page of at most MAX_PAGE_SIZE
            start, size = page_window(data)
            docs = docs[start : start + size]
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
        return check_name(name)

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
