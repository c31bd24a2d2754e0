"""ClearML model dicts ↔ tracker_saver records and claims: the mapping rules, with no I/O.

How a record maps to a ClearML model (the dicts ``models.get_all`` returns):

============== ==================================================================================
record         ClearML model
============== ==================================================================================
id             the model id
project        the model's project (``project_root/`` stripped when one is given)
run            metadata ``run``; the model's ``task`` is the run's task when the registry's task
               (``task=`` or ``Task.current_task()``) is in that project and ``run`` is
               ``<task name>.<task id>`` (:func:`task_run`: a run is a task id)
output_uri     metadata ``output_uri``: records at another output_uri are another stream
name           the model name. Set once, at creation; a rename in the web UI (or any client) is
               what ``get`` returns and no later save overwrites it
filename       metadata ``filename`` (Ignite's name; never changes)
stream         metadata ``stream`` and the tag ``stream:<stream>``
state          metadata ``state`` (the truth), mirrored for people and ``Model.query_models``
               (:func:`mirror`): ``pending`` archived + tag ``pending`` + no uri; ``live`` not
               archived, uri set, listed in the task's output models; ``evicted`` archived + tag
               ``evicted``, no uri, taken off the task; ``failed`` archived + tag ``failed`` + no
               uri; ``revived`` like live + tag ``revived``; ``pinned`` not archived, uri set, tag
               ``pinned``, published (``ready``: the web app's Published), never listed on the task
               (its filename entry belongs to the slot record); pending, evicted and failed ones are
               drafts. So ``Model.query_models(project, tags=["-evicted"])`` (which leaves archived
               models out) lists exactly the loadable checkpoints, and ClearML's ``get_weights()``
               downloads nothing else
slot, key      metadata ``slot`` (int) and ``slot_key`` (records written before 2026-12 used ``key``,
               which clearml-server 2.0 refuses as a metadata key: both are read)
uri            metadata ``uri``, from creation, kept for history. The model's uri is set only
               while live or revived (registered, never uploaded: tracker_saver writes the
               bytes itself): the slot of an evicted model holds other bytes
sha256, size   metadata ``sha256`` (str) and ``size`` (int)
fingerprint    metadata ``fingerprint`` (str): what the store said identifies the committed object
metadata       typed metadata items: ``int``/``float``/``bool``/``str``, ``None`` as type ``None`` and
               an empty value (never an empty type: ClearML's web app cannot save metadata that has
               one; items written before issue 54 with an empty type still read as ``None``); a key the
               server refuses (``type``, ``value``...) is stored escaped (``~type``) and read back
               as the user wrote it (:mod:`~tracker_saver.integrations.clearml.keys`)
tags           the model's tags, less ``stream:*``, ``alias:*`` and the state tags (which users cannot add)
aliases        user aliases are tags ``alias:<name>`` (unique per project: ``set_alias`` moves
               them); ``latest``/``best`` are derived on read, never stored
created_at     metadata ``created_at`` (float seconds, the ClearML ``created`` is coarser)
error          metadata ``error``
============== ==================================================================================

Metadata keys ``stream``, ``filename``, ``run``, ``slot_key``, ``key``, ``state``, ``error`` and
``output_uri`` are the record's own fields: user metadata cannot use them (``ConfigError``).

A stream's claim is a hidden model: archived, no task, no metadata ``state`` (so never a
record), tag ``claim:<hash of the stream id>`` (:func:`claim_tag`) and the holder as JSON in
its comment (:func:`claim_comment`, read back by :func:`read_claim`).

Examples:
    >>> item = encode_value("score", 0.5)
    >>> item, decode_value(item)
    ({'key': 'score', 'type': 'float', 'value': '0.5'}, 0.5)
    >>> mirror({"tags": ["stream:best", "pending"], "system_tags": ["archived"],
    ...         "metadata": {"uri": encode_value("uri", "file:///c/best.slot0.pt")}}, RecordState.LIVE, "best")
    {'tags': ['stream:best'], 'system_tags': [], 'uri': 'file:///c/best.slot0.pt'}
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any, TypeGuard

from tracker_saver.core.claims import Holder
from tracker_saver.core.errors import ConfigError, RecordNotFoundError, UnreadableRecordError
from tracker_saver.core.query import RECORD_FIELDS
from tracker_saver.core.records import MetaValue, Record, RecordState, StreamId, UploadInfo, clean_metadata
from tracker_saver.core.records import decode_value as decode_typed
from tracker_saver.core.records import encode_value as encode_typed
from tracker_saver.integrations.clearml.keys import escape_key, unescape_key
from tracker_saver.registry.base import Query

__all__ = [
    "ALIAS_TAG_PREFIX",
    "ARCHIVED_TAG",
    "CLAIM_TAG_PREFIX",
    "MIN_NAME",
    "NONE_TYPE",
    "STATE_TAGS",
    "STREAM_TAG_PREFIX",
    "check_id",
    "check_metadata",
    "check_tags",
    "model_aliases",
    "claim_comment",
    "claim_tag",
    "decode_value",
    "encode_value",
    "is_record_model",
    "metadata_filters",
    "mirror",
    "model_record",
    "pending_fields",
    "pending_model",
    "read_claim",
    "task_run",
    "with_metadata",
]

#: Tag that shows a record's state in the ClearML UI (``live`` has none).
STATE_TAGS = {
    RecordState.PENDING: "pending",
    RecordState.EVICTED: "evicted",
    RecordState.FAILED: "failed",
    RecordState.REVIVED: "revived",
    RecordState.PINNED: "pinned",
}
#: States whose model is archived: not usable, hidden by ``Model.query_models`` and the UI.
_ARCHIVED = (RecordState.PENDING, RecordState.EVICTED, RecordState.FAILED)
#: A record's stream as a tag, e.g. ``stream:best_model``.
STREAM_TAG_PREFIX = "stream:"
#: A user alias as a tag, e.g. ``alias:production``.
ALIAS_TAG_PREFIX = "alias:"
#: The system tag that archives a model.
ARCHIVED_TAG = "archived"
#: Metadata keys that hold the record's own fields; they are not in ``Record.metadata``.
_FIELD_KEYS = ("stream", "filename", "run", "slot_key", "key", "state", "error", "output_uri", "fingerprint")
#: Before ``slot_key``, records kept the slot key under ``key``: their ``slot_key`` is the user's.
_OLD_FIELD_KEYS = tuple(k for k in _FIELD_KEYS if k != "slot_key")
#: Metadata keys ``Record.metadata`` shows only once the record was committed (as SQLite does).
_COMMIT_KEYS = ("sha256", "size", "uri")
#: A stream's claim model carries the tag ``claim:<hash of the stream id>``.
CLAIM_TAG_PREFIX = "claim:"
_CLAIM_KEYS = ("output_uri", "project", "run", "stream")
#: clearml-server refuses shorter model, task and project names.
MIN_NAME = 3


def task_run(task: Any) -> str:
    """The run of a ClearML task's checkpoints: ``<task name>.<task id>``, as ClearML names its folders.

    A new task with the same name is a new run; ``continue_last_task`` continues the same one.
    """
    return f"{task.name}.{task.id}"


# -- typed metadata values ---------------------------------------------------------------------
#: The type of an absent value (``None``): the word ClearML's own ``Model.set_metadata`` writes for a
#: value of no basic type. Never empty: the web app's metadata editor marks an empty type "Required"
#: and will not save the model's metadata until a person types one in (issue 54).
NONE_TYPE = "None"


def encode_value(key: str, value: MetaValue) -> dict[str, str]:
    """One typed metadata item as ClearML stores it: a type the web app's editor accepts, always.

    ``Model.get_metadata_casted`` casts ``int``/``float``/``bool``/``str`` back; an absent value
    (``None``) is type ``None`` with an empty value, which the SDK gives as ``""`` and
    tracker_saver reads as ``None``. Items written before issue 54 with an empty type read as ``None`` too.

    Examples:
        >>> encode_value("score", None)
        {'key': 'score', 'type': 'None', 'value': ''}
    """
    kind, text = encode_typed(value)
    return {"key": escape_key(key), "type": NONE_TYPE if kind == "none" else kind, "value": text or ""}


def decode_value(item: Any) -> MetaValue:
    """The value of a stored metadata item; an unreadable number stays a string, NaN is absent.

    A value a person typed into an item of type ``None`` in the web app is kept as text, as the SDK reads it.

    Examples:
        >>> decode_value({"type": "None", "value": ""}), decode_value({"type": "", "value": ""})
        (None, None)
        >>> decode_value({"type": "None", "value": "qa"})
        'qa'
    """
    if not isinstance(item, dict) or item.get("value") is None:
        return None
    kind, text = str(item.get("type") or ""), str(item["value"])
    if kind.lower() == NONE_TYPE.lower() and text:
        return text
    return decode_typed(kind, text)


def with_metadata(model: dict[str, Any], items: dict[str, MetaValue]) -> dict[str, Any]:
    """``model`` as it is once ``items`` are written to its metadata."""
    written = {escape_key(k): encode_value(k, v) for k, v in items.items()}
    return {**model, "metadata": {**(model.get("metadata") or {}), **written}}


# -- checks on what a record may hold ----------------------------------------------------------
def check_id(record_id: str) -> None:
    """Raise ``RecordNotFoundError`` unless ``record_id`` can be a ClearML model id."""
    if not isinstance(record_id, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,128}", record_id):
        raise RecordNotFoundError(
            f"record id {record_id!r} is not a ClearML model id: see `tracker-saver models list` for ids",
            record_id=str(record_id),
        )


def is_record_model(model: Any) -> TypeGuard[dict[str, Any]]:
    """Whether ``model`` is a tracker_saver record (claims and other clients' models are not)."""
    return isinstance(model, dict) and "state" in (model.get("metadata") or {})


def check_metadata(metadata: dict[str, MetaValue], what: str) -> dict[str, MetaValue]:
    """``metadata`` checked to be typed and to leave the record's own field keys alone."""
    clean = clean_metadata(metadata)  # a ConfigError naming the key and the fix
    taken = sorted(k for k in clean if k in _FIELD_KEYS)
    if taken:
        raise ConfigError(
            f"{what} metadata key(s) {', '.join(map(repr, taken))} are record fields in the ClearML "
            f"registry ({', '.join(_FIELD_KEYS)}): rename them in your callback"
        )
    return clean


def check_tags(tags: Iterable[str], what: str) -> list[str]:
    """``tags`` as strings, refusing the state and stream tags the registry manages."""
    out = []
    for tag in tags:
        tag = str(tag)
        if not tag or tag in STATE_TAGS.values() or tag.startswith((STREAM_TAG_PREFIX, ALIAS_TAG_PREFIX)):
            raise ConfigError(
                f"tag {tag!r} for {what} is reserved by the ClearML registry (state tags "
                f"{', '.join(STATE_TAGS.values())}, 'stream:*' and 'alias:*'): choose another tag "
                "(set an alias with set_alias)"
            )
        out.append(tag)
    return out


# -- records ↔ models ---------------------------------------------------------------------------
def pending_fields(
    info: UploadInfo, *, uri: str, metadata: dict[str, MetaValue], created_at: float
) -> dict[str, MetaValue]:
    """The metadata of a new ``pending`` model for ``info``: checked ``metadata`` and the record's fields."""
    return {
        **metadata,
        "slot": info.slot,
        "created_at": created_at,
        "stream": info.stream,
        "filename": info.filename,
        "run": info.run,
        "slot_key": info.key,
        "uri": uri,
        "output_uri": info.output_uri,
        "state": RecordState.PENDING.value,
    }


def pending_model(info: UploadInfo, tags: list[str]) -> dict[str, Any]:
    """The name, uri, tags and comment of a new ``pending`` model for ``info`` (checked ``tags``).

    No uri until live, and archived: a pending model must not look loadable.
    """
    return {
        "name": info.name,
        "uri": "",
        "tags": sorted({*tags, STREAM_TAG_PREFIX + info.stream, STATE_TAGS[RecordState.PENDING]}),
        "system_tags": [ARCHIVED_TAG],
        "comment": f"tracker_saver checkpoint {info.filename} of run {info.run}",
    }


def model_record(model: dict[str, Any], project: str) -> Record:
    """The record a model holds; ``project`` is the record's project (the model's, less the root)."""
    meta = {unescape_key(k): decode_value(v) for k, v in (model.get("metadata") or {}).items()}
    fields = _OLD_FIELD_KEYS if "key" in meta else _FIELD_KEYS
    try:
        state = RecordState(meta.get("state"))
    except ValueError:  # someone edited it by hand (the web UI's metadata table): not ours to guess
        raise UnreadableRecordError(
            f"record {model['id']} cannot be read: its metadata 'state' is {meta.get('state')!r}, none of "
            "tracker_saver's; put it back in ClearML's web UI (the model's metadata), or delete the model",
            record_id=str(model["id"]),
            why=f"its metadata 'state' is {meta.get('state')!r}",
        ) from None
    stream = str(meta.get("stream") or "")
    # a staged (pending) record already carries sha256 and size: metadata shows them once committed
    committed = state not in (RecordState.PENDING, RecordState.FAILED)
    user_meta = {k: v for k, v in meta.items() if k not in fields and (committed or k not in _COMMIT_KEYS)}
    slot_key = meta.get("key") if "key" in meta else meta.get("slot_key")
    managed = {STREAM_TAG_PREFIX + stream, *STATE_TAGS.values()}
    slot, size, created = meta.get("slot"), meta.get("size"), meta.get("created_at")
    return Record(
        id=str(model["id"]),
        project=project,
        run=str(meta.get("run") or ""),
        stream=stream,
        filename=str(meta.get("filename") or ""),
        name=str(model.get("name") or ""),
        state=state,
        slot=slot if isinstance(slot, int) and not isinstance(slot, bool) else None,
        key=slot_key if isinstance(slot_key, str) else None,
        uri=(model.get("uri") or meta.get("uri") or None),  # type: ignore[arg-type]
        sha256=meta.get("sha256") if isinstance(meta.get("sha256"), str) else None,  # type: ignore[arg-type]
        size=size if isinstance(size, int) and not isinstance(size, bool) else None,
        metadata=user_meta,
        tags=tuple(
            sorted(t for t in model.get("tags") or [] if t not in managed and not t.startswith(ALIAS_TAG_PREFIX))
        ),
        aliases=model_aliases(model),
        created_at=float(created) if isinstance(created, (int, float)) else 0.0,
        error=meta.get("error") if isinstance(meta.get("error"), str) else None,  # type: ignore[arg-type]
        output_uri=str(meta["output_uri"]) if isinstance(meta.get("output_uri"), str) else None,
        fingerprint=meta.get("fingerprint") if isinstance(meta.get("fingerprint"), str) else None,  # type: ignore[arg-type]
    )


def model_aliases(model: dict[str, Any]) -> tuple[str, ...]:
    """The user aliases a model's ``alias:*`` tags hold, sorted."""
    return tuple(sorted(t[len(ALIAS_TAG_PREFIX) :] for t in model.get("tags") or [] if t.startswith(ALIAS_TAG_PREFIX)))


def mirror(model: dict[str, Any], state: RecordState, stream: str) -> dict[str, Any]:
    """The tags, archive flag, uri and published flag that show ``state`` where ClearML's UI,
    ``Model.query_models`` and ``InputModel`` look. The uri is set only while loadable: ClearML must
    never download what a slot holds now for a model that is not its checkpoint (metadata ``uri``
    keeps it).

    ``ready`` (the web app's Published, else Draft): a pinned record is published, its bytes never
    change (aliases live on pins); a record whose bytes are gone (pending, evicted, failed) is a
    draft again; a live or revived one keeps what a person chose in the web app."""
    state_tags = set(STATE_TAGS.values())
    tags = [t for t in model.get("tags") or [] if t not in state_tags]
    if state in STATE_TAGS:
        tags.append(STATE_TAGS[state])
    if STREAM_TAG_PREFIX + stream not in tags:
        tags.append(STREAM_TAG_PREFIX + stream)
    system_tags = [t for t in model.get("system_tags") or [] if t != ARCHIVED_TAG]
    if state in _ARCHIVED:
        system_tags.append(ARCHIVED_TAG)
    uri = decode_value((model.get("metadata") or {}).get("uri")) or model.get("uri") or ""
    shown: dict[str, Any] = {
        "tags": sorted(set(tags)),
        "system_tags": sorted(set(system_tags)),
        "uri": str(uri) if state.loadable else "",
    }
    if state is RecordState.PINNED or state in _ARCHIVED:
        shown["ready"] = state is RecordState.PINNED
    return shown


# -- queries ------------------------------------------------------------------------------------
def _pushable(value: Any) -> bool:
    """Whether clearml-server matches ``value`` literally in a list filter."""
    return isinstance(value, str) and not value.startswith(("-", "__$"))


def metadata_filters(query: Query) -> dict[str, list[str]] | None:
    """The ``metadata.<key>.value`` filters ``models.get_all`` answers exactly for ``query``.

    Run, stream, filename, output_uri, slot, states and ``==``/``in`` on string metadata values;
    what is left (ranges, ``!=``, numbers, conditions on record fields, the sort) is done client-side. ``None``: nothing matches.

    Examples:
        >>> metadata_filters(Query(run="r1", states=(RecordState.LIVE,)))
        {'metadata.state.value': ['live'], 'metadata.run.value': ['r1']}
    """
    states = query.states if query.states is not None else tuple(RecordState)
    if not states:
        return None
    # Only tracker_saver models carry metadata "state"; this also pushes the state filter down.
    params: dict[str, list[str]] = {"metadata.state.value": sorted({RecordState(s).value for s in states})}
    for key in ("run", "stream", "filename", "output_uri"):
        value = getattr(query, key)
        if value is not None and _pushable(value):
            params[f"metadata.{key}.value"] = [value]
    if isinstance(query.slot, int) and not isinstance(query.slot, bool):
        params["metadata.slot.value"] = [str(query.slot)]
    for cond in query.where:
        name = f"metadata.{escape_key(cond.key)}.value"
        # a '.' or '$' in the key would be read as a path by the server; an escaped key ('~type') is not pushed
        if (
            cond.key in _FIELD_KEYS
            or cond.key in RECORD_FIELDS
            or name in params
            or not re.fullmatch(r"[A-Za-z0-9_-]+", escape_key(cond.key))
        ):
            continue
        values = [cond.value] if cond.op == "==" else list(cond.value) if cond.op == "in" else None
        if values and all(_pushable(v) for v in values):
            params[name] = values
    return params


# -- stream claims ------------------------------------------------------------------------------
def claim_tag(stream: StreamId) -> str:
    """The tag that marks ``stream``'s claim models (a hash: tags are short and searchable)."""
    key = json.dumps([getattr(stream, k) for k in _CLAIM_KEYS])
    return CLAIM_TAG_PREFIX + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def claim_comment(stream: StreamId, holder: Holder, heartbeat: float) -> str:
    """A claim model's comment: the stream and its holder, as JSON."""
    return json.dumps(
        {
            "kind": "claim",
            **{k: getattr(stream, k) for k in _CLAIM_KEYS},
            "token": holder.token,
            "host": holder.host,
            "pid": holder.pid,
            "started": holder.started,
            "since": holder.since,
            "command": holder.command,
            "heartbeat": heartbeat,
        }
    )


def read_claim(model: dict[str, Any], stream: StreamId) -> tuple[Holder, float] | None:
    """``(holder, heartbeat)`` of a claim model on ``stream``; ``None`` if tracker_saver did not write it."""
    try:
        doc = json.loads(model.get("comment") or "")
        if doc.get("kind") != "claim" or any(doc.get(k) != getattr(stream, k) for k in _CLAIM_KEYS):
            return None
        holder = Holder(
            token=str(doc["token"]),
            host=str(doc["host"]),
            pid=int(doc["pid"]),
            started=int(doc["started"]),
            since=float(doc["since"]),
            command=str(doc["command"]),
        )
        return holder, float(doc["heartbeat"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
