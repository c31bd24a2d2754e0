"""fsck and repair: compare what the registry says with what output_uri holds, and settle it.

:func:`check` (:mod:`tracker_saver.fsck.check`) reads only and reports each stream's problems;
:func:`repair` (:mod:`tracker_saver.fsck.repair`) fixes what it can without losing a valid
checkpoint; :mod:`tracker_saver.fsck.report` holds what both return.

Examples:
    >>> from tracker_saver.registry import open_registry
    >>> check(open_registry(":memory:")).problems
    []
"""

from tracker_saver.fsck.check import check, check_registry_file
from tracker_saver.fsck.repair import repair
from tracker_saver.fsck.report import PROBLEMS, STALE_AFTER_S, Finding, Report

__all__ = ["PROBLEMS", "STALE_AFTER_S", "Finding", "Report", "check", "check_registry_file", "repair"]
