"""Rename, tag, alias, pin, download and load records: the functions the CLI and UI wrap.

Finding records (:func:`find_models`, :func:`count_models`, :func:`get_model`,
:func:`resolve_model`, :func:`run_stats`) lives in :mod:`tracker_saver.find`; this module re-exports them, so
``tracker_saver.models`` stays the one place the CLI and the UI call. Importing this module imports neither torch nor ignite: only :func:`load_checkpoint` needs them,
so the CLI and the UI start fast.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from tracker_saver.core.errors import ConfigError, RegistryError, SerializationError
from tracker_saver.core.naming import check_name, key_ext, safe_filename
from tracker_saver.core.records import (
    LOADABLE,
    LOADABLE_OR_PINNED,
    MAX_NAME_LENGTH,
    Record,
    RecordState,
    check_alias,
    check_display_name,
    check_tags,
)
from tracker_saver.core.text import check_text
from tracker_saver.find import RegistryArg, count_models, find_models, get_model, resolve_model, run_stats
from tracker_saver.lifecycle.aliases import drop_alias, keep_alias
from tracker_saver.lifecycle.gates import Check, better
from tracker_saver.lifecycle.pins import drop_pin, is_archived, keep_copy
from tracker_saver.registry import Query
from tracker_saver.registry.shared import shared_registry
from tracker_saver.save.locate import locate
from tracker_saver.save.ownership import ensure_owner
from tracker_saver.storage import Storage
from tracker_saver.storage.verify import Digest, check, copy_checked, digest

__all__ = [
    "MAX_NAME_LENGTH",
    "add_tags",
    "copy_verified",
    "count_models",
    "download_model",
    "find_models",
    "get_model",
    "load_checkpoint",
    "open_verified",
    "pin_model",
    "remove_alias",
    "remove_tags",
    "rename_model",
    "resolve_model",
    "run_stats",
    "set_alias",
    "slot_history",
    "unpin_model",
]


def rename_model(record_id: str | int, name: str, *, registry: RegistryArg = None) -> Record:
    """Give a record a display name that later saves never overwrite.

    Raises:
        ConfigError: ``name`` is empty, longer than :data:`MAX_NAME_LENGTH` characters, or breaks the
            text rule (a control character, a bidirectional control, text that is not UTF-8).
        RecordNotFoundError: no record has that id.

    Examples:
        >>> rename_model(1, "the one we ship", registry=":memory:")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        tracker_saver.core.errors.RecordNotFoundError: record 1 does not exist
    """
    check_display_name(str(record_id), name)
    return shared_registry(registry, create=False).labels.rename(str(record_id), name)


def add_tags(record_id: str | int, tags: Sequence[str], *, registry: RegistryArg = None) -> Record:
    """Add tags to a record; returns the record with its tags.

    Examples:
        >>> add_tags(1, ["candidate"], registry=":memory:")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        tracker_saver.core.errors.RecordNotFoundError: record 1 does not exist
    """
    return shared_registry(registry, create=False).labels.add_tags(
        str(record_id), check_tags(tags, f"record {record_id}")
    )


def remove_tags(record_id: str | int, tags: Sequence[str], *, registry: RegistryArg = None) -> Record:
    """Remove tags from a record (one it does not have is no error); returns the record.

    Examples:
        >>> remove_tags(1, ["candidate"], registry=":memory:")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        tracker_saver.core.errors.RecordNotFoundError: record 1 does not exist
    """
    return shared_registry(registry, create=False).labels.remove_tags(
        str(record_id), check_tags(tags, f"record {record_id}")
    )


def set_alias(
    record_id: str | int,
    alias: str,
    *,
    registry: RegistryArg = None,
    storage_options: Mapping[str, Any] | None = None,
    require: str | Check | None = None,
) -> Record:
    """Point the user alias ``alias`` of the record's project at a loadable record; returns the record it names.

    An alias is unique per project: setting it again moves it. ``latest`` and ``best`` are
    derived from record states and cannot be set. An alias never dangles: set on a live slot
    record, which a later save would evict, it pins the checkpoint first (as :func:`pin_model`,
    with ``kept_by="alias <name>"``) and goes on the pinned record, which is returned. Set on a
    pinned record, it is just set. See :mod:`tracker_saver.lifecycle.aliases`.

    ``require``, a promotion gate: a metadata key (``"score"``: higher than the holder's wins) or a
    ``lifecycle.gates.Check`` (``better("loss", lower=True)``). The record named is checked before
    a slot record is pinned (a refused gate copies nothing); the move itself is a compare-and-set
    (on SQLite, checked again and moved in one transaction).

    Raises:
        ConfigError: a derived or malformed alias (``[A-Za-z0-9][A-Za-z0-9_.-]{0,63}``); nothing is copied.
        RegistryError: the record is not loadable.
        IntegrityError: the slot was overwritten while it was copied; the copy is deleted, nothing is aliased.
        PromotionRefusedError: ``require`` refused; the message names both records and their values.

    Examples:
        >>> set_alias(1, "production", registry=":memory:")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        tracker_saver.core.errors.RecordNotFoundError: record 1 does not exist
    """
    check = better(require) if isinstance(require, str) else require
    check_alias(alias)  # before the registry is opened: a bad alias needs no registry to be refused
    reg = shared_registry(registry, create=False)
    return keep_alias(
        reg,
        reg.records.get(str(record_id)),
        alias,
        locate=lambda record: locate(record, storage_options=storage_options)[0],
        owner=ensure_owner,
        check=check,
    )


def remove_alias(project: str, alias: str, *, registry: RegistryArg = None) -> Record | None:
    """Delete the user alias ``alias`` of ``project``; returns the record it named (``None`` if gone).

    A pinned copy that the alias made stays pinned: :func:`unpin_model` deletes it.

    Raises:
        RecordNotFoundError: the project has no such alias.

    Examples:
        >>> remove_alias("mnist", "production", registry=":memory:")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        tracker_saver.core.errors.RecordNotFoundError: project 'mnist' has no alias 'production'
    """
    project, alias = check_name("project", project), check_text("alias", alias)
    return drop_alias(shared_registry(registry, create=False), project, alias)


def slot_history(record: Record, *, registry: RegistryArg = None) -> list[Record]:
    """Every record that used ``record``'s slot of its stream, oldest first (a pinned one: itself).

    Examples:
        >>> from tracker_saver.core.records import Record, RecordState
        >>> pinned = Record("7", "p", "r", "s", "s_1.pt", "s_1.pt", RecordState.PINNED, None, "k", "u")
        >>> [r.id for r in slot_history(pinned, registry=":memory:")]
        ['7']
    """
    if record.slot is None:
        return [record]
    query = Query(
        output_uri=record.output_uri, project=record.project, run=record.run, stream=record.stream, slot=record.slot
    )
    return shared_registry(registry, create=False).records.query(query)


def _check_loadable(record: Record, states: Sequence[RecordState] = LOADABLE_OR_PINNED) -> None:
    if record.state not in states or record.key is None or record.uri is None:
        raise RegistryError(
            f"record {record.id} ({record.name!r}) is {record.state.value}: its slot may hold other bytes; "
            "use a live record (tracker-saver models list --live)",
            record_id=record.id,
        )


def download_model(
    record_or_ref: Record | str | int,
    dest: str | os.PathLike[str],
    *,
    registry: RegistryArg = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Path:
    """Copy a loadable record's object to a local file, verifying its sha256 while it streams.

    The bytes go to a temp file next to the target, which is renamed into place only once size
    and sha256 match the record: nothing half-written or wrong is ever left at the target.

    Args:
        record_or_ref: a record, or a reference as :func:`resolve_model` reads it.
        dest: a file path in an existing folder, or a folder (a path ending in ``/`` is made if its
            parent exists, as ``mkdir`` makes one): then the file is
            ``dest/<record name>`` as a safe slug (letters, digits, ``._-=``) with the extension
            of the checkpoint's filename: ``the one we ship`` is ``the_one_we_ship.pt``.
        registry: where to resolve a reference.
        storage_options: options for the record's storage (S3 endpoint, profile, …).

    Returns:
        The path written.

    Raises:
        RegistryError: the record is not loadable.
        IntegrityError: the bytes differ from the record (the partial file is deleted).
        StorageError: the object cannot be read.

    Examples:
        >>> download_model("12", "/tmp", registry=":memory:")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        tracker_saver.core.errors.RecordNotFoundError: record 12 does not exist
    """
    record = record_or_ref if isinstance(record_or_ref, Record) else resolve_model(record_or_ref, registry=registry)
    _check_loadable(record)
    assert record.key is not None
    target = Path(dest).expanduser()
    if not target.is_dir() and os.fspath(dest).endswith(("/", os.sep)):
        with contextlib.suppress(FileNotFoundError):  # its own folder, never a tree: copy_checked says what is missing
            target.mkdir()
    if target.is_dir() or os.fspath(dest).endswith(("/", os.sep)):
        target = target / safe_filename(record.name, key_ext(record.filename))
    return copy_verified(locate(record, storage_options=storage_options)[0], record, target)


def copy_verified(storage: Storage, record: Record, target: Path) -> Path:
    """Copy a loadable record's object (from ``storage`` when it is the record's) to the local file ``target``,
    verified as it streams.

    Nothing half-written or wrong is ever left at ``target`` (:func:`~tracker_saver.storage.verify.copy_checked`).

    Raises:
        ConfigError: ``target``'s folder does not exist or cannot be written.
        IntegrityError: the object differs from the record (nothing is written).
        StorageError: the object cannot be read.
    """
    storage, key = locate(record, storage=storage)
    with storage.get(key) as src:
        return copy_checked(
            src,
            target,
            _expected(record),
            what=_what(record),
            label=record.name,
            key=record.key,
            record_id=record.id,
            fix="the object was probably overwritten or corrupted; nothing was written; download another record",
        )


def _expected(record: Record) -> Digest:
    return Digest(record.size or 0, record.sha256 or "")


def _what(record: Record) -> str:
    """How a verification error names the bytes it read: ``record 5 ('best.pt'): s3://b/p/r/best.slot0.pt``."""
    return f"record {record.id} ({record.name!r}): {record.uri}"


