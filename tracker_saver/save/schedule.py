"""The import path ``tracker_saver.save.schedule`` of releases before ``lifecycle/``: ``KeepEvery``.

Examples:
    >>> from tracker_saver.save.schedule import KeepEvery  # the same class as tracker_saver.lifecycle.schedule's
"""

from tracker_saver.lifecycle.schedule import KeepEvery, check_keep_every

__all__ = ["KeepEvery", "check_keep_every"]
