"""Where a record's object is: its output_uri and a key its stream allows, never a path the record names.

Anyone who can write records (a shared SQLite file, a tracker server, its web UI) could write
one whose ``uri`` is ``file:///home/alice/.ssh/id_rsa``. So every reader and deleter (a
download, a load, a pin, an unpin, the UI's download, the saver's ``dirname``) finds a
record's object here: the storage of its ``output_uri``, the key the naming rules give its
stream and slot (:func:`~tracker_saver.core.naming.key_problem`), and a ``uri`` that agrees.
A record that disagrees is refused with ``IntegrityError``; ``fsck`` reports it; nothing ever
reads or deletes its object.

Examples:
    >>> from tracker_saver.core.records import Record, RecordState
    >>> forged = Record("9", "p", "r", "best_model", "best_model_1.pt", "x", RecordState.PINNED, None,
    ...                 "id_rsa", "file:///home/alice/.ssh/id_rsa", output_uri="file:///home/alice/.ssh")
    >>> locate(forged)
    Traceback (most recent call last):
    ...
    tracker_saver.core.errors.IntegrityError: record 9 ('x') is refused: key 'id_rsa' is not a pin key of run p/r (p/r/+pinned/<name>); a record names its object only by its stream: `tracker-saver fsck` reports it, and nothing reads or deletes what it names
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tracker_saver.core.errors import IntegrityError
from tracker_saver.core.naming import key_problem
from tracker_saver.core.records import Record
from tracker_saver.storage import Storage, open_storage

__all__ = ["locate", "misplaced"]


def misplaced(record: Record, storage: Storage | None = None) -> str | None:
    """Why ``record``'s key (or, given its ``storage``, its uri) is not where its stream keeps objects; ``None`` if it is."""
    if record.output_uri is None:
        return "it names no output_uri"
    problem = key_problem(record.project, record.run, record.stream, record.slot, record.key)
    if problem is None and storage is not None and record.key is not None and storage.url(record.key) != record.uri:
        problem = f"its uri {record.uri!r} is not {storage.url(record.key)!r}, where its stream keeps its key"
    return problem


def locate(
    record: Record, *, storage: Storage | None = None, storage_options: Mapping[str, Any] | None = None
) -> tuple[Storage, str]:
    """``(storage, key)`` of ``record``'s object, computed from its stream; ``storage`` is reused when it is the record's.

    Raises:
        IntegrityError: the record's key or uri is not where its stream keeps objects.
    """
    problem = misplaced(record)
    if problem is None:
        assert record.output_uri is not None and record.key is not None
        if storage is None or storage.uri != record.output_uri:
            storage = open_storage(record.output_uri, **dict(storage_options or {}))
        problem = misplaced(record, storage)
    if problem is not None:
        raise IntegrityError(
            f"record {record.id} ({record.name!r}) is refused: {problem}; a record names its object only by its "
            "stream: `tracker-saver fsck` reports it, and nothing reads or deletes what it names",
            key=record.key,
            record_id=record.id,
        )
    assert storage is not None and record.key is not None
    return storage, record.key
