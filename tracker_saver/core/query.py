"""Where-expressions over record fields and metadata: parse once, then run on SQLite or client-side.

A condition is ``(key, op, value)`` with ``op`` one of ``== != > >= < <= in``. In Python,
``where`` is a dict: ``{"score": (">", 0.9), "prefix": "best", "slot": ("in", [0, 1])}``
(a bare value means equality). As text (the CLI's ``--where``, the UI's filter, the API's
``where=``, ``find_models(where="...")``) it is one grammar, parsed here and nowhere else:
conditions such as ``score>0.9``, ``prefix=best``, ``global_step in 10,20`` joined by the
word ``and`` (``score<0.3 and prefix=best``; an ``and`` inside quotes is text). A record whose
metadata lacks the key (or holds ``None``, e.g. a NaN score) never matches a condition on it,
and sorts last.
A key may also be one of the record's own fields (``name!=x``, ``state=live``, ``run=r1``,
``id in 3,4``): its text fields compare as text, so ``run=1`` finds the run named ``1``.
``>``, ``>=``, ``<`` and ``<=`` compare numbers: ``score>abc`` is a ``ConfigError``.

A key is *known* when it is a record field, a key every saved record carries (:data:`SAVED_KEYS`)
or a metadata key some record in the registry holds (a callback's own keys included);
``find_models`` refuses any other where or sort key with :func:`check_key`, so a typo such as
``scor>0.5`` is an error naming the known keys rather than an empty answer.

Keys and values are data, never SQL: a backend binds both as parameters. So a where-dict may
name any metadata key a callback can set (``"lr (warm-up)"``, ``"it's"``); expressions and
``order_by`` take identifier-like keys (``score``, ``ignite_name``, ``a.b-c``).

A query has limits, each a ``ConfigError`` naming it (docs/bad-inputs.md, "Limits"): at most
:data:`MAX_CONDITIONS` conditions, :data:`MAX_VALUES` values in all (each value of an ``in``
list counts), a text value of at most ``MAX_VALUE_BYTES`` (no record holds a longer one) and
:data:`MAX_ORDER_KEYS` sort keys. A backend then never meets a query it cannot run (SQLite's
expression depth of 1000, its 64 tables of a join).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tracker_saver.core.errors import ConfigError
from tracker_saver.core.records import MAX_VALUE_BYTES, TIMING_KEYS, MetaValue
from tracker_saver.core.text import METADATA_VALUE_ALLOWS, check_text

__all__ = [
    "MAX_CONDITIONS",
    "MAX_ORDER_KEYS",
    "MAX_VALUES",
    "OPS",
    "RANGE_OPS",
    "RECORD_FIELDS",
    "SAVED_KEYS",
    "TEXT_FIELDS",
    "Condition",
    "Order",
    "check_key",
    "check_size",
    "is_number",
    "matches",
    "parse_order",
    "parse_where",
    "sort_key",
    "split_and",
]

OPS = ("==", "!=", ">=", "<=", ">", "<", "in")
#: The most conditions one query may have (a where-dict's keys, a where-text's parts joined by ``and``).
MAX_CONDITIONS = 100
#: The most values the conditions of one query may name in all; ``in 1,2,3`` names three.
MAX_VALUES = 1000
#: The most sort keys one query may have (each metadata key is one more join).
MAX_ORDER_KEYS = 8
#: Operators that compare numbers.
RANGE_OPS = (">", ">=", "<", "<=")
#: Keys that sort/filter on a record's own fields rather than its metadata.
RECORD_FIELDS = ("id", "name", "filename", "state", "stream", "run", "project", "created_at", "output_uri")
#: Record fields that hold text: a condition on one compares text (``run=1`` is the run ``"1"``).
TEXT_FIELDS = ("name", "filename", "state", "stream", "run", "project", "output_uri")
#: Metadata keys every saved record carries (docs/concepts.md, "Metadata"): known to a query even
#: in a registry that holds no record yet.
SAVED_KEYS = (
    "basename",
    "created_at",
    "ext",
    "global_step",
    "ignite_name",
    "prefix",
    "priority",
    "score",
    "score_name",
    "sha256",
    "size",
    "slot",
    "uri",
    *TIMING_KEYS,
)
#: Known keys an error lists before it stops.
_LISTED = 60
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,99}")
_EXPR = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*(==|!=|>=|<=|>|<|=|\s+in\s+)\s*(.*?)\s*")
#: The word that joins conditions, and quoted text (in which it is only text).
_AND = re.compile(r"(?:^|(?<=\s))and(?=\s|$)", re.IGNORECASE)
#: ``or``, which the grammar has not: a condition joined by it is refused, not read as a value.
_OR = re.compile(r"(?:^|(?<=\s))or(?=\s|$)", re.IGNORECASE)
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


@dataclass(frozen=True)
class Condition:
    """One condition on a metadata key.

    Examples:
        >>> Condition("score", ">", 0.9).test(0.95)
        True
    """

    key: str
    op: str
    value: Any

    def __post_init__(self) -> None:
        # Any key a record can hold (records.clean_metadata): backends bind it as a parameter.
        if not isinstance(self.key, str) or not self.key or len(self.key) > 1000:
            raise ConfigError(
                f"where key {self.key!r} is not a metadata key: use the key's name as a non-empty string "
                "(without NUL, at most 1000 characters), e.g. 'score'"
            )
        check_text("where key", self.key)
        for value in self.value if self.op == "in" and isinstance(self.value, (list, tuple)) else [self.value]:
            if isinstance(value, str):
                if (size := len(value.encode("utf-8", "surrogatepass"))) > MAX_VALUE_BYTES:
                    raise ConfigError(
                        f"where value of {self.key!r} is {size:,} bytes long: no metadata value is longer than "
                        f"{MAX_VALUE_BYTES:,} bytes, so no record could match; give a shorter value"
                    )
                check_text(f"where value of {self.key!r}", value, allow=METADATA_VALUE_ALLOWS)
        if self.op not in OPS:
            raise ConfigError(f"where operator {self.op!r} for {self.key!r} is unknown: use one of {', '.join(OPS)}")
        if self.op == "in" and (isinstance(self.value, (str, bytes)) or not isinstance(self.value, Iterable)):
            raise ConfigError(f"where {self.key!r} 'in' needs a list of values, got {self.value!r}")
        if self.op in RANGE_OPS and not is_number(self.value):
            raise ConfigError(
                f"where {self.key}{self.op}{self.value!r}: {self.op} compares numbers, and {self.value!r} is not "
                f"a number: give a number (e.g. '{self.key}{self.op}0.9'), or use = or != to compare text"
            )
        if self.key in TEXT_FIELDS and self.op in RANGE_OPS:
            raise ConfigError(
                f"where {self.key}{self.op}{self.value!r}: {self.key!r} is text, which {self.op} cannot compare: "
                f"use = or != (e.g. '{self.key}=VALUE')"
            )
        if self.key in TEXT_FIELDS:  # a record's text field: 'run=1' is the run "1", not the number
            text: Any = [_text(v) for v in self.value] if self.op == "in" else _text(self.value)
            object.__setattr__(self, "value", text)

    def test(self, actual: MetaValue) -> bool:
        """Whether a metadata value satisfies the condition (``None`` never does)."""
        if actual is None:
            return False
        if self.op == "in":
            return any(_eq(actual, v) for v in self.value)
        if self.op == "==":
            return _eq(actual, self.value)
        if self.op == "!=":
            return not _eq(actual, self.value)
        if is_number(actual) != is_number(self.value):
            return False
        try:
            if self.op == ">":
                return bool(actual > self.value)
            if self.op == ">=":
                return bool(actual >= self.value)
            if self.op == "<":
                return bool(actual < self.value)
            return bool(actual <= self.value)
        except TypeError:
            return False


@dataclass(frozen=True)
class Order:
    """Sort by a metadata key (or ``created_at``/``name``/``state``/``id``), descending if ``desc``."""

    key: str
    desc: bool = False


def is_number(value: Any) -> bool:
    """Whether ``value`` is an int or float metadata value (a bool is not a number here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _text(value: Any) -> str:
    """A condition value on a text field, as text (``1.0`` stays as typed only for strings)."""
    return value if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)


