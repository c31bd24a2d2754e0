"""Make ClearML's torch.save/torch.load binding skip our checkpoints (saved by us, or loaded from a view)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["skip_saves_while"]

_lock = threading.Lock()
_predicates: list[Callable[[], bool]] = []
#: Folders whose files are our checkpoints' views (the caller passes them: this module imports nothing of ours).
_views: set[Path] = set()


def _skip(callback_type: Any, model_info: Any) -> Any:
    # ClearML's binding calls this for every torch.save and torch.load it sees; returning None makes
    # it skip the file. While tracker_saver writes a slot, the checkpoint is ours: no second upload.
    if any(ours() for ours in tuple(_predicates)):
        return None
    # A load of a file in the saver's view (Ignite's own restore reads dirname / filename) would become
    # the task's input model: named after a checkpoint that eviction deletes, with no uri. Our
    # load_checkpoint reads an open file with no path, which the binding never registers.
    if getattr(callback_type, "value", callback_type) == "load" and _in_view(model_info.local_model_path):
        return None
    return model_info


def _in_view(path: object) -> bool:
    """Whether ``path`` lies in a views folder a caller named (``~/.cache/tracker_saver/checkpoints``)."""
    if not isinstance(path, str) or not path:
        return False
    resolved = Path(path).resolve()
    return any(resolved.is_relative_to(views) for views in tuple(_views))


def skip_saves_while(predicate: Callable[[], bool], *, views: Path | None = None) -> None:
    """Make ClearML's ``torch.save`` binding skip what this thread saves while ``predicate()`` is true.

    ``Task.init`` patches ``torch.save`` (``auto_connect_frameworks``) and uploads what it sees
    under its own names. This registers, once per process, a ``WeightsFileHandler``
    pre-callback — the mechanism ClearML's and Ignite's maintainers settled on — that returns
    ``None`` (skip) while any registered predicate holds. It also skips ``torch.load`` of a file in
    ``views`` (tracker_saver passes the default dirname views' folder, ``~/.cache/tracker_saver/checkpoints/``),
    which ClearML would make the task's input model; a view at a ``dirname=`` of your own is not known to it. tracker_saver passes
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
        if views is not None:
            _views.add(views.resolve())
