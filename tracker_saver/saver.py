"""The import path ``tracker_saver.saver`` of releases before the ``save/`` folder: ``TrackerSaver``.

Examples:
    >>> from tracker_saver.saver import TrackerSaver  # the same class as tracker_saver.TrackerSaver
"""

from tracker_saver.save.saver import TrackerSaver

__all__ = ["TrackerSaver"]
