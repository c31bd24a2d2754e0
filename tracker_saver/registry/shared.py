"""One open registry per location for the query functions, so a loop over records reuses it."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

from tracker_saver.registry import check_exists, open_registry, sqlite_path
from tracker_saver.registry.base import Registry

__all__ = ["shared_registry"]

#: How many locations stay open at once; the least recently used one is closed.
MAX_OPEN = 4

_open: OrderedDict[str, Registry] = OrderedDict()
_lock = threading.Lock()


def shared_registry(registry: str | os.PathLike[str] | Registry | None = None, *, create: bool = True) -> Registry:
    """The open registry for ``registry`` (as :func:`open_registry` reads it), opened once.

    ``find_models``, ``get_model``, ``rename_model`` and the CLI call this, so a loop over
    records opens no new connection per call. A ``Registry`` instance is returned as it is.
    ``create=False`` (every reader) raises ``RegistryError`` for a SQLite file that does not
    exist, instead of creating an empty one.

    Examples:
        >>> shared_registry(":memory:") is shared_registry(":memory:")
        True
    """
    if isinstance(registry, Registry):
        return registry
    path = sqlite_path(registry)
    key = f"sqlite:{path}" if path is not None else f"clearml:{os.fspath(registry or '')}"
    if path is not None:
        check_exists(path, create=create)  # also when cached: the file may have been deleted since
    with _lock:
        found = _open.get(key)
        if found is not None:
            _open.move_to_end(key)
            return found
    opened = open_registry(registry)
    with _lock:
        _open[key] = opened
        while len(_open) > MAX_OPEN:
            _open.popitem(last=False)[1].close()
    return opened
