"""The data that flows through a save: ``UploadInfo``, ``Record`` and ``RecordState``; no I/O."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, Union

__all__ = ["MetaValue", "Record", "RecordState", "UploadInfo", "clean_metadata"]

#: A metadata value is typed: int (step, slot, size), float (score) or str; ``None`` is absent.
MetaValue = Union[int, float, str, bool, None]


class RecordState(str, enum.Enum):
    """Where a record is in its life; see the state diagram in ``docs/concepts.md``.

    ``pending → live`` when the bytes are complete; ``live → evicted`` on Ignite's ``remove``;
    ``evicted → revived`` by repair; ``pending → failed`` when a write never completed.
    """

    PENDING = "pending"
    LIVE = "live"
    EVICTED = "evicted"
    REVIVED = "revived"
    FAILED = "failed"

    @property
    def loadable(self) -> bool:
        """Whether the record's slot is known to hold its bytes."""
        return self in (RecordState.LIVE, RecordState.REVIVED)


def clean_metadata(metadata: dict[str, Any]) -> dict[str, MetaValue]:
    """Return ``metadata`` with every value checked to be an int, float, str, bool or None.

    Non-finite floats (NaN, ±inf) become ``None``: a score that is not a number is *absent*,
    so it never matches a range query and sorts last.

    Examples:
        >>> clean_metadata({"score": float("nan"), "global_step": 3})
        {'score': None, 'global_step': 3}
    """
    out: dict[str, MetaValue] = {}
    for key, value in metadata.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"metadata keys must be non-empty strings, got {key!r}")
        if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
            value = value.item()
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        if value is not None and not isinstance(value, (int, float, str, bool)):
            raise TypeError(
                f"metadata[{key!r}] = {value!r} has type {type(value).__name__}: "
                "use an int, float, str or bool"
            )
        out[key] = value
    return out


@dataclass
class UploadInfo:
    """What the pre-upload callbacks see and may change before a checkpoint is written.

    Attributes:
        project: the project (namespace) of the run.
        run: the run the checkpoint belongs to.
        stream: Ignite's basename, ``{filename_prefix}_{name}`` (e.g. ``best_model``).
        filename: Ignite's semantic filename (e.g. ``best_model_17_val_acc=0.9312.pt``).
        name: the record's display name; starts as ``filename``.
        metadata: typed metadata (global_step, score, priority, …); callbacks may add keys.
        tags: tags for the record.
        slot: the slot index chosen by the slot allocator (the first pre-upload callback).
        key: the storage key under output_uri, derived from ``slot``.

    Examples:
        >>> info = UploadInfo("mnist", "r1", "best_model", "best_model_3_val_acc=0.5000.pt")
        >>> info.name
        'best_model_3_val_acc=0.5000.pt'
    """

    project: str
    run: str
    stream: str
    filename: str
    name: str = ""
    metadata: dict[str, MetaValue] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    slot: int | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        if not self.name:
            self.name = self.filename


@dataclass(frozen=True)
class Record:
    """One registry entry per checkpoint ever saved.

    Attributes:
        id: registry id (an integer string for SQLite, a model id for ClearML).
        project: project of the run.
        run: the run.
        stream: Ignite's basename, e.g. ``checkpoint`` or ``best_model``.
        filename: Ignite's filename, as Ignite knows it (never changes).
        name: display name: the semantic filename until a user renames it.
        state: see :class:`RecordState`.
        slot: slot index inside the stream.
        key: storage key relative to output_uri.
        uri: full storage URI of the slot object (stale once evicted).
        sha256: hex digest of the object's bytes (``None`` until live).
        size: object size in bytes (``None`` until live).
        metadata: typed metadata.
        tags: tags.
        created_at: creation time, seconds since the epoch.
        error: why a failed record failed.
    """

    id: str
    project: str
    run: str
    stream: str
    filename: str
    name: str
    state: RecordState
    slot: int | None
    key: str | None
    uri: str | None
    sha256: str | None = None
    size: int | None = None
    metadata: dict[str, MetaValue] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    created_at: float = 0.0
    error: str | None = None

    @property
    def score(self) -> float | None:
        """The checkpoint's score, if it has one."""
        value = self.metadata.get("score")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    @property
    def global_step(self) -> int | None:
        """The checkpoint's global step, if known."""
        value = self.metadata.get("global_step")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (used by ``--json`` and the UI)."""
        return {
            "id": self.id,
            "project": self.project,
            "run": self.run,
            "stream": self.stream,
            "filename": self.filename,
            "name": self.name,
            "state": self.state.value,
            "slot": self.slot,
            "key": self.key,
            "uri": self.uri,
            "sha256": self.sha256,
            "size": self.size,
            "metadata": dict(self.metadata),
            "tags": list(self.tags),
            "created_at": self.created_at,
            "error": self.error,
        }
