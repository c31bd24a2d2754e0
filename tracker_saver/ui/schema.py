"""The shapes of the UI's JSON API: what each endpoint takes and answers, and a record's public view."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from tracker_saver.core.jsonout import float_out
from tracker_saver.core.masking import strip_userinfo
from tracker_saver.core.records import MAX_NAME_LENGTH, TIMING_KEYS, MetaValue, Record, encode_value
from tracker_saver.core.text import METADATA_VALUE_ALLOWS, escape

__all__ = [
    "ALIAS_PATTERN",
    "AliasIn",
    "ChartOut",
    "DetailOut",
    "ErrorOut",
    "PageOut",
    "PointOut",
    "RecordOut",
    "RenameIn",
    "ScoreOut",
    "SeriesOut",
    "TagsIn",
    "TimingsOut",
    "public_message",
    "record_out",
    "timings_out",
]

#: A quoted absolute path (it may hold spaces), a URI (``file:///…``, ``sqlite:///…``, ``s3://…``),
#: or a bare absolute path of two or more parts.
_LOCATION = re.compile(
    r"(?<=')/[^']*(?=')|(?<=\")/[^\"]*(?=\")"
    r"|\b[a-z][a-z0-9+.-]*://[^\s'\"]*[^\s'\",.;:)]"
    r"|(?<![\w.~])/(?:[^\s'\"/]+/)+[^\s'\",;)]*",
    re.IGNORECASE,
)
#: A user alias, as the API accepts it in a body or a path.
ALIAS_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class ErrorOut(BaseModel):
    """Every error: one line that says what went wrong and the fix."""

    detail: str


class TimingsOut(BaseModel):
    """What the record's save cost (:mod:`tracker_saver.core.timings`); ``None`` on a record saved before they were kept."""

    blocked_s: float = Field(description="seconds the training thread spent in the saver for this save")
    durable_s: float = Field(description="seconds from the saver's call until the record was live")
    bytes: int
    mb_s: float = Field(description="MB (10**6 bytes) per second written")
    background: bool = Field(description="whether the save ran in the background (async_upload)")


#: A score as the API writes it: standard JSON has no infinity, so ``±inf`` is a string (core.jsonout).
ScoreOut = Annotated[
    float | None,
    WithJsonSchema({"anyOf": [{"type": "number"}, {"enum": ["Infinity", "-Infinity"]}, {"type": "null"}]}),
    Field(description='the score; "Infinity" or "-Infinity" when infinite (Number() reads it back), null when absent'),
]


class RecordOut(BaseModel):
    """A record as the UI shows it; ``metadata`` holds every typed value (±inf as ``"Infinity"``/``"-Infinity"``,
    with ``metadata_types`` saying ``float``), and ``score`` is ``"Infinity"``/``"-Infinity"`` when infinite."""

    # Standard JSON has no infinity: pydantic writes it as null unless told, and a priority of ±inf is real.
    model_config = ConfigDict(ser_json_inf_nan="strings")

    id: str
    name: str
    filename: str
    project: str
    run: str
    stream: str
    state: str
    slot: int | None
    key: str | None
    uri: str | None
    output_uri: str | None
    sha256: str | None
    size: int | None
    step: int | None
    score: ScoreOut
    score_name: str | None
    metadata: dict[str, int | float | str | bool | None]
    metadata_types: dict[str, str] = Field(description="each metadata value's stored type: int, float, str, bool, none")
    tags: list[str]
    aliases: list[str]
    created_at: float
    error: str | None
    timings: TimingsOut | None


class PageOut(BaseModel):
    """One page of records and how many match in all."""

    items: list[RecordOut]
    total: int
    offset: int
    limit: int


class DetailOut(BaseModel):
    """A record and every record that used its slot, oldest first."""

    record: RecordOut
    history: list[RecordOut]


class PointOut(BaseModel):
    """One saved checkpoint on the chart."""

    id: str
    name: str
    step: int
    score: float
    state: str
    blocked_s: float | None = Field(description="seconds the save blocked the training thread, if known")
    durable_s: float | None = Field(description="seconds until the save was durable, if known")


class SeriesOut(BaseModel):
    """One stream's checkpoints with a score, by step."""

    project: str
    run: str
    stream: str
    score_name: str | None
    points: list[PointOut]


class ChartOut(BaseModel):
    """Score against step, one series per stream."""

    series: list[SeriesOut]


class RenameIn(BaseModel):
    """A new display name; :func:`tracker_saver.models.rename_model` checks it and says what is wrong."""

    name: str = Field(
        description=f"1 to {MAX_NAME_LENGTH} characters, not blank, the text rule's (no control characters, "
        "no bidirectional controls, valid UTF-8)"
    )


class TagsIn(BaseModel):
    """Tags to add."""

    tags: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(min_length=1, max_length=100)


class AliasIn(BaseModel):
    """A user alias, unique in the record's project (``latest`` and ``best`` are derived)."""

    alias: str = Field(pattern=ALIAS_PATTERN)


def public_message(text: str) -> str:
    """``text`` with every location (path, URI) and credential replaced: what an error page may show.

    Examples:
        >>> public_message("record 3 does not exist in sqlite:////home/me/reg.db: see ids")
        'record 3 does not exist in <location>: see ids'
    """
    return _LOCATION.sub("<location>", strip_userinfo(text))


def _finite(value: MetaValue) -> MetaValue:
    # JSON has no infinity; a priority of ±inf is real (Ignite compares it): the project's one
    # spelling of it (core.jsonout), typed float in metadata_types.
    if isinstance(value, float):
        return float_out(value)
    return escape(value, allow=METADATA_VALUE_ALLOWS) if isinstance(value, str) else value


def _text(value: str | None) -> str | None:
    return None if value is None else escape(value)


def timings_out(record: Record) -> TimingsOut | None:
    """The record's :data:`~tracker_saver.core.records.TIMING_KEYS` as one value, if it has every one, well typed."""
    values = dict(zip(TimingsOut.model_fields, (record.metadata.get(k) for k in TIMING_KEYS), strict=True))
    try:
        return TimingsOut.model_validate(values, strict=True)
    except ValueError:  # saved before timings were kept, or edited by hand
        return None


def record_out(record: Record) -> RecordOut:
    """The API's view of a record: every text as the CLI shows it (:func:`tracker_saver.core.text.escape`).

    Text the rule allows is shown as it is; a character it refuses, which only another writer
    can have stored (a tracker's UI, a script on the SQLite file), comes escaped: ``\\x1b``.
    """
    name = record.metadata.get("score_name")
    return RecordOut(
        id=escape(record.id),
        name=escape(record.name),
        filename=escape(record.filename),
        project=escape(record.project),
        run=escape(record.run),
        stream=escape(record.stream),
        state=record.state.value,
        slot=record.slot,
        key=_text(record.key),
        uri=_text(record.uri),
        output_uri=_text(record.output_uri),
        sha256=_text(record.sha256),
        size=record.size,
        step=record.global_step,
        score=record.score,
        score_name=escape(name) if isinstance(name, str) else None,
        metadata={escape(k): _finite(v) for k, v in record.metadata.items()},
        metadata_types={escape(k): encode_value(v)[0] for k, v in record.metadata.items()},
        tags=[escape(t) for t in record.tags],
        aliases=[escape(a) for a in record.aliases],
        created_at=record.created_at,
        error=escape(public_message(record.error)) if record.error else None,
        timings=timings_out(record),
    )
