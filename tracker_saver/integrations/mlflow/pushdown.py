"""What MLflow's logged-model search answers of a query: filter strings that only ever narrow.

The registry still applies the whole query to what comes back
(:func:`tracker_saver.registry.base.select`): a filter here may keep a record the query refuses,
never drop one it keeps. Pushed down:

* the record's own text fields (project, run, stream, output_uri, filename, name, state, its
  slot, a ``where`` of ``=`` or ``in`` on one of them): ``tags.`tracker_saver.FIELD` IN (...)``
  with every spelling either schema writes (:func:`~tracker_saver.integrations.mlflow.codec.spellings`);
* a record id: ``model_id``;
* a record tag (``--tag``): ``LIKE`` on the JSON list in ``tracker_saver.tags`` (``%``, ``_`` and
  ``'`` in a tag are wildcards there, so it only widens);
* a number compared with ``>``, ``>=``, ``<``, ``<=``, ``=`` or ``in``: the metric of that name,
  rounded outwards (``>`` is searched as ``>=``, ``in`` as the range of its values). A record's
  numbers are logged as metrics when it goes live or is pinned, so this filter is searched for
  the states that have them (live, revived, evicted, pinned), and the records of the other states
  (pending, failed) are searched without it.

Not pushed down: ``!=`` (MySQL compares text without case, so ``!=`` would drop records), text
metadata (the params hold the values at creation, and a post-upload callback may change them),
and ``created_at`` (tracker_saver's clock, not the server's ``creation_time``). One difference
remains: a number typed by hand into the ``tracker_saver.metadata`` tag in MLflow's UI is read
back everywhere, but a filter on that key is answered by the metric, which keeps the value of
the save (docs/mlflow.md, "Queries and their speed").
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from tracker_saver.core.query import RECORD_FIELDS, TEXT_FIELDS, Condition, is_number
from tracker_saver.core.records import LOADABLE_OR_PINNED, RecordState
from tracker_saver.integrations.mlflow.codec import LEGAL_KEY, PREFIX, UNLOGGED, quoted, spellings
from tracker_saver.registry.base import Query

__all__ = ["WITH_METRICS", "record_filters", "stream_filter"]

#: The states whose records carry their metadata's numbers as metrics (logged at make_live or at the pin).
WITH_METRICS = (RecordState.LIVE, RecordState.REVIVED, RecordState.EVICTED, RecordState.PINNED)
_STREAM_FIELDS = ("project", "run", "stream", "output_uri")
_OPS = {">": ">=", ">=": ">=", "<": "<=", "<=": "<=", "==": "="}


def _tag_in(field: str, values: Iterable[Any]) -> str:
    texts = dict.fromkeys(s for v in values for s in spellings(field, v))
    return f"tags.`{PREFIX}{field}` IN ({', '.join(quoted(s) for s in texts)})"


def _states(states: Iterable[RecordState]) -> str:
    return _tag_in("state", (s.value for s in states))


def stream_filter(query: Query, states: Iterable[RecordState] | None = None) -> str:
    """The filter on ``query``'s stream-level fields (and ``states``): a stream is found whole.

    Examples:
        >>> print(stream_filter(Query(project="p"), [RecordState.LIVE]))
        tags.`tracker_saver.project` IN ('p', '"p"') AND tags.`tracker_saver.state` IN ('live', '"live"')
    """
    clauses = [_tag_in(k, [getattr(query, k)]) for k in _STREAM_FIELDS if getattr(query, k) is not None]
    return " AND ".join([*clauses, _states(states)] if states is not None else clauses)


def _number(value: Any) -> str | None:
    """``value`` as a filter's number literal; ``None`` for one the grammar may not read (``1e-05``, inf, nan)."""
    text = repr(float(value)) if is_number(value) else ""
    return text if text and all(c in "0123456789.-" for c in text) else None


def _metric(c: Condition) -> list[str]:
    """The metric clauses for condition ``c`` (none when it cannot be one)."""
    # An UNLOGGED key has no metric to filter on: the whole query reads it from the metadata tag.
    if c.key in RECORD_FIELDS or c.key in UNLOGGED or not LEGAL_KEY.match(c.key) or "`" in c.key:
        return []
    name = f"metrics.`{c.key}`"
    if c.op in _OPS:
        text = _number(c.value)
        return [] if text is None else [f"{name} {_OPS[c.op]} {text}"]
    if c.op == "in" and c.value and all(is_number(v) for v in c.value):
        low, high = _number(min(c.value)), _number(max(c.value))
        return [] if low is None or high is None else [f"{name} >= {low}", f"{name} <= {high}"]
    return []


def _tag_like(tag: str) -> str | None:
    """A ``LIKE`` on the record tags' JSON list for ``tag`` (``None`` when its JSON has escapes).

    A ``'`` in the tag is the wildcard ``_`` in the pattern: an escaped quote (``\\'``) in a
    ``LIKE`` pattern matched nothing on MLflow 3's server, though it does in ``IN``.

    Examples:
        >>> print(_tag_like("it's"))
        tags.`tracker_saver.tags` LIKE '%"it_s"%'
    """
    text = json.dumps(tag)
    return None if "\\" in text else f"tags.`{PREFIX}tags` LIKE '%{text.replace(chr(39), '_')}%'"


def record_filters(query: Query) -> list[str]:
    """The searches whose results together hold every record ``query`` matches (more only where noted above).

    No search at all when no state can match; one otherwise, or two when a number is pushed
    down to its metric (the states that have metrics, then the others).

    Examples:
        >>> from tracker_saver.core.query import parse_where
        >>> for f in record_filters(Query(project="p", where=parse_where("score>0.5"))):
        ...     print(f)  # doctest: +NORMALIZE_WHITESPACE
        tags.`tracker_saver.project` IN ('p', '"p"') AND metrics.`score` >= 0.5 AND tags.`tracker_saver.state` IN
            ('live', '"live"', 'evicted', '"evicted"', 'revived', '"revived"', 'pinned', '"pinned"')
        tags.`tracker_saver.project` IN ('p', '"p"') AND tags.`tracker_saver.state` IN
            ('pending', '"pending"', 'failed', '"failed"')
    """
    states = list(query.states) if query.states is not None else list(RecordState)
    if query.alias is not None:  # an alias names a loadable or pinned record only
        states = [s for s in states if s in LOADABLE_OR_PINNED]
    streams = stream_filter(query)
    clauses = [streams] if streams else []
    clauses += [_tag_in(k, [getattr(query, k)]) for k in ("filename", "name", "slot") if getattr(query, k) is not None]
    if query.tag is not None and (like := _tag_like(query.tag)) is not None:
        clauses.append(like)
    metrics: list[str] = []
    for c in query.where:
        values = c.value if c.op == "in" else [c.value] if c.op == "==" else None
        if c.key == "state" and values is not None:
            states = [s for s in states if s.value in values]
        elif c.key in TEXT_FIELDS and values is not None:
            clauses.append(_tag_in(c.key, values))
        elif c.key == "id" and values is not None and all(isinstance(v, str) for v in values):
            clauses.append(f"model_id IN ({', '.join(quoted(v) for v in values)})")
        else:
            metrics += _metric(c)
    if not metrics:
        groups = [states]
    else:
        groups = [[s for s in states if s in WITH_METRICS], [s for s in states if s not in WITH_METRICS]]
    out = []
    for i, group in enumerate(groups):
        if group:
            narrowed = [*clauses, *(metrics if i == 0 else [])]
            out.append(" AND ".join([*narrowed, _states(group)] if len(group) < len(RecordState) else narrowed))
    return out
