"""How a record is written onto an MLflow LoggedModel: its name, tags, status and metrics.

One LoggedModel per record. Its MLflow ``name`` is fixed at creation: Ignite's filename made
legal for MLflow (:func:`model_name`). Every record field lives in a ``tracker_saver.*`` tag
(the source of truth, read back by :func:`read_record`); the typed metadata is one JSON tag,
its numbers are also logged as the model's metrics (so ``metrics.score > 0.5`` filters in
MLflow's UI) and its values as params at creation. The state is a tag plus MLflow's status:
live, revived and pinned are ``READY``; pending is ``PENDING``; failed and evicted are
``FAILED`` (an evicted checkpoint is not loadable, so MLflow never shows it as ready).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from tracker_saver.core.records import MetaValue, Record, RecordState, UploadInfo

__all__ = ["PREFIX", "STATUS", "model_name", "read_record", "record_tags", "state_filter", "status_of"]

#: Prefix of every tag tracker_saver writes on a LoggedModel, a run or an experiment.
PREFIX = "tracker_saver."

#: MLflow's status for each record state.
STATUS = {
    RecordState.PENDING: "PENDING",
    RecordState.LIVE: "READY",
    RecordState.REVIVED: "READY",
    RecordState.PINNED: "READY",
    RecordState.FAILED: "FAILED",
    RecordState.EVICTED: "FAILED",
}

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


def record_tags(info: UploadInfo, *, uri: str, created_at: float) -> dict[str, str]:
    """The ``tracker_saver.*`` tags of a new pending record."""
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
    return {PREFIX + k: _json(v) for k, v in fields.items()}


def status_of(state: RecordState) -> str:
    """MLflow's status for ``state``."""
    return STATUS[state]


def state_filter(states: tuple[RecordState, ...]) -> str:
    """A ``search_logged_models`` filter for records in ``states`` (MLflow's filters have no ``OR``).

    Examples:
        >>> print(state_filter((RecordState.LIVE, RecordState.PINNED)))
        tags.`tracker_saver.state` IN ('"live"', '"pinned"')
    """
    return f"tags.`{PREFIX}state` IN ({', '.join(repr(_json(s.value)) for s in states)})"


def read_record(model: Any) -> Record | None:
    """The record a LoggedModel holds, or ``None`` when tracker_saver did not write it."""
    tags: dict[str, str] = dict(model.tags or {})
    if PREFIX + "state" not in tags:
        return None
    f = {k[len(PREFIX) :]: json.loads(v) for k, v in tags.items() if k.startswith(PREFIX)}
    state = RecordState(f["state"])
    metadata: dict[str, MetaValue] = dict(f.get("metadata") or {})
    extra = {"slot": f.get("slot"), "created_at": f.get("created_at")}
    if state is not RecordState.PENDING and state is not RecordState.FAILED:
        extra.update(sha256=f.get("sha256"), size=f.get("size"), uri=f.get("uri"))
    metadata.update({k: v for k, v in extra.items() if v is not None})
    return Record(
        id=str(model.model_id),
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
    )


def encode(value: Any) -> str:
    """A tag value as tracker_saver writes it (JSON)."""
    return _json(value)


def digest(text: str) -> str:
    """8 hex digits naming ``text`` (for names and claim tags)."""
    return hashlib.sha1(text.encode()).hexdigest()[:8]
