"""The exception tree of tracker_saver; nothing else lives here.

::

    TrackerSaverError
     ├── ConfigError (ValueError)     bad argument or environment, raised before any work
     │    ├── ConfigTypeError (TypeError)  an argument of the wrong kind (e.g. a callback not callable)
     │    └── StreamOwnedError        the stream's objects belong to another registry (at output_uri)
     ├── ClosedError (RuntimeError)   a saver or log uploader used after close()
     ├── StorageError                 an object could not be written, read, listed or deleted
     │    └── IntegrityError          bytes do not match the record (size or sha256)
     ├── RegistryError                a record could not be created, changed or found
     │    ├── RecordNotFoundError (KeyError)
     │    ├── UnreadableRecordError   a record someone else edited cannot be read back (queries skip it)
     │    ├── StreamBusyError         another live saver writes this stream
     │    └── PromotionRefusedError   a gated alias move refused: the record does not beat the holder
     ├── SerializationError           torch could not serialize or deserialize a checkpoint
     ├── CallbackError                a pre- or post-upload callback raised
     └── FlushTimeoutError            background saves were not done in time (async saving)

Third-party errors (``OSError``, ``botocore``, ``sqlite3``, ClearML) are mapped to this
tree at exactly one place per backend, always ``raise ... from exc`` so the cause is chained.
``SerializationError`` deliberately is *not* a ``TypeError``: Ignite retries a save handler
without metadata when it raises ``TypeError``, which would hide the real failure.
"""

from __future__ import annotations

__all__ = [
    "CallbackError",
    "ClosedError",
    "ConfigError",
    "ConfigTypeError",
    "FlushTimeoutError",
    "IntegrityError",
    "PromotionRefusedError",
    "RecordNotFoundError",
    "RegistryError",
    "SerializationError",
    "StorageError",
    "StreamBusyError",
    "StreamOwnedError",
    "TrackerSaverError",
    "UnreadableRecordError",
]


class TrackerSaverError(Exception):
    """Root of every error raised by tracker_saver."""


class ConfigError(TrackerSaverError, ValueError):
    """A constructor argument or environment setting is invalid; the message names the fix."""


class ConfigTypeError(ConfigError, TypeError):
    """An argument of the wrong kind; a ``TypeError`` too, for callers that catch one."""


class StreamOwnedError(ConfigError):
    """The stream's objects at output_uri belong to another registry: this saver would overwrite them.

    Raised before any byte is written or deleted. Ownership lasts until a deliberate hand-over
    (``tracker-saver streams take-over``), unlike a writer's lease (:class:`StreamBusyError`).

    Attributes:
        owner: how the owner object names the owning registry.
    """

    def __init__(self, message: str, *, owner: str) -> None:
        super().__init__(message)
        self.owner = owner


class ClosedError(TrackerSaverError, RuntimeError):
    """An object was used after its ``close()``; a ``RuntimeError`` too, as it used to be."""


class StorageError(TrackerSaverError):
    """An object at output_uri could not be written, read, listed or deleted.

    Attributes:
        key: the storage key involved, if any.
    """

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class IntegrityError(StorageError):
    """An object's bytes do not match its record: the slot was overwritten or corrupted.

    Attributes:
        record_id: the record whose bytes did not match.
    """

    def __init__(self, message: str, *, key: str | None = None, record_id: str | None = None) -> None:
        super().__init__(message, key=key)
        self.record_id = record_id


class RegistryError(TrackerSaverError):
    """A record could not be created, changed or read.

    Attributes:
        record_id: the record involved, if any.
    """

    def __init__(self, message: str, *, record_id: str | None = None) -> None:
        super().__init__(message)
        self.record_id = record_id


class RecordNotFoundError(RegistryError, KeyError):
    """No record has the given id."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class UnreadableRecordError(RegistryError):
    """A record someone else wrote or edited (a tracker's UI, a script) cannot be read back.

    Queries skip such a record with one warning; ``get`` raises this; ``fsck`` reports it.

    Attributes:
        why: what cannot be read.
    """

    def __init__(self, message: str, *, record_id: str, why: str) -> None:
        super().__init__(message, record_id=record_id)
        self.why = why


class StreamBusyError(RegistryError):
    """Another live saver holds the stream: a stream has one writer at a time.

    Attributes:
        holder: how the registry describes the holder (pid, host, command, since).
    """

    def __init__(self, message: str, *, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


class PromotionRefusedError(RegistryError):
    """A gated alias move (``set_alias(..., require=...)``) was refused; the alias did not move.

    Attributes:
        reason: why, in a few words (``0.91 does not beat 0.93``).
    """

    def __init__(self, message: str, *, record_id: str, reason: str) -> None:
        super().__init__(message, record_id=record_id)
        self.reason = reason


class SerializationError(TrackerSaverError):
    """torch could not serialize (or deserialize) a checkpoint."""


class CallbackError(TrackerSaverError):
    """A pre- or post-upload callback raised; the original exception is chained."""


class FlushTimeoutError(TrackerSaverError):
    """``flush()`` or ``close()`` gave up waiting; ``pending`` names the saves not yet durable."""

    def __init__(self, message: str, *, pending: list[str]) -> None:
        super().__init__(message)
        self.pending = pending