def pin_model(
    record_id: str | int, *, registry: RegistryArg = None, storage_options: Mapping[str, Any] | None = None
) -> Record:
    """Copy a live record out of its slot to ``<project>/<run>/+pinned/<token>-<filename>``, as a new pinned record.

    The copy is server-side on S3 (CopyObject) and a file copy locally; its sha256 is read back
    and checked before the record is created. Its key is new for each pin (``token``: random hex),
    so two pins never share bytes; two processes that pin one record at once get one pin on
    SQLite (the later copy is deleted), and at worst two, each with its own bytes, on MLflow and
    ClearML. The stream's owner is checked first, as a save checks it.
    The pinned record keeps the source's name, tags and metadata, plus ``pinned_from`` (the
    source id). Eviction, slots, resume and recovery never touch it; :func:`unpin_model` deletes
    it. Pinning a pinned record returns it, but for an archive entry (``keep_every``), which
    ``keep_every_max`` may delete: that gets a copy of your own.

    Raises:
        RegistryError: the record is not live, revived or an archive entry.
        IntegrityError: the copy differs from the record (the source slot was overwritten
            meanwhile); the copy is deleted.
        StreamOwnedError: another registry owns the record's stream at its output_uri; nothing is written.

    Examples:
        >>> pin_model(12, registry=":memory:")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        tracker_saver.core.errors.RecordNotFoundError: record 12 does not exist
    """
    reg = shared_registry(registry, create=False)
    source = reg.records.get(str(record_id))
    if source.state is RecordState.PINNED and not is_archived(source):
        return source
    _check_loadable(source, LOADABLE_OR_PINNED if is_archived(source) else LOADABLE)
    storage, _ = locate(source, storage_options=storage_options)
    return keep_copy(storage, reg, source, owner=ensure_owner)


