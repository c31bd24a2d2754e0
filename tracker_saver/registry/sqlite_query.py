"""A ``Query`` as SQLite text and parameters: where-terms, sort terms, derived aliases; every value bound.

Keys and values are always parameters (``m.key = ?``); what goes into the SQL text comes from the
fixed tables below (the record columns, the metadata kept as columns, the derived-alias rules).
"""

from __future__ import annotations

from typing import Any

from tracker_saver.core.query import RECORD_FIELDS, Condition, is_number
from tracker_saver.core.records import DERIVED_ALIASES, MetaValue, encode_value
from tracker_saver.registry.base import Query

__all__ = [
    "COLUMNS",
    "FEW",
    "LOADABLE_SQL",
    "count_sql",
    "encode_row",
    "few_records_sql",
    "few_sql",
    "metadata_conditions",
    "page_sql",
    "select_sql",
]

_OPS_SQL = {">": ">", ">=": ">=", "<": "<", "<=": "<="}


def encode_row(value: MetaValue) -> tuple[str, float | None, str | None]:
    """A metadata row's (type, num, text): the shared encoding plus a number column for ranges."""
    kind, text = encode_value(value)
    return kind, float(value) if kind in ("int", "float", "bool") else None, text  # type: ignore[arg-type]


#: Where a metadata value lives: (type, num, text) SQL expressions.
_Value = tuple[str, str, str]
_ROW: _Value = ("m.type", "m.num", "m.text")
_COMMITTED = "r.state IN ('live', 'revived', 'evicted')"
#: Metadata keys whose value is a column of ``records``: stored once, shown in
#: ``Record.metadata`` (sha256, size and uri once the record was committed), queried alike.
COLUMNS: dict[str, _Value] = {
    "slot": ("CASE WHEN r.slot IS NULL THEN 'none' ELSE 'int' END", "r.slot", "CAST(r.slot AS TEXT)"),
    "created_at": ("'float'", "r.created_at", "CAST(r.created_at AS TEXT)"),
    "size": (f"CASE WHEN r.size IS NULL OR NOT {_COMMITTED} THEN 'none' ELSE 'int' END", "r.size", "NULL"),
    "sha256": (f"CASE WHEN r.sha256 IS NULL OR NOT {_COMMITTED} THEN 'none' ELSE 'str' END", "NULL", "r.sha256"),
    "uri": (f"CASE WHEN r.uri IS NULL OR NOT {_COMMITTED} THEN 'none' ELSE 'str' END", "NULL", "r.uri"),
}


def _value_sql(value_of: _Value, op: str, value: Any) -> tuple[str, list[Any]]:
    """SQL that is true when the metadata value ``value_of`` compares to ``value`` as ``Condition.test`` does."""
    kind_sql, num_sql, text_sql = value_of
    arg: float | str
    if isinstance(value, bool):
        kind, col, arg = f"{kind_sql} = 'bool'", num_sql, float(value)
    elif is_number(value):
        kind, col, arg = f"{kind_sql} IN ('int', 'float')", num_sql, float(value)
    else:
        kind, col, arg = f"{kind_sql} = 'str'", text_sql, str(value)
    sql_op = "=" if op == "==" else _OPS_SQL[op]
    return f"({kind} AND {col} {sql_op} ?)", [arg]


#: Record fields as (type, num, text) SQL expressions, for where-conditions on them.
_FIELDS: dict[str, _Value] = {
    "id": ("'int'", "r.id", "CAST(r.id AS TEXT)"),
    "output_uri": ("CASE WHEN r.output_uri IS NULL THEN 'none' ELSE 'str' END", "NULL", "r.output_uri"),
    **{key: ("'str'", "NULL", f"r.{key}") for key in ("name", "filename", "state", "stream", "run", "project")},
}
#: The states whose records are loadable slot records, as an SQL list.
LOADABLE_SQL = "('live', 'revived')"
#: Another loadable record ``o`` of ``r``'s stream.
_SAME_STREAM = (
    "o.output_uri IS r.output_uri AND o.project = r.project AND o.run = r.run AND o.stream = r.stream"
    f" AND o.state IN {LOADABLE_SQL}"
)
_LATER = "(o.created_at > r.created_at OR (o.created_at = r.created_at AND o.id > r.id))"
_SCORE = "SELECT num FROM metadata WHERE record_id = {0}.id AND key = 'score' AND type IN ('int', 'float')"
#: SQL that is true when ``r`` holds a derived alias: the same rule as ``base.derived_aliases``.
_DERIVED_SQL = {
    "latest": f"(r.state IN {LOADABLE_SQL} AND NOT EXISTS (SELECT 1 FROM records o WHERE {_SAME_STREAM} AND {_LATER}))",
    "best": (
        f"(r.state IN {LOADABLE_SQL} AND ({_SCORE.format('r')}) IS NOT NULL AND NOT EXISTS ("
        f"SELECT 1 FROM records o WHERE {_SAME_STREAM} AND (({_SCORE.format('o')}) > ({_SCORE.format('r')})"
        f" OR (({_SCORE.format('o')}) = ({_SCORE.format('r')}) AND {_LATER}))))"
    ),
}


