"""Thread pools the package shares, each created on first use (never at import)."""

from __future__ import annotations

import concurrent.futures
import threading

__all__ = ["shared_pool"]

_pools: dict[str, concurrent.futures.ThreadPoolExecutor] = {}
_lock = threading.Lock()


def shared_pool(name: str) -> concurrent.futures.ThreadPoolExecutor:
    """The one-thread pool called ``name`` (its thread's name prefix), created on first use.

    One thread per job keeps its work in submission order (a writer's hash updates, say).

    Examples:
        >>> shared_pool("tracker-saver-doc") is shared_pool("tracker-saver-doc")
        True
        >>> shared_pool("tracker-saver-doc").submit(sum, [1, 2]).result()
        3
    """
    with _lock:
        pool = _pools.get(name)
        if pool is None:
            pool = _pools[name] = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        return pool
