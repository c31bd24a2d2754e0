"""How a record is written onto an MLflow LoggedModel: its name, tags, status and metrics.

One LoggedModel per record. Its MLflow ``name`` is fixed at creation: Ignite's filename made
legal for MLflow (:func:`model_name`). Every record field lives in a ``tracker_saver.*`` tag
(the source of truth, read back by :func:`read_record`). People read and edit these tags in
MLflow's UI, so since schema 2 (the tag ``tracker_saver.schema``) each field is plain text:
``tracker_saver.name`` is ``best_model_3_acc=0.91.pt``, not ``"best_model_3_acc=0.91.pt"``,
and a name typed into MLflow's UI is the record's new name. Only the typed metadata and the
tags are JSON. A record of schema 1 (every tag JSON) is still read, its name also as typed
text. The metadata's numbers are also logged as the model's metrics (so ``metrics.score >
0.5`` filters in MLflow's UI) and its values as params at creation; the save's timings and the
priority stay in the metadata tag, out of MLflow's columns (:data:`UNLOGGED`). The state is a
tag plus MLflow's status: live, revived and pinned are ``READY``; pending is ``PENDING``; failed
is ``FAILED``; evicted is ``UNSPECIFIED`` (MLflow's UI shows no status: an evicted checkpoint is
neither loadable nor a failure).

MLflow's model page shows no tags and a title fixed at creation, so the description
(``mlflow.note.content``) says what a person needs there (:func:`note`): the current name, the
state, the aliases and where the bytes are. That part is rewritten at every change; what a person
types below its closing line is theirs and kept (:func:`person_text`).

A tag of ours that someone edited into something we cannot read makes the record unreadable
(``UnreadableRecordError``): the registry skips it with a warning and ``fsck`` names it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import replace
from typing import Any

from tracker_saver.core.errors import UnreadableRecordError
from tracker_saver.core.records import TIMING_KEYS, MetaValue, Record, RecordState, UploadInfo

__all__ = [
    "LEGAL_KEY",
    "NOTE",
    "OWN_KEYS",
    "PREFIX",
    "SCHEMA",
    "UNLOGGED",
    "STATUS",
    "as_committed",
    "encode",
    "model_name",
    "note",
    "person_text",
    "quoted",
    "read_filename",
    "read_record",
    "record_tags",
    "schema_of",
    "spellings",
    "status_of",
]

#: Prefix of every tag tracker_saver writes on a LoggedModel, a run or an experiment.
PREFIX = "tracker_saver."

#: The tag layout this version writes: 2 is plain text (1 was every tag JSON).
SCHEMA = 2

#: The metric and param names MLflow takes; other metadata keys live in the metadata tag only.
LEGAL_KEY = re.compile(r"^[\w\-. :/]{1,250}$")
#: Keys a read adds to a record's metadata from its own fields; never written into the metadata tag or as metrics.
OWN_KEYS = ("slot", "created_at", "sha256", "size", "uri")
#: Numbers of the metadata that are no metrics of the model (MLflow's UI makes every metric a column, ahead
#: of the params): the record's own fields, the save's timings, and ``priority`` (the score, or the step).
UNLOGGED = frozenset((*OWN_KEYS, *TIMING_KEYS, "priority"))

#: Fields kept as JSON (structured); every other field is plain text, typed by :data:`_TYPES`.
_JSON_FIELDS = ("metadata", "tags")
_TYPES: dict[str, type] = {"slot": int, "size": int, "created_at": float}


def unreadable(model_id: str, why: str) -> UnreadableRecordError:
    """The error for a LoggedModel of ours whose tags someone edited into something we cannot read."""
    return UnreadableRecordError(
        f"record {model_id} cannot be read: {why}; put the tag back as tracker_saver wrote it (MLflow's UI: the "
        "model's tags), or delete the model",
        record_id=model_id,
        why=why,
    )


#: MLflow's status for each record state.
STATUS = {
    RecordState.PENDING: "PENDING",
    RecordState.LIVE: "READY",
    RecordState.REVIVED: "READY",
    RecordState.PINNED: "READY",
    RecordState.FAILED: "FAILED",
    RecordState.EVICTED: "UNSPECIFIED",
}

#: MLflow's tag for a model's description, which its UI shows and edits on the model's page.
NOTE = "mlflow.note.content"
#: The line that closes tracker_saver's part of a description: a Markdown rule, after a blank line.
_RULE = "\n\n---\n"
#: What the description says of each state, after the name.
_SAID = {
    RecordState.PENDING: "pending: being written",
    RecordState.LIVE: "live",
    RecordState.REVIVED: "live (revived after a crash)",
    RecordState.PINNED: "pinned: a kept copy",
    RecordState.FAILED: "failed: its write never completed",
    RecordState.EVICTED: "evicted: not loadable, its slot holds a later checkpoint",
}


def note(record: Record, aliases: tuple[str, ...] = (), person: str = "") -> str:
    """The description of ``record``'s model: its name, state, aliases and bytes, then ``person``'s text.

    Examples:
        >>> r = Record("m-1", "p", "r", "best_model", "best_model_3.pt", "the one we ship", RecordState.EVICTED,
        ...            0, "p/r/best_model.slot0.pt", "file:///o/p/r/best_model.slot0.pt")
        >>> print(note(r, ("production",), "mine"))
        **the one we ship** · evicted: not loadable, its slot holds a later checkpoint
        <BLANKLINE>
        aliases: `production` · file `best_model_3.pt` · bytes were at `file:///o/p/r/best_model.slot0.pt`
        <BLANKLINE>
        _Written by tracker_saver at each change; your notes go below the line._
        <BLANKLINE>
        ---
        mine
    """
    where = "bytes were at" if record.state in (RecordState.EVICTED, RecordState.FAILED) else "bytes at"
    facts = [f"aliases: {', '.join(f'`{a}`' for a in aliases)}"] if aliases else []
    facts += [f"file `{record.filename}`"] + ([f"{where} `{record.uri}`"] if record.uri else [])
    head = f"**{record.name}** · {_SAID[record.state]}\n\n{' · '.join(facts)}\n\n"
    return head + "_Written by tracker_saver at each change; your notes go below the line._" + _RULE + person


def person_text(model: Any) -> str:
    """What a person typed into the description of ``model``: below tracker_saver's closing line, or
    all of it when that line is gone (an edit in MLflow's UI that replaced the whole text).

    Examples:
        >>> class M: tags = {NOTE: "**a** · live" + _RULE + "keep me"}
        >>> person_text(M())
        'keep me'
    """
    text = str((model.tags or {}).get(NOTE) or "")
    return text.split(_RULE, 1)[1] if _RULE in text else text


_ILLEGAL = re.compile(r"[/:.%\"']")


def model_name(filename: str, *, taken: bool = False) -> str:
    """The LoggedModel name of Ignite's ``filename``: ``.pt`` dropped, ``/ : . % " '`` → ``_``.

    MLflow refuses those characters in a name. Two filenames could then meet in one name
    (``acc=0.91.pt`` and ``acc=0_91.pt``): the registry passes ``taken=True`` when the plain
    name already belongs to another filename of the experiment, and the name gets ``-`` and 8
    hex digits of the filename's sha1, so two filenames never share one name.

    Examples:
        >>> model_name("best_model_3_acc=0.91.pt")
        'best_model_3_acc=0_91'
        >>> model_name("best_model_3_acc=0_91.pt", taken=True)
        'best_model_3_acc=0_91-hff37b2de'
    """
    stem = filename[: -len(".pt")] if filename.endswith(".pt") and len(filename) > 3 else filename
    name = _ILLEGAL.sub("_", stem)
    return f"{name}-h{digest(filename)}" if taken else name


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def encode(field: str, value: Any, schema: int = SCHEMA) -> str:
    """A field's tag value as ``schema`` writes it: schema 2 JSON for metadata and tags, else plain text.

    A record keeps the schema it was created with: a field changed later is written its way.

    Examples:
        >>> encode("name", "best_model_3_acc=0.91.pt"), encode("slot", 1), encode("tags", ["b", "a"])
        ('best_model_3_acc=0.91.pt', '1', '["b","a"]')
        >>> encode("name", "old", schema=1)
        '"old"'
    """
    if schema == 1 or field in _JSON_FIELDS:
        return _json(value)
    return repr(value) if isinstance(value, float) else str(value)


def schema_of(model: Any) -> int:
    """The schema a LoggedModel's tags were written in (1 when it has no ``tracker_saver.schema`` tag)."""
    text = (model.tags or {}).get(PREFIX + "schema", "1")
    return int(text) if text in ("1", str(SCHEMA)) else SCHEMA


def spellings(field: str, value: Any) -> list[str]:
    """Every way ``value`` may be stored in ``field``'s tag: schema 2's, then schema 1's JSON.

    A search matches either, so records written before schema 2 are still found.

    Examples:
        >>> spellings("project", "mnist")
        ['mnist', '"mnist"']
    """
    return list(dict.fromkeys([encode(field, value), _json(value)]))


def record_tags(info: UploadInfo, *, uri: str, created_at: float) -> dict[str, str]:
    """The ``tracker_saver.*`` tags of a new pending record (fields that are ``None`` get no tag)."""
    fields: dict[str, Any] = {
        "project": info.project,
        "run": info.run,
        "stream": info.stream,
        "filename": info.filename,
        "name": info.name,
        "state": RecordState.PENDING.value,
        "slot": info.slot,
        "key": info.key,
        "uri": uri,
        "output_uri": info.output_uri,
        "created_at": created_at,
        "metadata": dict(info.metadata),
        "tags": sorted(set(info.tags)),
    }
    tags = {PREFIX + k: encode(k, v) for k, v in fields.items() if v is not None}
    return {**tags, PREFIX + "schema": str(SCHEMA)}


def status_of(state: RecordState) -> str:
    """MLflow's status for ``state``."""
    return STATUS[state]


def quoted(text: str) -> str:
    """``text`` as a single-quoted string of an MLflow filter.

    Examples:
        >>> print(quoted("it's"))
        'it\\'s'
    """
    escaped = text.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def _decode(schema: int, field: str, text: str, model_id: str) -> Any:
    """One field's value from its tag text; ``UnreadableRecordError`` when the text is not what we write."""
    try:
        if schema == 1 or field in _JSON_FIELDS:
            try:
                return json.loads(text)
            except ValueError:
                if field == "name":  # renamed by hand in MLflow's UI (schema 1 kept it as JSON)
                    return text
                raise
        kind = _TYPES.get(field)
        if kind is None:
            return text
        value = kind(text)
        if kind is not float or math.isfinite(value):
            return value
    except ValueError:
        pass
    raise unreadable(model_id, f"its tag {PREFIX}{field} is {text[:60]!r}, not what tracker_saver writes")


def read_filename(model: Any) -> str | None:
    """The Ignite filename a LoggedModel records, in either schema (``None``: not ours, or unreadable)."""
    text = (model.tags or {}).get(PREFIX + "filename")
    if text is None:
        return None
    try:
        value = _decode(schema_of(model), "filename", text, str(model.model_id))
    except UnreadableRecordError:
        return None
    return value if isinstance(value, str) else None


def read_record(model: Any) -> Record | None:
    """The record a LoggedModel holds, ``None`` when tracker_saver did not write it.

    Raises:
        UnreadableRecordError: a tag of ours was edited into something that cannot be read back.
    """
    model_id = str(model.model_id)
    tags: dict[str, str] = dict(model.tags or {})
    if PREFIX + "state" not in tags:
        return None
    schema_text = tags.pop(PREFIX + "schema", "1")
    if schema_text not in ("1", str(SCHEMA)):
        raise unreadable(model_id, f"its schema {schema_text!r} is newer than this tracker_saver reads")
    schema = int(schema_text)
    f = {
        k[len(PREFIX) :]: _decode(schema, k[len(PREFIX) :], v, model_id)
        for k, v in tags.items()
        if k.startswith(PREFIX)
    }
    missing = [k for k in ("project", "run", "stream", "filename", "name") if not isinstance(f.get(k), str)]
    if missing:
        raise unreadable(model_id, f"its tags lack {', '.join(PREFIX + k for k in missing)}")
    try:
        state = RecordState(f["state"])
    except ValueError:
        raise unreadable(model_id, f"its state {f['state']!r} is none of tracker_saver's") from None
    metadata: dict[str, MetaValue] = dict(f.get("metadata") or {})
    extra = {"slot": f.get("slot"), "created_at": f.get("created_at")}
    if state is not RecordState.PENDING and state is not RecordState.FAILED:
        extra.update(sha256=f.get("sha256"), size=f.get("size"), uri=f.get("uri"))
    metadata.update({k: v for k, v in extra.items() if v is not None})
    return Record(
        id=model_id,
        project=f["project"],
        run=f["run"],
        stream=f["stream"],
        filename=f["filename"],
        name=f["name"],
        state=state,
        slot=f.get("slot"),
        key=f.get("key"),
        uri=f.get("uri"),
        sha256=f.get("sha256"),
        size=f.get("size"),
        metadata=metadata,
        tags=tuple(f.get("tags") or ()),
        created_at=float(f.get("created_at") or 0.0),
        error=f.get("error"),
        output_uri=f.get("output_uri"),
        fingerprint=f.get("fingerprint"),
    )


def as_committed(
    record: Record,
    state: RecordState,
    *,
    sha256: str,
    size: int,
    metadata: dict[str, MetaValue],
    fingerprint: str | None,
) -> Record:
    """``record`` as :func:`read_record` reads it back once its commit wrote these fields (no read needed).

    Examples:
        >>> pending = Record("m-1", "p", "r", "s", "s_1.pt", "s_1.pt", RecordState.PENDING, 0, "p/r/s.slot0.pt",
        ...                  "file:///o/p/r/s.slot0.pt", metadata={"slot": 0, "created_at": 1.0, "step": 1}, created_at=1.0)
        >>> as_committed(pending, RecordState.LIVE, sha256="ab", size=3, metadata={"step": 1}, fingerprint=None).metadata
        {'step': 1, 'slot': 0, 'created_at': 1.0, 'sha256': 'ab', 'size': 3, 'uri': 'file:///o/p/r/s.slot0.pt'}
    """
    extra = {"slot": record.slot, "created_at": record.created_at, "sha256": sha256, "size": size, "uri": record.uri}
    meta = {**metadata, **{k: v for k, v in extra.items() if v is not None}}
    return replace(record, state=state, sha256=sha256, size=size, metadata=meta, fingerprint=fingerprint)


def digest(text: str) -> str:
    """8 hex digits naming ``text`` (for names and claim tags)."""
    return hashlib.sha1(text.encode()).hexdigest()[:8]
