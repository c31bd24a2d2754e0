"""Make ClearML's ``torch.save`` binding skip every file saved while a predicate holds."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["skip_saves_while"]

_lock = threading.Lock()
_predicates: list[Callable[[], bool]] = []


def _skip(callback_type: Any, model_info: Any) -> Any:
    # ClearML's binding calls this for every torch.save it sees; returning None makes it skip
    # the file. While tracker_saver writes a slot, the checkpoint is ours: no second upload.
    return None if any(ours() for ours in tuple(_predicates)) else model_info


def skip_saves_while(predicate: Callable[[], bool]) -> None:
    """Make ClearML's ``torch.save`` binding skip what this thread saves while ``predicate()`` is true.

    ``Task.init`` patches ``torch.save`` (``auto_connect_frameworks``) and uploads what it sees
    under its own names. This registers, once per process, a ``WeightsFileHandler``
    pre-callback — the mechanism ClearML's and Ignite's maintainers settled on — that returns
    ``None`` (skip) while any registered predicate holds. tracker_saver passes
    :func:`tracker_saver.save.pipeline.is_writing` (see ``tracker_saver.clearml.guard_torch_save_binding``).

    Examples:
        >>> from tracker_saver.save.pipeline import is_writing
        >>> skip_saves_while(is_writing); skip_saves_while(is_writing)  # idempotent
    """
    from clearml.binding.frameworks import WeightsFileHandler

    with _lock:
        if not _predicates:
            WeightsFileHandler.add_pre_callback(_skip)
        if predicate not in _predicates:
            _predicates.append(predicate)
