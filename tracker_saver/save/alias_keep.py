"""An alias never dangles, whoever set it: before a save evicts an aliased slot record, its bytes are pinned.

``set_alias`` pins a slot record when this release sets an alias on it
(:mod:`tracker_saver.lifecycle.keep`). An alias set another way stays on the slot record: one set
by an earlier release (0.1.0 aliased slot records as they were), by the registry's own API, by a
tracker's web UI or SDK. So the save that replaces a slot checks, at the last moment before the
slot's bytes change (before DESIGN's step 6, in the saver that holds the stream's claim), whether
the record it evicts holds a user alias; if so, the bytes are copied to a pin key and each alias
moves to that pin (``kept_by: "alias NAME"``, as at alias time). A save that then fails leaves the
pin and the alias on it: the same bytes, kept.

This lives in ``save/`` (not ``lifecycle/``) because the pipeline calls it, and a floor imports
only from its own floor or below.

Examples:
    >>> from tracker_saver.core.records import UploadInfo
    >>> from tracker_saver.registry import open_registry
    >>> reg = open_registry(":memory:")
    >>> info = UploadInfo("p", "r", "best", "best_3.pt", slot=0, key="p/r/best.slot0.pt")
    >>> record = reg.records.create_pending(info, uri="file:///o/p/r/best.slot0.pt")
    >>> keep_aliased(None, reg, record) is None  # no alias on it: nothing to keep
    True
"""

from __future__ import annotations

import logging

from tracker_saver.core.errors import RecordNotFoundError
from tracker_saver.core.records import LOADABLE, Record
from tracker_saver.registry.base import Registry
from tracker_saver.save.keep import KEPT_BY, alias_reason, keep_copy
from tracker_saver.storage import Storage

__all__ = ["keep_aliased"]

log = logging.getLogger(__name__)


def keep_aliased(storage: Storage, registry: Registry, replaced: Record) -> Record | None:
    """Pin the slot record a save is about to evict if it holds a user alias, and move its aliases to the pin.

    The registry is asked for the record's user aliases now (the slot allocator's copy may predate
    an alias someone set since): one request on MLflow. Only when there is one is the record read
    again, for the name and tags the pin copies. The caller holds the stream's claim and has not
    changed the slot's bytes yet, so the copy is checked by size, not hashed again
    (``keep_copy(verify=False)``). A pin of the same record made before (a person's pin, say) is reused.

    Args:
        storage: the stream's storage.
        registry: the stream's registry.
        replaced: the live record whose slot the save writes.

    Returns:
        The pinned record the aliases now name, or ``None`` when the record holds no user alias.

    Raises:
        StorageError: the copy could not be made; the save fails before its commit point and the
            record stays live with its aliases.
        IntegrityError: the copy differs from the record (the slot was changed behind the claim).

    Note:
        Runs where the save's step 6 runs: on the upload worker with ``async_upload``.
    """
    try:
        aliases = registry.labels.user_aliases(replaced)
        if not aliases:
            return None
        current = registry.records.get(replaced.id)
    except RecordNotFoundError:  # deleted behind our back (a tracker's UI): it holds no alias; the save goes on
        return None
    if current.state not in LOADABLE or current.slot is None:
        return None
    pin = current
    for alias in aliases:  # the first alias makes the copy; the others find it (reuse)
        pin = keep_copy(storage, registry, current, extra={KEPT_BY: alias_reason(alias)}, verify=False)
        pin = registry.labels.set_alias(pin.id, alias)
    what = "record %s (%r) holds alias %s and its slot is saved over: pinned as record %s, which the alias now names"
    log.info(what, current.id, current.name, ", ".join(aliases), pin.id)
    return pin
