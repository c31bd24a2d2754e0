"""The one place that reads an Ignite ``Engine``'s internals: its handlers per event.

Ignite has no public way to count an event's handlers or to order them (``_event_handlers``,
a dict of event → ``[(handler, args, kwargs), ...]``, in pytorch-ignite 0.4 and 0.5).
:mod:`tracker_saver.logs.upload` needs both; it asks here, and ``tests/test_ignite_engine.py`` checks
this against the installed Ignite, so an upgrade that changes the internals fails there, with
this module named, rather than somewhere inside a training.

Examples:
    >>> from ignite.engine import Engine, Events
    >>> engine = Engine(lambda e, b: None)
    >>> _ = engine.add_event_handler(Events.EXCEPTION_RAISED, print)
    >>> handler_count(engine, Events.EXCEPTION_RAISED)
    1
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracker_saver.core.errors import ConfigError

if TYPE_CHECKING:
    from ignite.engine import Engine

__all__ = ["handler_count", "run_last_added_before_save_handlers"]


def _handlers(engine: Engine, event: Any) -> list[tuple[Any, ...]]:
    table = getattr(engine, "_event_handlers", None)
    if not isinstance(table, dict):
        raise ConfigError(
            "this pytorch-ignite's Engine keeps no _event_handlers dict: tracker_saver/save/ignite_engine.py needs "
            "updating for it (pip install 'pytorch-ignite>=0.5,<0.6' meanwhile)"
        )
    return table.get(event, [])  # type: ignore[no-any-return]


def handler_count(engine: Engine, event: Any) -> int:
    """How many handlers ``engine`` runs on ``event``."""
    return len(_handlers(engine, event))


def run_last_added_before_save_handlers(engine: Engine, event: Any) -> None:
    """Move the handler added last for ``event`` before the first one bound to a save handler."""
    from ignite.handlers.checkpoint import BaseSaveHandler

    handlers = _handlers(engine, event)
    savers = [i for i, h in enumerate(handlers) if isinstance(getattr(h[0], "__self__", None), BaseSaveHandler)]
    if savers:
        handlers.insert(savers[0], handlers.pop())