def _eq(a: Any, b: Any) -> bool:
    if is_number(a) and is_number(b):
        return bool(float(a) == float(b))
    return type(a) is type(b) and bool(a == b)  # True is not 1, "1" is not 1


def _typed(text: str) -> MetaValue:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def split_and(text: str) -> list[str]:
    """The conditions of one where-text: its parts between the word ``and`` outside quotes.

    Blank text has none; an ``and`` with nothing on one side is a ``ConfigError``.

    Examples:
        >>> split_and("score<0.3 and prefix=best")
        ['score<0.3', 'prefix=best']
        >>> split_and("name='this and that' AND state=live")
        ["name='this and that'", 'state=live']
    """
    text = text.strip()
    if not text:
        return []
    # Quoted text is masked (same length), so an 'and' inside it is never a separator.
    masked = _QUOTED.sub(lambda m: "_" * len(m.group()), text)
    parts, start = [], 0
    for m in _AND.finditer(masked):
        parts.append(text[start : m.start()])
        start = m.end()
    parts.append(text[start:])
    if not all(part.strip() for part in parts):
        raise ConfigError(
            f"where expression {text!r} has an empty condition next to 'and': join conditions as "
            "'score>0.9 and prefix=best'"
        )
    return [part.strip() for part in parts]


def _refuse_or(expr: str, value: str | None) -> None:
    """A condition with the word ``or`` outside quotes (in its value, or anywhere if it is no
    condition at all) means "either": there is no such thing here, so say so rather than read it
    as text or as a bad number. A quoted value is text, ``or`` included."""
    text = expr if value is None else value
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return
    if _OR.search(_QUOTED.sub(lambda m: "_" * len(m.group()), text)):
        raise ConfigError(
            f"where expression {expr!r} joins conditions with 'or', which where-expressions do not have (every "
            "condition must hold): for several values of one key use 'in' (e.g. 'prefix in best,last'); for "
            "either of two conditions run one query per condition"
        )


