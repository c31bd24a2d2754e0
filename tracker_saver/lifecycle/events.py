"""Events as they come: read a registry's events in order, then wait for the next ones.

The registry writes each event with its change (:class:`~tracker_saver.registry.events.Event`,
``registry.history``); ``tracker-saver events --follow`` reads them here, and
:mod:`tracker_saver.lifecycle.webhooks` relays them to a receiver.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from tracker_saver.registry.events import EVENT_TYPES, Event, HistoryLog

__all__ = ["EVENT_TYPES", "Event", "follow"]


def follow(log: HistoryLog, *, wait: Callable[[], bool], after: int = 0, project: str | None = None) -> Iterator[Event]:
    """Every event after ``after``, then each new one as it comes: read, then ``wait()`` (``False``: stop).

    ``wait`` is the clock: the CLI's sleeps a second; a test's adds events or stops, and never sleeps.

    Examples:
        >>> from tracker_saver.registry import open_registry
        >>> list(follow(open_registry(":memory:").history, wait=lambda: False))
        []
    """
    while True:
        for event in log.events(after=after, project=project):
            after = event.seq
            yield event
        if not wait():
            return
