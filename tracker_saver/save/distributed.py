"""Distributed training: the saving rank does the I/O, and every rank learns how it went.

Ignite calls a save handler on every rank at the same event. The saving rank
(``save_on_rank``, 0 by default) serializes, uploads and registers; the others do no I/O.
Right after, :func:`share_outcome` broadcasts one small status string from the saving rank,
so a failure there is raised on every rank (the saving rank's own exception, and on the
others the same error class saying "see rank 0's traceback") instead of leaving them blocked
in the next collective while rank 0 unwinds. See docs/ddp.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import ignite.distributed as idist

from tracker_saver.core import errors
from tracker_saver.core.errors import ConfigError, RegistryError, TrackerSaverError
from tracker_saver.core.masking import strip_userinfo
from tracker_saver.core.outage import DEFAULT_TIMEOUT_S
from tracker_saver.registry import Registry, RegistrySpec, open_registry

__all__ = ["check_save_on_rank", "check_world", "open_for_reading", "peer_error", "share_outcome"]

#: The longest message one status carries (the cause's first lines are enough for a peer).
MAX_MESSAGE = 2000


def check_save_on_rank(save_on_rank: object) -> int:
    """``save_on_rank`` if it names a rank of this run, else a ``ConfigError``.

    Examples:
        >>> check_save_on_rank(0)
        0
    """
    world_size = idist.get_world_size()
    if (
        not isinstance(save_on_rank, int)
        or isinstance(save_on_rank, bool)
        or save_on_rank < 0
        or (world_size > 1 and save_on_rank >= world_size)
    ):
        raise ConfigError(
            f"save_on_rank={save_on_rank!r} is not a rank of this run (world size {world_size}): "
            f"pass an int from 0 to {max(world_size - 1, 0)}, as for Ignite's Checkpoint"
        )
    return save_on_rank


def check_world(created_in: int) -> None:
    """Refuse a save in a world of another size than the saver was created in (``created_in`` processes).

    Raises:
        ConfigError: the saver was made before the process group was set up.

    Examples:
        >>> check_world(1)  # one process, as when it was created
    """
    if idist.get_world_size() != created_in:
        raise ConfigError(
            f"TrackerSaver was created in a world of {created_in} processes and now runs in one of "
            f"{idist.get_world_size()}: create it after the process group is set up, inside the function "
            "that idist.Parallel runs"
        )


def share_outcome(action: Callable[[], None], *, src: int, what: str) -> None:
    """Run ``action`` on rank ``src``, then raise its error, if any, on every rank.

    A collective: every rank of the process group must call it at the same point (Ignite
    calls save handlers on every rank at the same event). Outside distributed training it
    simply runs ``action``. Rank ``src`` raises ``action``'s own exception; the others raise
    :func:`peer_error` of it.

    Args:
        action: what the saving rank does; not run on other ranks.
        src: the saving rank.
        what: what ``action`` is, for the other ranks' message (``"the save of 'model_2.pt'"``).

    Examples:
        >>> share_outcome(lambda: None, src=0, what="nothing")  # one process: just runs it
    """
    if idist.get_world_size() <= 1:
        action()
        return
    failure: BaseException | None = None
    status = ""
    if idist.get_rank() == src:
        try:
            action()
        except BaseException as exc:  # KeyboardInterrupt too: the peers must not wait forever
            failure = exc
            status = json.dumps({"type": type(exc).__name__, "message": _message(exc)})
    shared = str(idist.broadcast(status, src=src))
    if failure is not None:
        raise failure
    if shared:
        found = json.loads(shared)
        raise peer_error(str(found["type"]), str(found["message"]), src=src, what=what)


def _message(exc: BaseException) -> str:
    # tracker_saver's messages hold no credentials (DESIGN invariant 7); anything else is
    # stripped of URL userinfo before it crosses to another process's logs.
    text = str(exc) if isinstance(exc, TrackerSaverError) else strip_userinfo(str(exc))
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + "…"


def peer_error(kind: str, message: str, *, src: int, what: str) -> TrackerSaverError:
    """The error a rank raises when ``what`` failed on rank ``src`` with ``kind: message``.

    Its class is the saving rank's one when that is a tracker_saver error (so
    ``except StorageError`` works alike on every rank), else ``TrackerSaverError``.

    Examples:
        >>> error = peer_error("StorageError", "disk full", src=0, what="the save of 'model_2.pt'")
        >>> type(error).__name__, str(error)
        ('StorageError', "the save of 'model_2.pt' failed on rank 0: StorageError: disk full; see rank 0's traceback for the cause")
    """
    text = f"{what} failed on rank {src}: {kind}: {message}; see rank {src}'s traceback for the cause"
    found = getattr(errors, kind, None)
    classes = found.__mro__ if isinstance(found, type) and issubclass(found, TrackerSaverError) else ()
    for cls in classes:
        if isinstance(cls, type) and issubclass(cls, TrackerSaverError):
            try:  # some classes need more than a message (StreamBusyError's holder): use a base
                error = cls(text)
            except TypeError:
                continue
            assert isinstance(error, TrackerSaverError)
            return error
    return TrackerSaverError(text)


def open_for_reading(registry: RegistrySpec | None, *, timeout: float = DEFAULT_TIMEOUT_S) -> Registry:
    """Open, on a rank that does not save, the registry that the saving rank created.

    Never creates one (``open_registry(..., create=False)``): a missing SQLite file is a
    ``RegistryError``. The saving rank created and migrated it before any other rank gets
    here (the saver's construction is a collective), so opening it migrates nothing and
    writes nothing.

    Raises:
        RegistryError: no registry file exists at that path.
    """
    try:
        return open_registry(registry, timeout=timeout, create=False)
    except RegistryError as exc:
        raise RegistryError(
            f"rank {idist.get_rank()} reads the registry that the saving rank creates, and found none ({exc}): "
            "give every rank the same registry path, on a disk every rank that resumes can read"
        ) from exc