def parse_where(where: Mapping[str, Any] | Sequence[str] | str | None) -> tuple[Condition, ...]:
    """Normalize a where-dict, a where-text or a list of them to conditions.

    A text holds one condition or several joined by ``and`` (:func:`split_and`); a list's
    conditions all apply, as if joined by ``and``.

    Examples:
        >>> parse_where("score>0.9")
        (Condition(key='score', op='>', value=0.9),)
        >>> [c.key for c in parse_where("score<0.3 and prefix=best")]
        ['score', 'prefix']
        >>> parse_where({"prefix": "best", "slot": ("in", [0, 1])})[1].op
        'in'
        >>> parse_where("score>0.9 or prefix=best")
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.ConfigError: where expression 'score>0.9 or prefix=best' joins conditions with 'or', which where-expressions do not have (every condition must hold): for several values of one key use 'in' (e.g. 'prefix in best,last'); for either of two conditions run one query per condition
    """
    if where is None:
        return ()
    if isinstance(where, str):
        where = [where]
    if isinstance(where, Mapping):
        _check_count(len(where))
        out = []
        for key, cond in where.items():
            if isinstance(cond, tuple) and len(cond) == 2 and isinstance(cond[0], str):
                op, value = cond
                is_list = op == "in" and not isinstance(value, (str, bytes))
                out.append(Condition(key, "==" if op == "=" else op, list(value) if is_list else value))
            else:
                out.append(Condition(key, "==", cond))
        return check_size(out)
    parts = [part for text in where for part in split_and(text)]
    _check_count(len(parts))
    conditions = []
    for expr in parts:
        m = _EXPR.fullmatch(expr)
        _refuse_or(expr, m.group(3) if m else None)
        if not m or not m.group(3) or m.group(3)[0] in "<>=!":
            raise ConfigError(
                f"where expression {expr!r} is not 'KEY OP VALUE': e.g. 'score>0.9', 'prefix=best', "
                "'global_step in 10,20', 'score>0.9 and prefix=best'"
            )
        key, op, raw = m.group(1), m.group(2).strip(), m.group(3)
        if op == "in":
            conditions.append(Condition(key, "in", [_typed(v) for v in raw.split(",")]))
        else:
            conditions.append(Condition(key, "==" if op == "=" else op, _typed(raw)))
    return check_size(conditions)


