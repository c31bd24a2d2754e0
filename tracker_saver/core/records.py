"""The data that flows through a save: ``UploadInfo``, ``Record`` and ``RecordState``; no I/O."""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass, field
from typing import Any

from tracker_saver.core.errors import ConfigError
from tracker_saver.core.text import METADATA_VALUE_ALLOWS, check_text

__all__ = [
    "ALIAS_PATTERN",
    "DERIVED_ALIASES",
    "LOADABLE",
    "INT_RANGE",
    "LOADABLE_OR_PINNED",
    "MAX_KEY_LENGTH",
    "MAX_METADATA_BYTES",
    "MAX_NAME_LENGTH",
    "MAX_TAG_LENGTH",
    "MAX_VALUE_BYTES",
    "SAVER_KEYS_BYTES",
    "MetaValue",
    "Record",
    "RecordState",
    "StreamId",
    "TIMING_KEYS",
    "UploadInfo",
    "check_alias",
    "check_display_name",
    "check_tags",
    "clean_metadata",
    "clip",
    "decode_value",
    "encode_value",
]

#: A metadata value is typed: int (step, slot, size), float (score) or str; ``None`` is absent.
MetaValue = int | float | str | bool | None


class RecordState(str, enum.Enum):
    """Where a record is in its life; see the state diagram in ``docs/concepts.md``.

    ``pending → live`` when the bytes are committed; ``live → evicted`` right before a new save
    commits into its slot (and back to ``live`` if that save fails first); ``evicted → revived``
    at start-up when the slot still holds its bytes; ``pending → failed`` when a write never
    completed. Every transition is a compare-and-set on the state it leaves.

    ``pinned`` is a copy of a loadable record at a stable key (``<project>/<run>/pinned/<name>``),
    outside the stream's slots: loadable, but eviction, slots, resume and recovery never touch it.
    """

    PENDING = "pending"
    LIVE = "live"
    EVICTED = "evicted"
    REVIVED = "revived"
    FAILED = "failed"
    PINNED = "pinned"

    @property
    def loadable(self) -> bool:
        """Whether the record's object (its slot, or its pinned key) is known to hold its bytes."""
        return self in LOADABLE_OR_PINNED


#: The states whose record's slot is known to hold its bytes: the ones slots and eviction manage.
LOADABLE = (RecordState.LIVE, RecordState.REVIVED)
#: Every state whose record can be loaded: the slot states and ``pinned``.
LOADABLE_OR_PINNED = (*LOADABLE, RecordState.PINNED)

#: Metadata keys the saver writes on every record when it becomes live: what that save cost
#: (seconds the training thread was blocked, seconds until durable, bytes, MB/s, background?).
#: Reserved: only the saver writes them. A pre-upload callback that sets one gets ``CallbackError``
#: (it would forge what the save cost); the saver's values replace any a post-upload callback set.
#: See :mod:`tracker_saver.core.timings`.
TIMING_KEYS = ("save_blocked_s", "save_durable_s", "save_bytes", "save_mb_s", "save_background")

#: The aliases the registry derives from record states; users cannot set them.
DERIVED_ALIASES = ("best", "latest")
#: What a user alias looks like (``production``, ``v1.2``).
ALIAS_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: The longest display name a record may get.
MAX_NAME_LENGTH = 255

#: The longest tag, in characters (the web UI's limit too).
MAX_TAG_LENGTH = 200
#: The longest metadata key, in characters: the longest name a project, run or where key may have.
MAX_KEY_LENGTH = 1000
#: The most bytes (UTF-8) one string metadata value may hold. A note, a config as JSON, a git diff
#: stat fit; a dataset does not.
MAX_VALUE_BYTES = 64 * 1024
#: The most bytes one record's metadata may hold in all, keys and values as text: it travels in
#: every read of the record (one MLflow tag, one ClearML model document, one SQLite row per key).
MAX_METADATA_BYTES = 1024 * 1024
#: Of :data:`MAX_METADATA_BYTES`, what a save's callbacks leave for the keys the saver adds once the
#: bytes are committed (sha256, size, uri, :data:`TIMING_KEYS`): checked before the first byte, so
#: the record can still become live after the commit point.
SAVER_KEYS_BYTES = 4096
#: The ints a record holds: 64-bit signed, as SQLite's INTEGER (and the int64 of most JSON readers
#: that keep ints exact). A larger number is recorded as a float, or as text.
INT_RANGE = (-(2**63), 2**63 - 1)


