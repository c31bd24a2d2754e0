"""A run's log files: uploaded off the training thread, listed and downloaded back.

Examples:
    >>> from tracker_saver.logs import LogUploader, download_logs, list_logs
"""

from tracker_saver.logs.read import download_logs, list_logs
from tracker_saver.logs.upload import LogUploader

__all__ = ["LogUploader", "download_logs", "list_logs"]