def _check_count(count: int) -> None:
    """Refuse more than :data:`MAX_CONDITIONS` conditions before any is parsed (a where-text may be megabytes)."""
    if count > MAX_CONDITIONS:
        raise ConfigError(
            f"where has {count} conditions: a query has at most {MAX_CONDITIONS}; for many values of one key "
            "use one 'in' condition (e.g. 'global_step in 10,20,30')"
        )


def check_size(conditions: Iterable[Condition]) -> tuple[Condition, ...]:
    """``conditions`` as a tuple, if they name at most :data:`MAX_VALUES` values in all, else ``ConfigError``.

    Examples:
        >>> check_size([Condition("slot", "in", list(range(1001)))])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.ConfigError: where names 1001 values: a query names at most 1000 ...
    """
    out = tuple(conditions)
    count = sum(len(c.value) if c.op == "in" else 1 for c in out)
    if count > MAX_VALUES:
        raise ConfigError(
            f"where names {count} values: a query names at most {MAX_VALUES} (each value of an 'in' list counts); "
            "split it into several queries, or narrow it with a range (e.g. 'global_step>=1000')"
        )
    return out


def parse_order(order_by: str | Sequence[str] | None) -> tuple[Order, ...]:
    """``"-score"`` → descending score; a list sorts by several keys.

    Examples:
        >>> parse_order("-score")
        (Order(key='score', desc=True),)
    """
    if order_by is None:
        return ()
    keys = [order_by] if isinstance(order_by, str) else list(order_by)
    if len(keys) > MAX_ORDER_KEYS:
        raise ConfigError(f"order_by has {len(keys)} keys: sort by at most {MAX_ORDER_KEYS}")
    out = []
    for raw in keys:
        desc = raw.startswith("-")
        key = raw.lstrip("+-")
        if not _KEY.fullmatch(key):
            raise ConfigError(f"order_by {raw!r} is not a key like 'score' or '-score'")
        out.append(Order(key, desc))
    return tuple(out)


def check_key(what: str, key: str, present: Collection[str]) -> None:
    """Raise ``ConfigError`` unless ``key`` is known: a record field, a :data:`SAVED_KEYS` key or in ``present``.

    ``what`` says where the key came from (``"where"``, ``"sort"``); ``present`` holds the
    metadata keys of the registry's records. The message names the closest known key and the
    known keys.

    Examples:
        >>> check_key("where", "score", ())
        >>> check_key("where", "scor", {"lr"})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        tracker_saver.core.errors.ConfigError: unknown where key 'scor' (did you mean 'score'?): it is not a record field, ...
    """
    if key in RECORD_FIELDS or key in SAVED_KEYS or key in present:
        return
    known = sorted({*RECORD_FIELDS, *SAVED_KEYS, *present})
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    listed = ", ".join(known[:_LISTED]) + (f", and {len(known) - _LISTED} more" if len(known) > _LISTED else "")
    raise ConfigError(
        f"unknown {what} key {key!r}{hint}: it is not a record field, and no record in the registry has it as "
        f"metadata; known keys: {listed}"
    )


def matches(metadata: Mapping[str, MetaValue], conditions: Iterable[Condition]) -> bool:
    """Whether metadata satisfies every condition (client-side filtering)."""
    return all(c.test(metadata.get(c.key)) for c in conditions)


def sort_key(value: MetaValue) -> tuple[int, Any]:
    """A key that orders numbers before strings and bools (absent values are placed by the caller)."""
    if is_number(value):
        return (0, float(value))  # type: ignore[arg-type]
    return (1, str(value))
