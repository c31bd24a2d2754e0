"""Keep a checkpoint outside its stream's slots: a copy at a stable pin key, recorded as a pinned record.

A person's pin (:func:`tracker_saver.models.pin_model`), an alias set on a slot record
(:func:`tracker_saver.models.set_alias`) and an archival keep (``TrackerSaver(keep_every=...)``)
all end here. Each pinned record says why it exists in its ``kept_by`` metadata: absent for a
person's pin, ``"alias production"`` for the copy an alias made, ``"every 10 epochs"`` for an
archive entry. Only archive entries are ever deleted by the saver (``keep_every_max``).

Examples:
    >>> from tracker_saver.core.records import Record, RecordState
    >>> entry = Record("9", "p", "r", "s", "s_10.pt", "s_10.pt", RecordState.PINNED, None, "p/r/+pinned/9f2c-s_10.pt",
    ...                "file:///o/p/r/+pinned/9f2c-s_10.pt", metadata={"kept_by": "every 10 epochs"})
    >>> is_archived(entry), kept_for_alias(entry)
    (True, False)
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping

from tracker_saver.core.naming import may_be_slot_key, pinned_key
from tracker_saver.core.records import TIMING_KEYS, MetaValue, Record, RecordState, StreamId, UploadInfo
from tracker_saver.registry.base import Query, Registry
from tracker_saver.storage import Storage
from tracker_saver.storage.verify import Digest, check

__all__ = ["KEPT_BY", "OwnerCheck", "alias_reason", "drop_pin", "is_archived", "keep_copy", "kept_for_alias"]

#: Makes sure a registry owns a stream at a storage before anything of it is written, claiming it
#: if nobody does; raises ``StreamOwnedError`` otherwise. The callers pass
#: :func:`tracker_saver.save.ownership.ensure_owner`: who owns a stream is the save's to say, a
#: floor above the lifecycle.
OwnerCheck = Callable[[Storage, Registry, StreamId], object]

#: The metadata key that says why a pinned record exists (absent: a person pinned it).
KEPT_BY = "kept_by"
#: Metadata a record shows that are columns of its own: a copy gets its own values.
_OWN_METADATA = ("slot", "created_at", "sha256", "size", "uri")
#: ``kept_by`` of an archive entry starts with this (``"every 10 epochs"``); of an alias's copy, the other.
_ARCHIVE, _ALIAS = "every ", "alias "


def is_archived(record: Record) -> bool:
    """Whether ``record`` is an archive entry that ``keep_every`` made (and ``keep_every_max`` may delete)."""
    kept_by = record.metadata.get(KEPT_BY)
    return record.state is RecordState.PINNED and isinstance(kept_by, str) and kept_by.startswith(_ARCHIVE)


def kept_for_alias(record: Record) -> bool:
    """Whether ``record`` is the pinned copy that setting an alias on a slot record made."""
    kept_by = record.metadata.get(KEPT_BY)
    return record.state is RecordState.PINNED and isinstance(kept_by, str) and kept_by.startswith(_ALIAS)


def alias_reason(alias: str) -> str:
    """The ``kept_by`` of the copy that setting ``alias`` made: ``"alias production"``."""
    return _ALIAS + alias


def _reusable(registry: Registry, source: Record) -> Record | None:
    """A pin of ``source`` made before (``pinned_from``, same bytes), which is not an archive entry."""
    query = Query(output_uri=source.output_uri, project=source.project, run=source.run, states=(RecordState.PINNED,))
    for other in registry.records.query(query):
        if str(other.metadata.get("pinned_from")) == source.id and other.sha256 == source.sha256:
            if not is_archived(other):
                return other
    return None


def keep_copy(
    storage: Storage,
    registry: Registry,
    source: Record,
    *,
    owner: OwnerCheck,
    extra: Mapping[str, MetaValue] | None = None,
    reuse: bool = True,
    verify: bool = True,
) -> Record:
    """Copy a loadable record's object to a new pin key (server-side on S3) and record it as ``pinned``.

    The key is new for each pin (:func:`~tracker_saver.core.naming.pinned_key`: a fresh token
    under the run's ``+pinned/`` folder), and the copy never replaces an object
    (``Storage.copy``), so two pins never share bytes, whoever makes them at once. The stream's
    owner is checked first (``owner``), as a save checks it: a registry that does not own the stream writes
    nothing. The pinned record keeps the source's name, tags and metadata, plus ``pinned_from``
    (the source id) and ``extra`` (``kept_by``, ``kept_at``). ``storage`` is the source's
    (:func:`~tracker_saver.save.locate.locate` found it); the caller checked the source is loadable.

    Args:
        storage: the source's storage.
        registry: where the pinned record goes.
        source: a live, revived or pinned record.
        owner: checks (or claims) the stream's owner before the copy is written.
        extra: metadata the copy adds (why it was kept).
        reuse: return a pin of the same record made before (not an archive entry) instead of copying
            again; two processes that copy at once get one pin where the registry has transactions
            (``create_pinned(once=True)``: the later copy is deleted), else each its own bytes.
        verify: read the copy back and check its sha256 (a person's pin: the slot may be overwritten
            meanwhile by a training that runs). Without it, the copy's size is checked: for the
            saver's own keep, which holds the stream's claim, so no one else writes the slot.

    Raises:
        StreamOwnedError: another registry owns the source's stream; nothing is written.
        IntegrityError: the copy differs from the record; it is deleted and nothing is recorded.
        StorageError: the copy could not be made.
    """
    assert source.key is not None
    before = _reusable(registry, source) if reuse else None
    if before is not None:
        return before
    owner(storage, registry, source.stream_id)
    key = pinned_key(source.project, source.run, source.filename, secrets.token_hex(8))
    storage.copy(source.key, key)
    expected = Digest(source.size or 0, source.sha256 or "")
    stat = storage.stat(key)
    if verify:
        found = storage.digest(key)
    else:
        found = Digest(stat.size, expected.sha256) if stat is not None else Digest(0, "")
    if found != expected:
        storage.delete(key)
        check(
            found,
            expected,
            what=f"record {source.id} ({source.name!r}): the copy at {storage.url(key)}",
            key=key,
            record_id=source.id,
            fix="its slot was overwritten while pinning (or is corrupted); the copy was deleted; pin another record",
        )
    # A pin is no save: what the source's save cost (TIMING_KEYS) stays the source's.
    own = (*_OWN_METADATA, *TIMING_KEYS, KEPT_BY, "kept_at")
    metadata: dict[str, MetaValue] = {k: v for k, v in source.metadata.items() if k not in own}
    # A string, as record ids are everywhere; pins made before hold an int: read it with str().
    metadata["pinned_from"] = source.id
    metadata.update(extra or {})
    info = UploadInfo(
        source.project,
        source.run,
        source.stream,
        source.filename,
        name=source.name,
        metadata=metadata,
        tags=list(source.tags),
        slot=None,
        key=key,
        output_uri=source.output_uri or storage.uri,
    )
    fingerprint = stat.fingerprint if stat is not None else None
    # A failure here leaves the copy at its fresh key: an object no record names, never a record that lies.
    pinned = registry.labels.create_pinned(
        info, uri=storage.url(key), sha256=expected.sha256, size=found.size, fingerprint=fingerprint, once=reuse
    )
    if pinned.key != key:  # another process pinned the same record first: its pin is the one
        storage.delete(key)
    return pinned


def drop_pin(storage: Storage, registry: Registry, record: Record, *, unless_aliased: bool = False) -> bool:
    """Delete a pinned record, then its object unless another record still names it; whether the object went.

    The record goes first: a failure in between leaves an object, never a lie. Two unpins of
    two records that name one object (an earlier release's pin race) each see the other's
    record until it is gone, so the last one deletes the object, and never earlier. An earlier
    release's pin key that reads as a slot key may be another stream's slot (issue 51): its
    object stays.

    Args:
        storage: the record's storage (:func:`~tracker_saver.save.locate.locate`).
        registry: the record's registry.
        record: a pinned record.
        unless_aliased: leave a record that holds an alias now alone (``keep_every_max``, a refused
            gated move): on SQLite checked in the delete's transaction
            (:meth:`~tracker_saver.registry.base.Labels.delete_pinned`).

    Raises:
        RecordNotFoundError: the record is gone (another process unpinned it, and deletes its object).
        RegistryError: the record is not pinned.
    """
    if not registry.labels.delete_pinned(record.id, unless_aliased=unless_aliased):
        return False
    if record.key is None or may_be_slot_key(record.key) or _named(registry, record):
        return False
    storage.delete(record.key)
    return True


def _named(registry: Registry, record: Record) -> bool:
    """Whether a record other than ``record`` names ``record``'s key at its output_uri (all of its run's)."""
    query = Query(output_uri=record.output_uri, project=record.project, run=record.run, details=False)
    return any(r.key == record.key and r.id != record.id for r in registry.records.query(query))
