"""One open registry per location for the query functions, so a loop over records reuses it.

What is still open at the interpreter's exit is closed by an ``atexit`` handler: a SQLite
registry then checkpoints and removes its ``-wal``/``-shm`` files even in a process that ends
without the interpreter's own finalization (a worker forked from a preloaded server, say).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import weakref
from collections import OrderedDict

from tracker_saver.registry import check_exists, open_registry, parse_registry
from tracker_saver.registry.base import Registry

__all__ = ["shared_registry"]

#: How many locations stay open at once though no caller holds them (least recently used go first).
MAX_OPEN = 4

#: The MAX_OPEN most recently used registries, held open by this cache.
_recent: OrderedDict[str, Registry] = OrderedDict()
#: Every registry handed out and still referenced anywhere: one per location, never closed here.
_alive: weakref.WeakValueDictionary[str, Registry] = weakref.WeakValueDictionary()
_lock = threading.Lock()  # guards the two maps and _opening
_opening: dict[str, threading.Lock] = {}  # one lock per location: it opens once, others wait for it


def shared_registry(registry: str | os.PathLike[str] | Registry | None = None, *, create: bool = True) -> Registry:
    """The open registry for ``registry`` (as :func:`open_registry` reads it), opened once.

    ``find_models``, ``get_model``, ``rename_model`` and the CLI call this, so a loop over
    records opens no new connection per call. A ``Registry`` instance is returned as it is.
    ``create=False`` (every reader) raises ``RegistryError`` for a SQLite file that does not
    exist, instead of creating an empty one.

    Thread-safe: threads asking for one location at once get one registry, opened once. The
    cache never closes a registry: one that leaves the ``MAX_OPEN`` most recent stays open for
    as long as a caller holds it (and is handed out again meanwhile), then closes with its
    last reference.

    Examples:
        >>> shared_registry(":memory:") is shared_registry(":memory:")
        True
    """
    if isinstance(registry, Registry):
        return registry
    spec = parse_registry(registry)
    key = spec.key
    if spec.kind == "sqlite":
        check_exists(spec.location or "", create=create)  # also when cached: the file may have been deleted since
    with _lock:
        found = _cached(key)
        if found is not None:
            return found
        opening = _opening.setdefault(key, threading.Lock())
    with opening:  # a slow open (ClearML) of one location holds up no other location
        with _lock:
            found = _cached(key)
        if found is None:
            found = open_registry(registry, create=create)
            with _lock:
                _keep(key, found)
    return found


def _cached(key: str) -> Registry | None:
    """The registry open for ``key``, made the most recent; ``None`` if none is. Call under ``_lock``."""
    found = _recent.get(key) or _alive.get(key)
    if found is not None:
        _keep(key, found)
    return found


def _keep(key: str, registry: Registry) -> None:
    """Hold ``registry`` as the most recent; the oldest beyond ``MAX_OPEN`` is let go, not closed."""
    _alive[key] = registry
    _recent[key] = registry
    _recent.move_to_end(key)
    while len(_recent) > MAX_OPEN:
        _recent.popitem(last=False)


@atexit.register
def _close_at_exit() -> None:
    """Close every registry this cache handed out that is still open (errors at exit are not raised)."""
    with _lock:
        opened = {id(r): r for r in [*_recent.values(), *_alive.values()]}.values()
        _recent.clear()
        _alive.clear()
    for registry in opened:
        with contextlib.suppress(Exception):
            registry.close()