def check_alias(alias: object) -> str:
    """Return ``alias`` if a user may set it, else raise ``ConfigError`` naming it and the rule.

    Examples:
        >>> check_alias("production")
        'production'
        >>> check_alias("best")
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.ConfigError: alias 'best' is derived by the registry (best, latest): choose another name, e.g. 'production'
    """
    if isinstance(alias, str) and alias in DERIVED_ALIASES:
        raise ConfigError(
            f"alias {alias!r} is derived by the registry ({', '.join(DERIVED_ALIASES)}): "
            "choose another name, e.g. 'production'"
        )
    if not isinstance(alias, str) or not ALIAS_PATTERN.fullmatch(alias):
        raise ConfigError(
            f"alias {alias!r} is not a valid alias: use 1-64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit (e.g. 'production')"
        )
    return alias


def check_display_name(record_id: str, name: object) -> str:
    """Return ``name`` if it can be a record's display name, else raise ``ConfigError``.

    A name is non-empty, at most :data:`MAX_NAME_LENGTH` characters, and allowed by the text rule
    (:func:`tracker_saver.core.text.check_text`): the rule every saved name follows too.

    Examples:
        >>> check_display_name("3", "the one we ship")
        'the one we ship'
        >>> check_display_name("3", "x" * 300)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.ConfigError: new name 'xxx...' for record 3 is 300 characters long: give a name of at most 255
    """
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"new name {name!r} for record {record_id} is empty: give a non-empty name")
    if len(name) > MAX_NAME_LENGTH:
        raise ConfigError(
            f"new name {name[:40] + '...'!r} for record {record_id} is {len(name)} characters long: "
            f"give a name of at most {MAX_NAME_LENGTH}"
        )
    return check_text(f"new name for record {record_id}:", name)


@dataclass(frozen=True)
class StreamId:
    """One stream: the checkpoints of one ``Checkpoint`` handler in one run at one output_uri.

    A stream has one writer at a time; records at another output_uri are another stream.

    Examples:
        >>> StreamId("file:///ckpt", "mnist", "r1", "best_model").label
        'mnist/r1/best_model at file:///ckpt'
    """

    output_uri: str
    project: str
    run: str
    stream: str

    @property
    def label(self) -> str:
        """How messages name the stream."""
        return f"{self.project}/{self.run}/{self.stream} at {self.output_uri}"


def clean_metadata(metadata: dict[str, Any], *, reserve: int = 0) -> dict[str, MetaValue]:
    """Return ``metadata`` with every value checked to be one a record can hold, before anything is written.

    A value is an int in :data:`INT_RANGE`, a float, a str of at most :data:`MAX_VALUE_BYTES`
    (UTF-8), a bool or None; a key is text of at most :data:`MAX_KEY_LENGTH` characters; keys and
    values together hold at most :data:`MAX_METADATA_BYTES` less ``reserve``. NaN becomes ``None``: a score that
    is not a number is *absent*, so it never matches a range query and sorts last. ``±inf`` is
    kept exactly: Ignite compares priorities, and a resumed run must rank an infinite score as
    Ignite did.

    Raises:
        ConfigError: naming the key, what its value is (type, size) and the limit it breaks.

    Examples:
        >>> clean_metadata({"score": float("nan"), "priority": float("inf"), "global_step": 3})
        {'score': None, 'priority': inf, 'global_step': 3}
        >>> clean_metadata({"big": 10**5000})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.ConfigError: metadata['big'] is a 16610-bit int, outside the range a record holds ...
    """
    out: dict[str, MetaValue] = {}
    total = 0
    for key, value in metadata.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"metadata key {key!r} is not a non-empty string: name metadata keys with text")
        if len(key) > MAX_KEY_LENGTH:
            raise ConfigError(
                f"metadata key {key[:40] + '...'!r} is {len(key)} characters long: a key has at most "
                f"{MAX_KEY_LENGTH}; give it a shorter name"
            )
        check_text("metadata key", key)
        value = _checked_value(key, value)
        total += len(key.encode()) + _size(value)
        if total > MAX_METADATA_BYTES - reserve:
            kept = f", {reserve:,} of them kept for the saver's own keys" if reserve else ""
            raise ConfigError(
                f"metadata of {len(metadata)} keys holds over {MAX_METADATA_BYTES - reserve:,} bytes with "
                f"metadata[{key!r}]: a record's metadata holds at most {MAX_METADATA_BYTES:,} bytes (1 MiB) in all"
                f"{kept}; store large data in the checkpoint itself or in a file of its own, and record its path"
            )
        out[key] = value
    return out


