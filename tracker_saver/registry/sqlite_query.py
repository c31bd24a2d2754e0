"""A ``Query`` as SQLite text and parameters: where-terms, sort terms, derived aliases; every value bound.

Keys and values are always parameters (``m.key = ?``); what goes into the SQL text comes from the
fixed tables below (the record columns, the metadata kept as columns, the derived-alias rules).
"""

from __future__ import annotations

from typing import Any

from tracker_saver.core.query import RECORD_FIELDS, Condition, is_number
from tracker_saver.core.records import DERIVED_ALIASES, MetaValue, encode_value
from tracker_saver.registry.base import Query

__all__ = ["COLUMNS", "LOADABLE_SQL", "count_sql", "encode_row", "select_sql"]

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


def _condition_sql(cond: Condition) -> tuple[str, list[Any]]:
    value_of = _FIELDS.get(cond.key) or COLUMNS.get(cond.key, _ROW)
    if cond.op == "in":
        parts = [_value_sql(value_of, "==", v) for v in cond.value] or [("0", [])]
        test = "(" + " OR ".join(p for p, _ in parts) + ")"
        args = [a for _, arg in parts for a in arg]
    elif cond.op == "!=":
        eq, args = _value_sql(value_of, "==", cond.value)
        test = f"({value_of[0]} != 'none' AND NOT {eq})"
    else:
        test, args = _value_sql(value_of, cond.op, cond.value)
    if cond.key in COLUMNS or cond.key in _FIELDS:
        return test, args
    sql = f"EXISTS (SELECT 1 FROM metadata m WHERE m.record_id = r.id AND m.key = ? AND {test})"
    return sql, [cond.key, *args]


def _where_sql(query: Query) -> tuple[list[str], list[Any]]:
    """The WHERE terms of ``query`` and their arguments."""
    where: list[str] = []
    args: list[Any] = []
    for column in ("project", "run", "stream", "filename", "output_uri", "slot", "name"):
        value = getattr(query, column)
        if value is not None:
            where.append(f"r.{column} = ?")
            args.append(value)
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


def select_sql(query: Query) -> tuple[str, list[Any]]:
    """``SELECT r.* FROM records r …``: the rows of ``query``, sorted and paged as ``base.select`` does.

    Examples:
        >>> select_sql(Query(project="p", limit=5))
        ('SELECT r.* FROM records r WHERE r.project = ? ORDER BY r.created_at, r.id LIMIT ? OFFSET ?', ['p', 5, 0])
    """
    sql = ["SELECT r.* FROM records r"]
    where, args = _where_sql(query)
    order_sql: list[str] = []
    join_args: list[Any] = []
    for i, order in enumerate(query.order_by):
        direction = "DESC" if order.desc else "ASC"
        if order.key in RECORD_FIELDS:
            column = "CAST(r.id AS INTEGER)" if order.key == "id" else f"r.{order.key}"
            order_sql += [f"({column} IS NULL)", f"{column} {direction}"]
            continue
        kind, num, text = COLUMNS.get(order.key, (f"o{i}.type", f"o{i}.num", f"o{i}.text"))
        if order.key not in COLUMNS:
            sql.append(f"LEFT JOIN metadata o{i} ON o{i}.record_id = r.id AND o{i}.key = ?")
            join_args.append(order.key)
        order_sql += [
            f"({kind} IS NULL OR {kind} = 'none')",
            f"(CASE WHEN {kind} IN ('int', 'float') THEN 0 ELSE 1 END) {direction}",
            f"{num} {direction}",
            f"{text} {direction}",
        ]
    if where:
        sql.append("WHERE " + " AND ".join(where))
    sql.append("ORDER BY " + ", ".join([*order_sql, "r.created_at", "r.id"]))
    if query.limit is not None or query.offset:
        sql.append("LIMIT ? OFFSET ?")
        args += [-1 if query.limit is None else int(query.limit), int(query.offset)]
    return " ".join(sql), join_args + args


def count_sql(query: Query) -> tuple[str, list[Any]]:
    """``SELECT count(*) …`` of ``query``'s rows, without its sort, limit and offset."""
    where, args = _where_sql(query)
    return "SELECT count(*) FROM records r" + (" WHERE " + " AND ".join(where) if where else ""), args
