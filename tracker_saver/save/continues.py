"""What a saver says at start when it continues streams that an earlier process left live checkpoints in.

A second process with the same output_uri, project and run continues the earlier one's streams:
its saves reuse their slots (DESIGN, "Slots across restarts"), so the earlier live checkpoints
are replaced, oldest first. That is the point of a resume, and a surprise to someone who reran a
script: so the saver says it once, at INFO, with what it will keep. An aliased record is kept as
a pin when its slot is reused (:mod:`tracker_saver.lifecycle.aliases`); a renamed record is not:
its name is kept on the evicted record, its bytes are replaced, so the line names it and the
command that keeps it.

Examples:
    >>> from tracker_saver.core.records import UploadInfo
    >>> from tracker_saver.registry import open_registry
    >>> reg = open_registry(":memory:")
    >>> info = UploadInfo("p", "r", "best", "best_3.pt", slot=0, key="p/r/best.slot0.pt", output_uri="file:///o")
    >>> record = reg.records.create_pending(info, uri="file:///o/p/r/best.slot0.pt")
    >>> _ = reg.records.make_live(record.id, sha256="0" * 64, size=1)
    >>> print(continued(reg, "file:///o", "p", "r"))  # doctest: +NORMALIZE_WHITESPACE
    p/r continues run 'r' at file:///o: its next saves replace 1 live checkpoint of an earlier
    process (best: 1), oldest first; an aliased one is kept as a pin, a renamed one is not
"""

from __future__ import annotations

from collections import Counter

from tracker_saver.core.records import DERIVED_ALIASES, LOADABLE, Record
from tracker_saver.core.text import escape
from tracker_saver.registry import Query, Registry

__all__ = ["continued"]


def continued(registry: Registry, output_uri: str, project: str, run: str) -> str | None:
    """The start-up line for the live slot records of run ``project/run`` at ``output_uri``; ``None`` without any.

    Runs before the saver's first save, so every live record it finds is an earlier process's
    (or, in another stream, a live saver's beside it: the line names the streams).
    """
    live = registry.records.query(Query(output_uri=output_uri, project=project, run=run, states=LOADABLE))
    if not live:
        return None
    streams = ", ".join(f"{stream}: {n}" for stream, n in sorted(Counter(r.stream for r in live).items()))
    many = "s" if len(live) > 1 else ""
    line = (
        f"{project}/{run} continues run {run!r} at {output_uri}: its next saves replace {len(live)} live "
        f"checkpoint{many} of an earlier process ({streams}), oldest first; an aliased one is kept as a pin, "
        "a renamed one is not"
    )
    renamed = [r for r in live if r.name != r.filename and not _aliased(r)]
    if renamed:
        shown = ", ".join(f"record {r.id} ({r.name!r})" for r in renamed)
        line += f" ({shown}: to keep one, `tracker-saver models pin ID` or alias it first)"
    return escape(line)


def _aliased(record: Record) -> bool:
    """Whether ``record`` holds a user alias (kept as a pin at eviction), not only ``best``/``latest``."""
    return any(alias not in DERIVED_ALIASES for alias in record.aliases)