def _in_sql(value_of: _Value, values: list[Any]) -> tuple[str, list[Any]]:
    """SQL that is true when the value ``value_of`` equals one of ``values``, as ``Condition.test`` compares.

    One ``IN`` list per kind of value (bools, numbers, text), never one term per value: SQLite
    refuses an expression deeper than 1000 terms, and an ``in`` of 500 values was one.

    Examples:
        >>> _in_sql(("m.type", "m.num", "m.text"), [1, "a", 2.5])
        ("((m.type IN ('int', 'float') AND m.num IN (?,?)) OR (m.type = 'str' AND m.text IN (?)))", [1.0, 2.5, 'a'])
    """
    kind_sql, num_sql, text_sql = value_of
    groups: list[tuple[str, str, list[Any]]] = [
        (f"{kind_sql} = 'bool'", num_sql, [float(v) for v in values if isinstance(v, bool)]),
        (f"{kind_sql} IN ('int', 'float')", num_sql, [float(v) for v in values if is_number(v)]),
        (f"{kind_sql} = 'str'", text_sql, [str(v) for v in values if not isinstance(v, bool) and not is_number(v)]),
    ]
    parts = [f"({kind} AND {col} IN ({','.join('?' * len(args))}))" for kind, col, args in groups if args]
    return "(" + (" OR ".join(parts) or "0") + ")", [arg for _, _, args in groups for arg in args]


def _test_sql(cond: Condition, value_of: _Value) -> tuple[str, list[Any]]:
    """SQL that is true when the value ``value_of`` meets ``cond``."""
    if cond.op == "in":
        return _in_sql(value_of, list(cond.value))
    if cond.op == "!=":
        eq, args = _value_sql(value_of, "==", cond.value)
        return f"({value_of[0]} != 'none' AND NOT {eq})", args
    return _value_sql(value_of, cond.op, cond.value)


def _condition_sql(cond: Condition) -> tuple[str, list[Any]]:
    if cond.key in COLUMNS or cond.key in _FIELDS:
        return _test_sql(cond, _FIELDS.get(cond.key) or COLUMNS[cond.key])
    test, args = _test_sql(cond, _ROW)
    return f"EXISTS (SELECT 1 FROM metadata m WHERE m.record_id = r.id AND m.key = ? AND {test})", [cond.key, *args]


#: A metadata condition that at most this many rows meet drives a query (:func:`few_sql`).
FEW = 1000
#: Where a driving condition's metadata row ``d`` holds its value.
_DRIVER: _Value = ("d.type", "d.num", "d.text")


def metadata_conditions(query: Query) -> list[Condition]:
    """``query``'s conditions on metadata keys (not on record fields or the keys kept as columns)."""
    return [c for c in query.where if c.key not in COLUMNS and c.key not in _FIELDS]


def few_sql(cond: Condition) -> tuple[str, list[Any]]:
    """How many metadata rows meet ``cond``, counted up to :data:`FEW`, through its index.

    A condition that fewer rows meet is a query's ``driver``: its rows are read first and the
    page sorted from them, rather than walking every record in the sort's order to find them.
    """
    test, args = _test_sql(cond, _DRIVER)
    return f"SELECT count(*) FROM (SELECT 1 FROM metadata d WHERE d.key = ? AND {test} LIMIT {FEW})", [cond.key, *args]


def _from_sql(driver: Condition | None) -> tuple[str, list[str], list[Any]]:
    """The FROM of a query on ``records r`` (from ``driver``'s metadata rows, if any), and its WHERE terms."""
    if driver is None:
        return "records r", [], []
    test, args = _test_sql(driver, _DRIVER)
    return "metadata d CROSS JOIN records r ON r.id = d.record_id", [f"d.key = ? AND {test}"], [driver.key, *args]


def _field_terms(query: Query) -> tuple[list[str], list[Any]]:
    """``r.project = ?``…: the terms of ``query``'s record-field filters (project, run, stream…)."""
    columns = [
        c
        for c in ("project", "run", "stream", "filename", "output_uri", "slot", "name")
        if getattr(query, c) is not None
    ]
    return [f"r.{c} = ?" for c in columns], [getattr(query, c) for c in columns]


def few_records_sql(query: Query) -> tuple[str, list[Any]] | None:
    """How many records ``query``'s record-field filters match, counted up to :data:`FEW` (``None``: it has none).

    When fewer match, a sort reads them through the records' indexes and sorts them, rather
    than walking the sort key's index (see :func:`select_sql`'s ``walk``).
    """
    terms, args = _field_terms(query)
    if not terms:
        return None
    return f"SELECT count(*) FROM (SELECT 1 FROM records r WHERE {' AND '.join(terms)} LIMIT {FEW})", args