def clip(text: str, limit: int = MAX_VALUE_BYTES) -> str:
    """``text`` cut to fit ``limit`` bytes of UTF-8 (a metadata value's), saying so, for text the saver records itself.

    A command line with thousands of file arguments must not fail every save of the run.

    Examples:
        >>> clip("train.py --lr 0.1")
        'train.py --lr 0.1'
        >>> clip("x" * 100, 40)
        'xxxxxxxxxxxxx… (100 bytes in all, cut)'
    """
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    note = f"… ({len(data):,} bytes in all, cut)"
    return data[: limit - len(note.encode())].decode("utf-8", "ignore") + note  # "ignore": a character cut in two


def _checked_value(key: str, value: object) -> MetaValue:
    """``value`` as a record holds it (a numpy/torch scalar as its Python number, NaN as None), or ``ConfigError``."""
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    if value is not None and not isinstance(value, (int, float, str, bool)):
        raise ConfigError(
            f"metadata[{key!r}] = {value!r} has type {type(value).__name__}, which a record cannot hold: "
            "use an int, float, str or bool (json.dumps(value) for a structure)"
        )
    if isinstance(value, int) and not isinstance(value, bool) and not INT_RANGE[0] <= value <= INT_RANGE[1]:
        # Never formatted: str() of an int over 4300 digits is itself a ValueError.
        raise ConfigError(
            f"metadata[{key!r}] is a {value.bit_length()}-bit int, outside the range a record holds "
            "(-2**63 to 2**63-1, SQLite's 64-bit INTEGER): record it as a float "
            "(float(value)) or as text"
        )
    if isinstance(value, str):
        # Sized first: the text rule then scans at most MAX_VALUE_BYTES.
        if (size := _size(value)) > MAX_VALUE_BYTES:
            raise ConfigError(
                f"metadata[{key!r}] is a str of {size:,} bytes (UTF-8): a metadata value holds at most "
                f"{MAX_VALUE_BYTES:,} bytes ({MAX_VALUE_BYTES >> 10} KiB); store large data in the checkpoint itself "
                "or in a file of its own, and record its path"
            )
        check_text(f"metadata[{key!r}]", value, allow=METADATA_VALUE_ALLOWS)
    return value


