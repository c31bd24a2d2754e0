"""Resume a run: load its newest checkpoint and rebuild ``Checkpoint`` handlers from the registry."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ignite.handlers import Checkpoint

from tracker_saver.core.errors import ConfigError
from tracker_saver.core.records import LOADABLE, Record
from tracker_saver.models import load_checkpoint
from tracker_saver.registry.base import stream_query
from tracker_saver.save.distributed import share_outcome
from tracker_saver.save.saver import TrackerSaver

__all__ = ["resume", "stream_of"]


def stream_of(handler: Checkpoint) -> str:
    """The stream (Ignite basename) a ``Checkpoint`` writes: ``{filename_prefix}_{name}``.

    ``name`` is the single key of ``to_save``, or ``checkpoint`` when there are several,
    exactly as ``Checkpoint.__call__`` computes it.
    """
    name = next(iter(handler.to_save)) if len(handler.to_save) == 1 else "checkpoint"
    return f"{handler.filename_prefix}_{name}" if handler.filename_prefix else name


def resume(
    saver: TrackerSaver,
    to_load: Mapping[str, Any],
    handlers: Sequence[Checkpoint] = (),
    *,
    stream: str = "checkpoint",
    **load_kwargs: Any,
) -> Record | None:
    """Continue a run in a new process, as if it had never stopped.

    1. Loads the newest live record of ``stream`` in ``saver``'s run into ``to_load``
       (model, optimizer, trainer, …), with sha256 verified.
    2. Rebuilds each handler's ``_saved`` list from its stream's live records (the best
       ``n_saved`` by priority) and tells the saver those records are *adopted*: Ignite's own
       ``remove`` calls then drive eviction exactly as without the restart.

    Live records that no handler adopts stay *inherited*: new saves reuse their slots first.

    In distributed training call it on every rank (it is a collective): the saving rank claims
    the streams and settles what a killed writer left, then every rank reads the same records,
    loads the same checkpoint and rebuilds the same ``_saved``, so all ranks' ``Checkpoint``
    handlers keep making the same decisions. The other ranks only read the registry.

    Args:
        saver: the ``TrackerSaver`` the handlers write through (same output_uri, registry, run).
        to_load: objects to restore from the newest ``stream`` checkpoint.
        handlers: the ``Checkpoint`` handlers to restore.
        stream: which stream holds the full training state (Ignite's default: ``checkpoint``).
        load_kwargs: passed to :func:`load_checkpoint` (``map_location``, ``weights_only``…).

    Returns:
        The loaded record, or ``None`` when the run has no live record of ``stream`` yet.

    Examples:
        >>> import tempfile, torch
        >>> root = tempfile.mkdtemp()
        >>> saver = TrackerSaver(root + "/out", run="r", registry=root + "/reg.db")
        >>> resume(saver, {"model": torch.nn.Linear(2, 1)}) is None
        True
    """
    for handler in handlers:
        if handler.save_handler is not saver:
            raise ConfigError(
                f"Checkpoint handler for stream {stream_of(handler)!r} saves through "
                f"{handler.save_handler!r}, not this TrackerSaver: pass the handlers built with it"
            )

    def claim() -> None:  # claim first: recovery settles what a killed writer left
        for handler in handlers:
            saver.adopt(stream_of(handler), ())

    # The other ranks read only once the saving rank's recovery is done, so all see one state.
    share_outcome(claim, src=saver.save_on_rank, what="resume's stream claims")
    latest = saver.registry.records.query(stream_query(saver.stream_id(stream), states=LOADABLE))
    record = latest[-1] if latest else None
    if record is not None:
        load_checkpoint(record, to_load, storage=saver.storage, **load_kwargs)
    for handler in handlers:
        name = stream_of(handler)
        live = saver.registry.records.query(stream_query(saver.stream_id(name), states=LOADABLE))
        # Stable sort by priority alone, as Ignite sorts _saved: ties keep save order.
        items = sorted(((_priority(r), r.filename) for r in live), key=lambda item: item[0])
        if handler.n_saved is not None:
            items = items[len(items) - handler.n_saved :] if len(items) > handler.n_saved else items
        handler.load_state_dict({"_saved": items})
        saver.adopt(name, [filename for _, filename in items])
    return record


def _priority(record: Record) -> float | int:
    # The exact priority Ignite compared, ±inf included; a NaN score was recorded as absent
    # and ranks lowest, so it is the first Ignite replaces.
    value = record.metadata.get("priority")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return -math.inf
