"""The project's JSON out: standard JSON that any strict parser reads, ±inf and NaN as typed strings; pure.

Python's :func:`json.dumps` writes ``Infinity``, ``-Infinity`` and ``NaN`` bare, which no standard
parser accepts (JavaScript's ``JSON.parse``, Go's ``encoding/json``, ``jq``). A score of ``±inf`` is
real (Ignite compares priorities, and a record keeps its exact priority), so every JSON the project
writes (the CLI's ``--json``, events, webhook bodies, the UI's API) goes through :func:`dumps`:
a non-finite float is written as the string ``"Infinity"``, ``"-Infinity"`` or ``"NaN"``, the
spellings JavaScript's ``Number()`` and Python's ``float()`` both read back exactly
(:func:`as_float`). A field that may hold any type (a record's ``metadata``) comes with its
``metadata_types``: ``"Infinity"`` typed ``float`` is the number, typed ``str`` the text.

Examples:
    >>> dumps({"score": float("inf"), "priority": float("-inf"), "loss": 0.5})
    '{"score": "Infinity", "priority": "-Infinity", "loss": 0.5}'
    >>> as_float("-Infinity"), as_float(0.5)
    (-inf, 0.5)
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from tracker_saver.core.records import encode_value

if TYPE_CHECKING:
    from tracker_saver.core.records import Record

__all__ = ["NON_FINITE", "as_float", "dumps", "float_out", "jsonable", "record_json"]

#: How each non-finite float is written, and read back.
NON_FINITE = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}
#: encode_value's name of each plain type, looked up first: a listing of 10,000 records names the
#: type of every metadata value (0.23 -> 0.19 s of CPU with this); a subclass goes to encode_value.
_TYPES: dict[type, str] = {bool: "bool", int: "int", float: "float", str: "str", type(None): "none"}


def float_out(value: float) -> float | str:
    """A float as the project's JSON carries it: itself if finite, else its string.

    Examples:
        >>> float_out(0.5), float_out(float("-inf")), float_out(float("nan"))
        (0.5, '-Infinity', 'NaN')
    """
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def jsonable(value: Any) -> Any:
    """``value`` with each non-finite float, at any depth of dicts, lists and tuples, as its string.

    Examples:
        >>> jsonable([1.0, {"a": (float("nan"), "x")}])
        [1.0, {'a': ['NaN', 'x']}]
    """
    if isinstance(value, float):
        return float_out(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def dumps(
    value: Any, *, indent: int | None = None, sort_keys: bool = False, separators: tuple[str, str] | None = None
) -> str:
    """``value`` as standard JSON (``allow_nan=False``: a non-finite float is a string, :func:`jsonable`).

    Most values hold no non-finite float: they are written by json's C encoder as they are, and
    only one that does is copied by :func:`jsonable` first (a listing of 10,000 records stays fast).

    Examples:
        >>> dumps({"b": float("nan"), "a": 1}, sort_keys=True, separators=(",", ":"))
        '{"a":1,"b":"NaN"}'
    """
    try:
        return json.dumps(value, indent=indent, sort_keys=sort_keys, separators=separators, allow_nan=False)
    except ValueError as exc:
        if "Out of range float" not in str(exc):  # json's words for a non-finite float; anything else is ours
            raise
    return json.dumps(jsonable(value), indent=indent, sort_keys=sort_keys, separators=separators, allow_nan=False)


def as_float(value: Any) -> Any:
    """A float-typed field's value as :func:`dumps` wrote it, read back: ``"Infinity"`` → ``inf``.

    Anything else comes back as it is (a number, ``None``, text that is no spelling of ours).

    Examples:
        >>> as_float("Infinity"), as_float(None), as_float("fast")
        (inf, None, 'fast')
    """
    return NON_FINITE.get(value, value) if isinstance(value, str) else value


def record_json(record: Record) -> dict[str, Any]:
    """A record as the CLI's ``--json`` writes it: :meth:`Record.to_dict` and each metadata value's type.

    ``metadata_types`` (``int``, ``float``, ``str``, ``bool``, ``none``; as the UI's API) keeps the
    type of a value that JSON cannot carry as it is: a float ``"Infinity"`` is not the text.

    Examples:
        >>> from tracker_saver.core.records import Record, RecordState
        >>> r = Record("1", "p", "r", "s", "f.pt", "f.pt", RecordState.LIVE, 0, "k", "u", metadata={"score": float("inf")})
        >>> dumps({k: record_json(r)[k] for k in ("metadata", "metadata_types")})
        '{"metadata": {"score": "Infinity"}, "metadata_types": {"score": "float"}}'
    """
    types = {key: _TYPES.get(type(value)) or encode_value(value)[0] for key, value in record.metadata.items()}
    return {**record.to_dict(), "metadata_types": types}
