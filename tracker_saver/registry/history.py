"""The import path ``tracker_saver.registry.history`` of releases before ``lifecycle/``: its names, re-exported.

The registry's part is :mod:`tracker_saver.registry.events`; retention, gates and following
events are :mod:`tracker_saver.lifecycle`'s. Nothing in the package imports this module (which
would be an import up a floor): it is kept only so that users' imports keep working.

Examples:
    >>> from tracker_saver.registry.history import Retention, better  # as tracker_saver.lifecycle.* have them
"""

from tracker_saver.lifecycle.events import follow
from tracker_saver.lifecycle.gates import better, move_alias
from tracker_saver.lifecycle.retention import Retention, parse_age
from tracker_saver.registry.events import (
    EVENT_TYPES,
    Check,
    DeadEvent,
    Event,
    HistoryLog,
    Outbox,
    Pruned,
    history_of,
    refused,
)

__all__ = [
    "EVENT_TYPES",
    "Check",
    "DeadEvent",
    "Event",
    "HistoryLog",
    "Outbox",
    "Pruned",
    "Retention",
    "better",
    "follow",
    "history_of",
    "move_alias",
    "parse_age",
    "refused",
]
