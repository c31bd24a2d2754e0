"""Who writes a stream: the claim a saver holds, and whether a recorded holder is still alive.

A stream has one writer at a time (two would pick the same slot and make a record lie). The
registry stores each stream's claim as a :class:`Holder`; a saver that finds another *live*
holder gets ``StreamBusyError``. A holder is alive when:

* it is this process: the saver that took the claim has not been closed or collected;
* it is another process on this host: that pid exists and started when the holder says
  (a pid recycled after a ``kill -9`` is a different process, so it holds nothing);
* it is on another host: its heartbeat is younger than the lease (``LEASE_S``). A lost node
  therefore holds its streams until the lease runs out.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import uuid
import weakref
from dataclasses import dataclass

__all__ = ["LEASE_S", "STALE_AFTER_S", "Holder", "is_alive", "new_holder", "release_local"]

#: Seconds a holder on another host keeps a claim without a heartbeat (each save renews it).
LEASE_S = 600.0

#: ``repair`` leaves a temp file or multipart upload younger than this alone (unless its slot is
#: settled under the stream's claim, as at start-up): an hour is six claim leases, so no live
#: writer on any host still owns it. Here, not in fsck, so the CLI reads it without importing fsck.
STALE_AFTER_S = 6 * LEASE_S

_local: dict[str, weakref.ref[object]] = {}
_local_lock = threading.Lock()


@dataclass(frozen=True)
class Holder:
    """One saver's claim on its streams: who, where, since when.

    Examples:
        >>> class Saver: ...
        >>> saver = Saver()
        >>> holder = new_holder(saver)
        >>> is_alive(holder, heartbeat=time.time())
        True
        >>> release_local(holder); is_alive(holder, heartbeat=time.time())
        False
    """

    token: str
    host: str
    pid: int
    started: int
    since: float
    command: str

    def describe(self) -> str:
        """How errors name the holder."""
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"pid {self.pid} on {self.host} ({self.command!r}, since {when})"


def _process_start(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot; ``None`` if no such process.

    Without ``/proc`` (not Linux) any existing pid counts as started at 0.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # Field 2 (the command) may hold spaces and ')': fields after its last ')' start at 3.
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except FileNotFoundError:
        return None
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return 0


def new_holder(owner: object) -> Holder:
    """A fresh claim token for ``owner`` (a saver); it lives as long as ``owner`` does."""
    pid = os.getpid()
    holder = Holder(
        token=uuid.uuid4().hex,
        host=socket.gethostname(),
        pid=pid,
        started=_process_start(pid) or 0,
        since=time.time(),
        # The program only: its arguments may hold credentials.
        command=os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else sys.executable)[:200],
    )
    with _local_lock:
        _local[holder.token] = weakref.ref(owner)
    return holder


def release_local(holder: Holder) -> None:
    """Forget ``holder`` in this process: its claims are free from now on."""
    with _local_lock:
        _local.pop(holder.token, None)


def is_alive(holder: Holder, *, heartbeat: float, lease_s: float = LEASE_S) -> bool:
    """Whether ``holder`` (as a registry recorded it, last renewed at ``heartbeat``) still writes."""
    if holder.host != socket.gethostname():
        return time.time() - heartbeat < lease_s
    if holder.pid == os.getpid():
        with _local_lock:
            ref = _local.get(holder.token)
        return ref is not None and ref() is not None
    return _process_start(holder.pid) == holder.started