def unpin_model(
    record_id: str | int, *, registry: RegistryArg = None, storage_options: Mapping[str, Any] | None = None
) -> bool:
    """Delete a pinned record and then its object (a failure in between leaves an object, never a lie).

    The object stays when another record still names it (two pins an earlier release made at
    once share one) or when its key, an earlier release's, may be another stream's slot
    (:func:`~tracker_saver.lifecycle.pins.drop_pin`). Returns whether the object was deleted.

    Raises:
        RegistryError: the record is not pinned (slot records are history, never deleted).

    Examples:
        >>> unpin_model(12, registry=":memory:")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        tracker_saver.core.errors.RecordNotFoundError: record 12 does not exist
    """
    reg = shared_registry(registry, create=False)
    record = reg.records.get(str(record_id))
    if record.state is not RecordState.PINNED or record.key is None or record.uri is None:
        raise RegistryError(
            f"record {record.id} ({record.name!r}) is {record.state.value}, not pinned: only a pinned record can "
            "be unpinned; pin one with pin_model / `tracker-saver models pin`",
            record_id=record.id,
        )
    storage, _ = locate(record, storage_options=storage_options)
    return drop_pin(storage, reg, record)


@contextlib.contextmanager
def open_verified(
    record: Record, *, storage: Storage | None = None, storage_options: Mapping[str, Any] | None = None
) -> Iterator[BinaryIO]:
    """Open a loadable record's slot object, positioned at 0, after checking size and sha256.

    The bytes are read once to hash them and once by the caller (from the page cache locally,
    from the download's spool file on S3): no second copy in memory.

    Raises:
        RegistryError: the record is not live (its slot may hold other bytes).
        IntegrityError: the bytes differ from the record: the slot was overwritten or corrupted.
    """
    _check_loadable(record)
    assert record.key is not None
    storage, _ = locate(record, storage=storage, storage_options=storage_options)
    with storage.get(record.key) as src:
        check(
            digest(src),
            _expected(record),
            what=_what(record),
            key=record.key,
            record_id=record.id,
            fix="the slot was probably overwritten or corrupted; load another record",
        )
        src.seek(0)
        yield src


