"""fsck and repair: compare what the registry says with what output_uri holds, and settle it.

``check`` reads only. Per stream it finds lies (a loadable record whose object is missing or
differs), pending records of a dead writer, revivable records (not live, bytes still in their
slot), orphans (slot objects no record claims), leftover temp files and multipart uploads, and
streams holding more objects than live records. Sizes are compared first; an object is hashed
only when a decision needs it, or for every loadable record with ``deep=True``. An output_uri
that cannot be opened or read (an endpoint down, refused credentials) makes each of its
streams an ``unreachable`` finding, and the check goes on with the other output_uris.

``repair`` fixes what it can without losing a valid checkpoint, through the start-up recovery
code (:func:`tracker_saver.save.recovery.recover_slot`), holding each stream's claim. A stream
that a live process writes is reported and left alone.

Examples:
    >>> import tempfile
    >>> from tracker_saver.registry import open_registry
    >>> check(open_registry(":memory:")).problems
    []
"""

from tracker_saver.fsck.check import check
from tracker_saver.fsck.repair import repair
from tracker_saver.fsck.report import PROBLEMS, STALE_AFTER_S, Finding, Report

__all__ = ["PROBLEMS", "STALE_AFTER_S", "Finding", "Report", "check", "repair"]