def _size(value: MetaValue) -> int:
    """The bytes ``value`` takes as text (a lone surrogate counted as the text rule will refuse it)."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    return 0 if value is None else len(repr(value))


def check_tags(tags: object, what: str) -> list[str]:
    """``tags`` as a list, each a non-empty string the text rule allows, of at most :data:`MAX_TAG_LENGTH` characters.

    One string is one tag.

    Raises:
        ConfigError: a tag that is not text, is blank, too long or breaks the text rule, naming ``what``.

    Examples:
        >>> check_tags("candidate", "record 3"), check_tags(("a", "b 🧑\u200d🔬"), "record 3")
        (['candidate'], ['a', 'b 🧑\u200d🔬'])
    """
    listed = [tags] if isinstance(tags, str) else list(tags) if isinstance(tags, (list, tuple)) else None
    bad = [t for t in listed or [] if not isinstance(t, str) or not t.strip()]
    if listed is None or bad:
        raise ConfigError(
            f"tags {bad or tags!r} of {what} are not non-empty strings: give tags as a list of text, e.g. ['candidate']"
        )
    long = next((t for t in listed if len(t) > MAX_TAG_LENGTH), None)
    if long is not None:
        raise ConfigError(
            f"tag {long[:40] + '...'!r} of {what} is {len(long)} characters long: a tag has at most {MAX_TAG_LENGTH}"
        )
    return [check_text(f"tag of {what}", tag) for tag in listed]


def encode_value(value: MetaValue) -> tuple[str, str | None]:
    """``(type, text)`` of a metadata value, as every registry stores it: the one typed encoding.

    Examples:
        >>> encode_value(3), encode_value(0.5), encode_value(True), encode_value(None)
        (('int', '3'), ('float', '0.5'), ('bool', 'True'), ('none', None))
    """
    if value is None:
        return ("none", None)
    if isinstance(value, bool):
        return ("bool", str(value))
    if isinstance(value, int):
        return ("int", str(value))
    if isinstance(value, float):
        return ("float", repr(value))
    return ("str", str(value))


def decode_value(kind: str, text: str | None) -> MetaValue:
    """The value :func:`encode_value` stored; an unreadable number stays text, NaN is absent.

    Examples:
        >>> decode_value("float", "inf"), decode_value("float", "nan"), decode_value("int", "x")
        (inf, None, 'x')
    """
    kind = kind.lower()
    if text is None or kind in ("none", "nonetype") or (kind == "" and text == ""):
        return None
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            number = float(text)
            return None if math.isnan(number) else number  # ±inf is a priority Ignite compares
        if kind == "bool":
            return text.strip().lower() in ("true", "1", "yes")
    except ValueError:
        pass
    return text


@dataclass
class UploadInfo:
    """What the pre-upload callbacks see before a checkpoint is written.

    Callbacks may change ``name``, ``metadata`` and ``tags``, or return ``None`` to skip the
    upload. ``project``, ``run``, ``stream``, ``filename``, ``slot``, ``key`` and
    ``output_uri`` belong to the slot allocator: changing them is a ``CallbackError`` and
    nothing is written.

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
        output_uri: the storage root the key is under.

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
    output_uri: str = ""

    #: The fields a callback must leave as the allocator set them.
    READ_ONLY = ("project", "run", "stream", "filename", "slot", "key", "output_uri")

    def __post_init__(self) -> None:
        if not self.name:
            self.name = self.filename

    @property
    def stream_id(self) -> StreamId:
        """The stream this checkpoint belongs to."""
        return StreamId(self.output_uri, self.project, self.run, self.stream)

    def check_labels(self) -> None:
        """Raise ``ConfigError`` unless the name, tags and metadata (what callbacks may change) can be recorded.

        The name and the tags follow the text rule, and so do metadata keys and string values
        (:func:`clean_metadata`): the same rule a rename or a tag from the CLI or the UI follows.
        A name a callback gave has at most :data:`MAX_NAME_LENGTH` characters, as a rename's
        (Ignite's own filename may be longer); metadata leaves :data:`SAVER_KEYS_BYTES` free.

        Examples:
            >>> UploadInfo("p", "r", "s", "s_1.pt", name="ok\\x1b[2J").check_labels()  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            tracker_saver.core.errors.ConfigError: record name of 's_1.pt' 'ok\\x1b[2J' holds U+001B (ESC) ...
        """
        what = f"checkpoint {self.filename!r}"
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigError(f"record name {self.name!r} of {what} is not a non-empty string: name it with text")
        if self.name != self.filename and len(self.name) > MAX_NAME_LENGTH:  # the rule of a rename
            raise ConfigError(
                f"record name {self.name[:40] + '...'!r} of {what} is {len(self.name)} characters long: give a name "
                f"of at most {MAX_NAME_LENGTH}"
            )
        check_text(f"record name of {self.filename!r}", self.name)
        check_tags(self.tags, what)
        clean_metadata(self.metadata, reserve=SAVER_KEYS_BYTES)


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
        output_uri: the storage root the record's stream writes to.
        sha256: hex digest of the object's bytes (``None`` until live).
        size: object size in bytes (``None`` until live).
        metadata: typed metadata.
        tags: tags.
        created_at: creation time, seconds since the epoch.
        error: why a failed record failed.
        output_uri: the storage root of the record's stream.
        aliases: sorted names that point at this record: the derived ``latest`` (the stream's
            live/revived record created last) and ``best`` (its live/revived record with the
            highest ``score``, ties to the later one), and user aliases such as ``production``.
            Filled by the registry on every read.
        fingerprint: what the store said identifies the object its commit made (S3: the ETag;
            local: size, mtime_ns and inode); ``None`` before it was live, or for a record older
            than fingerprints. ``fsck`` compares it with a stat or a HEAD per object.
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
    output_uri: str | None = None
    aliases: tuple[str, ...] = ()
    fingerprint: str | None = None

    @property
    def stream_id(self) -> StreamId:
        """The stream this record belongs to."""
        return StreamId(self.output_uri or "", self.project, self.run, self.stream)

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
        """A JSON-ready dict (used by ``--json``): ``id`` a string, as in the UI's API, whatever the
        registry (a ClearML id is not a number); ``created_at`` seconds since the epoch.

        Examples:
            >>> Record("12", "p", "r", "s", "s_1.pt", "s_1.pt", RecordState.LIVE, 0, "k", "u").to_dict()["id"]
            '12'
        """
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
            "output_uri": self.output_uri,
            "aliases": list(self.aliases),
            "fingerprint": self.fingerprint,
        }