def load_checkpoint(
    record: Record | str | int,
    to_load: Mapping[str, Any],
    *,
    registry: RegistryArg = None,
    storage: Storage | None = None,
    storage_options: Mapping[str, Any] | None = None,
    map_location: Any = "cpu",
    weights_only: bool = True,
) -> Record:
    """Verify a record's bytes (size, sha256), then load them into ``to_load``'s objects.

    Args:
        record: a record or its id.
        to_load: ``{"model": model, "optimizer": opt, ...}`` as given to ``Checkpoint``.
        registry: where to find ``record`` when an id is given.
        storage: an open storage to read from (e.g. ``saver.storage``), if it holds the record.
        storage_options: options for opening the record's storage (S3 endpoint, profile, …).
        map_location: passed to ``torch.load``.
        weights_only: passed to ``torch.load``; Ignite state dicts load with ``True``.

    Returns:
        The record that was loaded.

    Raises:
        RecordNotFoundError: no record has that id.
        RegistryError: the record is not loadable (evicted, failed, pending).
        IntegrityError: the slot's bytes differ from the record (truncated, overwritten, bit-flipped).
        SerializationError: ``torch.load`` failed (with ``map_location=None``, CUDA tensors on a
            machine without CUDA; the message says to pass ``map_location="cpu"``).
        ConfigError: ``to_load`` does not fit the checkpoint (a key is missing, a module has other
            shapes or parameters); raised before anything is loaded into a module.

    Examples:
        >>> load_checkpoint("17", {"model": None}, registry=":memory:")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        tracker_saver.core.errors.RecordNotFoundError: record 17 does not exist
    """
    import torch  # here, not at module level: finding and downloading records needs no torch
    from ignite.handlers import Checkpoint

    if not isinstance(record, Record):
        record = shared_registry(registry, create=False).records.get(str(record))
    with open_verified(record, storage=storage, storage_options=storage_options) as f:
        try:
            checkpoint = torch.load(f, map_location=map_location, weights_only=weights_only)
        except Exception as exc:
            message = f"torch.load could not read record {record.id} ({record.name!r}): {exc}"
            if "cuda" in str(exc).lower() and not torch.cuda.is_available():
                message += (
                    "; the checkpoint holds CUDA tensors and this machine has no CUDA: load it with "
                    "map_location='cpu' (load_checkpoint's default)"
                )
            raise SerializationError(message) from exc
    label = f"record {record.id} ({record.name!r})"
    _check_fit(label, to_load, checkpoint)
    try:
        Checkpoint.load_objects(to_load=to_load, checkpoint=checkpoint)
    except (KeyError, RuntimeError, TypeError, ValueError) as exc:
        raise ConfigError(f"{label} could not be loaded into to_load {sorted(to_load)}: {exc}") from exc
    return record


def _check_fit(label: str, to_load: Mapping[str, Any], checkpoint: Any) -> None:
    """Raise ``ConfigError`` before anything is loaded when a module in ``to_load`` does not fit.

    ``load_state_dict`` copies the tensors that fit before it raises for those that do not, so a
    model of the wrong shape would be left half loaded: compare keys and shapes first. Which
    entry of the checkpoint each object gets follows ``Checkpoint.load_objects``.
    """
    import torch
    from torch.nn.parallel import DistributedDataParallel

    if not isinstance(checkpoint, Mapping):
        return
    single = len(to_load) == 1 and next(iter(to_load)) not in checkpoint
    problems: list[str] = []
    for key, obj in to_load.items():
        if not single and key not in checkpoint:
            problems.append(f"to_load[{key!r}] is not in the checkpoint, which holds {sorted(checkpoint)}")
            continue
        state = checkpoint if single else checkpoint[key]
        module = obj.module if isinstance(obj, (torch.nn.DataParallel, DistributedDataParallel)) else obj
        if not isinstance(module, torch.nn.Module) or not isinstance(state, Mapping):
            continue
        expected = module.state_dict()
        wrong = [
            f"{name} is {tuple(state[name].shape)} in the checkpoint, {tuple(tensor.shape)} in the model"
            for name, tensor in expected.items()
            if name in state and hasattr(state[name], "shape") and tuple(state[name].shape) != tuple(tensor.shape)
        ]
        missing = sorted(set(expected) - set(state))
        unexpected = sorted(set(state) - set(expected))
        if missing:
            wrong.append(f"missing {', '.join(missing)}")
        if unexpected:
            wrong.append(f"unexpected {', '.join(unexpected)}")
        if wrong:
            problems.append(f"to_load[{key!r}] ({type(module).__name__}): {'; '.join(wrong)}")
    if problems:
        raise ConfigError(
            f"{label} does not fit to_load, so nothing was loaded: {' | '.join(problems)}: build the objects "
            "as they were when the checkpoint was saved, or load another record"
        )
