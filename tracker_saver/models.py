"""Find, rename and load checkpoint records: the public functions the CLI is a thin layer over."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, BinaryIO

import torch
from ignite.handlers import Checkpoint
from torch.nn.parallel import DistributedDataParallel

from tracker_saver.errors import ConfigError, IntegrityError, RegistryError, SerializationError
from tracker_saver.query import parse_order, parse_where
from tracker_saver.records import LOADABLE, Record, RecordState
from tracker_saver.registry import Query, Registry
from tracker_saver.registry.shared import shared_registry
from tracker_saver.storage import Storage, open_storage
from tracker_saver.storage.base import sha256_of

__all__ = ["find_models", "get_model", "load_checkpoint", "open_verified", "rename_model"]


def find_models(
    *,
    project: str | None = None,
    run: str | None = None,
    stream: str | None = None,
    where: Mapping[str, Any] | Sequence[str] | str | None = None,
    order_by: str | Sequence[str] | None = None,
    live: bool | None = None,
    states: Sequence[RecordState | str] | None = None,
    limit: int | None = None,
    registry: str | os.PathLike[str] | Registry | None = None,
) -> list[Record]:
    """Records matching metadata conditions, sorted by any key.

    Args:
        project: only this project.
        run: only this run.
        stream: only this stream (Ignite basename, e.g. ``best_model``).
        where: ``{"score": (">", 0.9), "prefix": "best", "global_step": ("in", [10, 20])}``, or
            expressions such as ``"score>0.9"`` (see ``tracker_saver.query``).
        order_by: a key or list of keys, ``-`` for descending (``"-score"``).
        live: ``True``: only loadable records (live or revived); ``False``: only the others.
        states: only these states (overrides ``live``).
        limit: at most this many.
        registry: which registry (default as in :func:`open_registry`); one connection per
            location is kept open and reused by every call.

    Examples:
        >>> find_models(project="nothing-here", registry=":memory:")
        []
    """
    wanted: tuple[RecordState, ...] | None = None
    if states is not None:
        wanted = tuple(RecordState(s) for s in states)
    elif live is not None:
        wanted = LOADABLE if live else tuple(s for s in RecordState if s not in LOADABLE)
    query = Query(
        project=project,
        run=run,
        stream=stream,
        states=wanted,
        where=parse_where(where),
        order_by=parse_order(order_by),
        limit=limit,
    )
    return shared_registry(registry).query(query)


def get_model(record_id: str | int, *, registry: str | os.PathLike[str] | Registry | None = None) -> Record:
    """The record with ``record_id`` (``RecordNotFoundError`` if none)."""
    return shared_registry(registry).get(str(record_id))


def rename_model(
    record_id: str | int, name: str, *, registry: str | os.PathLike[str] | Registry | None = None
) -> Record:
    """Give a record a display name that later saves never overwrite.

    Examples:
        >>> rename_model(1, "the one we ship", registry=":memory:")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        tracker_saver.errors.RecordNotFoundError: record 1 does not exist
    """
    return shared_registry(registry).rename(str(record_id), name)


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
    if record.state not in LOADABLE or record.key is None or record.uri is None:
        raise RegistryError(
            f"record {record.id} ({record.name!r}) is {record.state.value}: its slot may hold other bytes; "
            "load a live record (tracker-saver models list --live)",
            record_id=record.id,
        )
    if storage is None or storage.url(record.key) != record.uri:
        storage = open_storage(record.uri[: -len(record.key) - 1], **dict(storage_options or {}))
    with storage.get(record.key) as src:
        size, sha256 = sha256_of(src)
        if size != record.size or sha256 != record.sha256:
            raise IntegrityError(
                f"record {record.id} ({record.name!r}): {record.uri} has {size} bytes with sha256 "
                f"{sha256[:12]}…, the record says {record.size} bytes, {str(record.sha256)[:12]}…: "
                "the slot was probably overwritten or corrupted; load another record",
                key=record.key,
                record_id=record.id,
            )
        src.seek(0)
        yield src


def load_checkpoint(
    record: Record | str | int,
    to_load: Mapping[str, Any],
    *,
    registry: str | os.PathLike[str] | Registry | None = None,
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
        >>> load_checkpoint("17", {"model": torch.nn.Linear(2, 1)}, registry=":memory:")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        tracker_saver.errors.RecordNotFoundError: record 17 does not exist
    """
    if not isinstance(record, Record):
        record = shared_registry(registry).get(str(record))
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