def _where_sql(query: Query, driver: Condition | None = None) -> tuple[list[str], list[Any]]:
    """The WHERE terms of ``query`` and their arguments (``driver``'s first)."""
    _, where, args = _from_sql(driver)
    fields, field_args = _field_terms(query)
    where += fields
    args += field_args
    if query.states is not None:
        where.append(f"r.state IN ({','.join('?' * len(query.states)) or 'NULL'})")
        args.extend(s.value for s in query.states)
    if query.tag is not None:
        where.append("EXISTS (SELECT 1 FROM tags t WHERE t.record_id = r.id AND t.tag = ?)")
        args.append(query.tag)
    if query.alias in DERIVED_ALIASES:
        where.append(_DERIVED_SQL[query.alias])
    elif query.alias is not None:
        where.append("EXISTS (SELECT 1 FROM aliases a WHERE a.record_id = r.id AND a.alias = ?)")
        args.append(query.alias)
    for cond in query.where:
        text, cond_args = _condition_sql(cond)
        where.append(text)
        args.extend(cond_args)
    return where, args


#: Record fields that are never NULL: no nulls-last term when sorting by them (the index then serves the sort).
_NOT_NULL = ("id", "name", "filename", "state", "stream", "run", "project", "created_at")


def select_sql(query: Query, driver: Condition | None = None, *, walk: bool = True) -> list[tuple[str, list[Any]]]:
    """``SELECT r.* FROM records r …`` statements whose rows, one after the other, are ``query``'s rows, sorted as ``base.select`` does.

    A sort on a metadata key comes as two statements: the records holding a value for it
    (walked in the order of the index ``metadata_order``, so a page stops early), then those
    without (nulls last); ``walk=False`` makes it one statement that sorts every match (see
    :func:`few_records_sql`). None has a LIMIT: :func:`page_sql` adds it. A ``driver`` (see
    :func:`few_sql`) starts them from its metadata rows instead.

    Examples:
        >>> select_sql(Query(project="p"))
        [('SELECT r.* FROM records r WHERE r.project = ? ORDER BY r.created_at, r.id', ['p'])]
        >>> from tracker_saver.core.query import parse_order
        >>> [sql.split(" WHERE ")[0] for sql, _ in select_sql(Query(order_by=parse_order("-score")))]
        ['SELECT r.* FROM records r JOIN metadata o0 ON o0.record_id = r.id AND o0.key = ?', \
'SELECT r.* FROM records r LEFT JOIN metadata o0 ON o0.record_id = r.id AND o0.key = ?']
    """
    first = query.order_by[0].key if query.order_by else None
    if first is None or first in RECORD_FIELDS or first in COLUMNS or not walk:
        return [_select(query, driver, None)]
    return [_select(query, driver, True), _select(query, driver, False)]


def _select(query: Query, driver: Condition | None, has_first: bool | None) -> tuple[str, list[Any]]:
    """One statement of :func:`select_sql`: only the records that hold the first sort key (or lack it), or all."""
    sql = [f"SELECT r.* FROM {_from_sql(driver)[0]}"]
    where, args = _where_sql(query, driver)
    order_sql: list[str] = []
    join_args: list[Any] = []
    for i, order in enumerate(query.order_by):
        direction = "DESC" if order.desc else "ASC"
        if order.key in RECORD_FIELDS:
            column = "CAST(r.id AS INTEGER)" if order.key == "id" else f"r.{order.key}"
            order_sql += [] if order.key in _NOT_NULL else [f"({column} IS NULL)"]
            order_sql.append(f"{column} {direction}")
            continue
        kind, num, text = COLUMNS.get(order.key, (f"o{i}.type", f"o{i}.num", f"o{i}.text"))
        if order.key not in COLUMNS:
            join = "JOIN" if i == 0 and has_first else "LEFT JOIN"
            sql.append(f"{join} metadata o{i} ON o{i}.record_id = r.id AND o{i}.key = ?")
            join_args.append(order.key)
        if i == 0 and has_first is not None:  # every row holds a value, or none does: the nulls-last term is constant
            where.insert(0, "o0.type != 'none'" if has_first else "(o0.type IS NULL OR o0.type = 'none')")
        else:
            order_sql.append(f"({kind} IS NULL OR {kind} = 'none')")
        order_sql += [  # numbers first, then the rest: migration 7's index metadata_order has these terms
            f"(CASE WHEN {kind} IN ('int', 'float') THEN 0 ELSE 1 END) {direction}",
            f"{num} {direction}",
            f"{text} {direction}",
        ]
    if where:
        sql.append("WHERE " + " AND ".join(where))
    sql.append("ORDER BY " + ", ".join([*order_sql, "r.created_at", "r.id"]))
    return " ".join(sql), join_args + args


def page_sql(sql: str, args: list[Any], limit: int | None, offset: int) -> tuple[str, list[Any]]:
    """``sql`` with ``LIMIT ? OFFSET ?`` (``None``: no limit)."""
    return f"{sql} LIMIT ? OFFSET ?", [*args, -1 if limit is None else limit, offset]


def count_sql(query: Query, driver: Condition | None = None) -> tuple[str, list[Any]]:
    """``SELECT count(*) …`` of ``query``'s rows, without its sort, limit and offset."""
    where, args = _where_sql(query, driver)
    return f"SELECT count(*) FROM {_from_sql(driver)[0]}" + (" WHERE " + " AND ".join(where) if where else ""), args
