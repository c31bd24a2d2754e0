"""Who owns a stream's objects: the registry an owner object at output_uri names, checked before any byte.

A team shares a bucket: a second person's saver, with their own registry, must not take a
stream's slots. So the claim lives where the bytes live (DESIGN, "Others write too"): one small
object per stream under the reserved prefix ``.tracker_saver/owners/`` (never counted among the
stream's objects, never under a run's folder) names the registry whose records describe the
stream's objects, by :meth:`Registry.registry_id` (a random id kept inside the registry, never
its path). A saver whose registry is another refuses with :class:`StreamOwnedError` before it
writes or deletes anything. Ownership lasts until :func:`take_over`; the writer's lease (the
registry's claim, which a killed process loses) is another matter.

The owner object is made with ``Storage.put_if_absent`` (a hard link locally; ``If-None-Match:
*`` on S3, which Ceph RGW honours) and read back, so two savers that start at once agree on one
owner even on a store that ignores the condition. A stream written before owners were recorded
(objects, no owner object) goes to the first registry that knows every one of its objects'
bytes (size, then sha256); any other registry refuses.

A save refused before its first byte leaves the stream as it was: the owner object its first
save wrote is removed again (:func:`release_owner`), so another registry is not refused on a
stream that has no checkpoint.

An owner object is text anyone who can write output_uri may have written: what it says is
escaped (:func:`tracker_saver.core.text.escape`) before it goes into a message.

Examples:
    >>> owner_key(StreamId("s3://team/ckpt", "mnist", "r1", "best_model"))
    '.tracker_saver/owners/mnist/r1/best_model.json'
"""

from __future__ import annotations

import io
import json
import re
import shlex
import socket
import time
from dataclasses import asdict, dataclass

from tracker_saver.core.errors import ConfigError, StreamOwnedError
from tracker_saver.core.naming import check_key, stream_path
from tracker_saver.core.records import StreamId
from tracker_saver.core.text import escape
from tracker_saver.registry.base import Registry, stream_query
from tracker_saver.save.recovery import owner_of
from tracker_saver.storage.base import RESERVED, Storage

__all__ = [
    "OWNERS",
    "Owner",
    "claim_stream",
    "ensure_owner",
    "owned",
    "owner_key",
    "read_owner",
    "release_owner",
    "run_streams",
    "take_over",
    "take_over_run",
]

#: Where owner objects live at an output_uri: beside every run's folder, never in one (``Storage.list``
#: shows them only when asked for this prefix).
OWNERS = RESERVED + "owners/"


@dataclass(frozen=True)
class Owner:
    """What an owner object says: the owning registry's id, its description for people, who claimed and when."""

    registry_id: str
    registry: str
    host: str
    claimed_at: float

    def describe(self) -> str:
        """How errors name the owner: its registry, id and where the claim came from, escaped (read from a store).

        Examples:
            >>> Owner("ab12", "sqlite:///x\\x1b[2J.db", "node1", 0.0).describe()  # doctest: +ELLIPSIS
            'sqlite:///x\\\\x1b[2J.db (registry id ab12, claimed from node1 on 19...)'
        """
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.claimed_at))
        return escape(f"{self.registry} (registry id {self.registry_id}, claimed from {self.host} on {when})")


def owner_key(stream: StreamId) -> str:
    """The key of ``stream``'s owner object: ``.tracker_saver/owners/<project>/<run>/<stream>.json``."""
    return check_key(f"{OWNERS}{stream_path(stream.project, stream.run, stream.stream)}.json")


def read_owner(storage: Storage, stream: StreamId) -> Owner | None:
    """The owner object of ``stream`` at ``storage``, or ``None`` when there is none.

    Raises:
        StreamOwnedError: the object is there but is not an owner object (someone wrote it by hand).
    """
    key = owner_key(stream)
    data = storage.read_small(key)
    if data is None:
        return None
    try:
        fields = json.loads(data)
        return Owner(
            str(fields["registry_id"]), str(fields["registry"]), str(fields["host"]), float(fields["claimed_at"])
        )
    except (ValueError, KeyError, TypeError):
        raise StreamOwnedError(
            f"stream {stream.label}: {storage.url(key)} is not an owner object tracker_saver wrote, so who owns the "
            f"stream is unknown: restore it, or hand the stream over with `tracker-saver streams take-over`",
            owner="unknown",
        ) from None


def owned(storage: Storage, registry: Registry, stream: StreamId) -> bool:
    """Whether ``registry`` owns ``stream`` (``False``: nobody does yet); reads one object, writes nothing.

    Raises:
        StreamOwnedError: another registry owns it.
    """
    found = read_owner(storage, stream)
    if found is None:
        return False
    mine = registry.claims.registry_id(stream.project)
    if found.registry_id != mine:
        raise _owned_error(storage, stream, found, registry, mine)
    return True


def ensure_owner(storage: Storage, registry: Registry, stream: StreamId) -> Owner:
    """Make sure ``registry`` owns ``stream`` at ``storage``, claiming it if nobody does; writes nothing else.

    Call it before writing or deleting anything of the stream (an unfinished write included).

    Raises:
        StreamOwnedError: another registry owns the stream, or (written before owners were
            recorded) its objects hold bytes this registry has no record of.
    """
    return _claim(storage, registry, stream)[0]


def claim_stream(storage: Storage, registry: Registry, stream: StreamId) -> Owner | None:
    """:func:`ensure_owner` that says whether this call made the claim: the owner object it wrote, else ``None``.

    ``None``: ``registry`` already owned the stream, or a racing saver of it claimed it first. A
    claim this call made is what :func:`release_owner` may take back if the save that made it
    is refused.

    Raises:
        StreamOwnedError: as :func:`ensure_owner`.
    """
    owner, made = _claim(storage, registry, stream)
    return owner if made else None


def _claim(storage: Storage, registry: Registry, stream: StreamId) -> tuple[Owner, bool]:
    """The stream's owner, claimed for ``registry`` if nobody owns it, and whether this call wrote the claim."""
    mine = registry.claims.registry_id(stream.project)
    found = read_owner(storage, stream)
    if found is not None:
        if found.registry_id != mine:
            raise _owned_error(storage, stream, found, registry, mine)
        return found, False
    unknown = _unknown_objects(storage, registry, stream)
    if unknown:
        raise StreamOwnedError(
            f"stream {stream.label} already has objects that registry {registry.uri} has no record of "
            f"({escape(', '.join(unknown[:3]))}): another registry wrote them before owners were recorded at "
            "output_uri. Save with that registry, or to another run, filename_prefix or output_uri; if that registry "
            f"is gone for good, hand the stream over: {_take_over_command(stream, None)}",
            owner="unknown (written before owners were recorded)",
        )
    claim = Owner(mine, registry.uri, socket.gethostname(), time.time())
    storage.put_if_absent(owner_key(stream), _encode(claim))
    found = read_owner(storage, stream)  # read back: a racing saver, or a store ignoring If-None-Match
    if found is None or found.registry_id != mine:
        raise _owned_error(storage, stream, found, registry, mine)
    return found, found == claim  # not ours to take back when a racing saver of this registry wrote it


def release_owner(storage: Storage, registry: Registry, stream: StreamId, claim: Owner) -> bool:
    """Take back ``claim`` (:func:`claim_stream`'s) after a save refused before its first byte; ``True`` if removed.

    The owner object goes only while it still says exactly ``claim`` and ``registry`` has no record
    of the stream: a stream with a record (a failed one included) stays this registry's, and a
    claim someone made since (a take-over) is left alone. The stream is then as before the save:
    another registry may claim it.
    """
    if read_owner(storage, stream) != claim or registry.records.query(stream_query(stream, limit=1)):
        return False
    storage.delete(owner_key(stream))
    return True


def take_over(storage: Storage, registry: Registry, stream: StreamId, *, from_id: str | None) -> Owner:
    """Hand ``stream`` over to ``registry``, deliberately: its old registry is gone for good.

    ``from_id`` must be the current owner's registry id (``None``: the stream has no owner
    object, its objects written before owners were recorded), as the refusal printed it, so a
    stale command never takes a stream from a registry that claimed it since. The objects stay;
    the new owner's saves reuse their slots.

    Raises:
        StreamOwnedError: the owner is not ``from_id``.
    """
    found = read_owner(storage, stream)
    current = found.registry_id if found is not None else None
    if current != from_id:
        raise StreamOwnedError(
            f"stream {stream.label} is owned by {found.describe() if found else 'no registry'}, not by "
            f"{escape(from_id or 'no registry')}: nothing was changed; check which registry owns it before taking "
            "it over",
            owner=found.describe() if found else "none",
        )
    claim = Owner(registry.claims.registry_id(stream.project), registry.uri, socket.gethostname(), time.time())
    storage.put_stream(owner_key(stream), io.BytesIO(_encode(claim)))
    return claim


def _encode(owner: Owner) -> bytes:
    return json.dumps(asdict(owner), sort_keys=True).encode()


def _unknown_objects(storage: Storage, registry: Registry, stream: StreamId) -> list[str]:
    """The stream's objects whose bytes no record of ``registry`` has (size first, sha256 to be sure)."""
    path = stream_path(stream.project, stream.run, stream.stream)
    objects = [o for o in storage.list(path + ".slot") if owner_of(o.key, [stream]) is not None]
    if not objects:
        return []
    known: dict[str, set[tuple[int | None, str | None]]] = {}
    for record in registry.records.query(stream_query(stream)):
        if record.key is not None and record.sha256 is not None:
            known.setdefault(record.key, set()).add((record.size, record.sha256))
    unknown = []
    for obj in objects:
        digests = known.get(obj.key, set())
        if not any(size == obj.size for size, _ in digests) or storage.digest(obj.key) not in digests:
            unknown.append(obj.key)
    return unknown


def _owned_error(
    storage: Storage, stream: StreamId, owner: Owner | None, registry: Registry, mine: str
) -> StreamOwnedError:
    theirs = owner.describe() if owner is not None else "a registry that did not finish claiming it"
    # A saver learns its streams one save at a time: the owner objects name the run's others it would meet.
    same = [s.stream for s in run_streams(storage, stream.project, stream.run) if _owner_id(storage, s) == _id(owner)]
    every = f" (the run's streams it owns: {escape(', '.join(same))})" if owner is not None and same else ""
    return StreamOwnedError(
        f"stream {stream.label} belongs to another registry: {theirs}{every}; this saver's registry is "
        f"{registry.uri} (registry id {mine}). Save with that registry, or to another run, filename_prefix or "
        f"output_uri; if that registry is gone for good, hand the stream over: {_take_over_command(stream, owner)}",
        owner=theirs,
    )


def _take_over_command(stream: StreamId, owner: Owner | None) -> str:
    """The command that hands ``stream``'s run over, to paste as printed: ``--project=VALUE`` keeps a value that starts
    with ``-`` a value for argparse (``--project -x`` reads ``-x`` as an option), and the shell gets it quoted.

    Without ``--stream`` it takes every stream of the run that registry owns, so the next run does not
    train an epoch and then meet the next stream's refusal."""
    q = shlex.quote
    frm = escape(owner.registry_id) if owner is not None else "none"  # the ids registries write are plain hex
    return escape(
        f"`tracker-saver streams take-over {q(stream.output_uri)} --project={q(stream.project)} "
        f"--run={q(stream.run)} --from {q(frm)}`"
    )


def _id(owner: Owner | None) -> str | None:
    return owner.registry_id if owner is not None else None


def _owner_id(storage: Storage, stream: StreamId) -> str | None:
    """The registry id ``stream``'s owner object names; ``None`` for none, or one tracker_saver did not write."""
    try:
        return _id(read_owner(storage, stream))
    except StreamOwnedError:
        return None


def run_streams(storage: Storage, project: str, run: str | None) -> list[StreamId]:
    """The streams of run ``project/run`` (of every run of ``project`` when ``run`` is ``None``) at ``storage``.

    Found from the owner objects and the slot objects (a stream written before owners were recorded
    has only those). Names come from keys: a run or stream whose name is not a safe key segment shows
    its slug (``resnet-lr=0.1-65aaf658``), which names the same keys.
    """
    base = stream_path(project, run or "x", "x").rsplit("/", 1 if run is not None else 2)[0] + "/"
    names: set[tuple[str, str]] = set()
    for prefix, pattern in ((OWNERS + base, r"(.+)\.json"), (base, r"(.+)\.slot\d+.*")):
        for obj in storage.list(prefix):
            parts = obj.key[len(prefix) :].split("/")
            if len(parts) == (1 if run is not None else 2) and (found := re.fullmatch(pattern, parts[-1])):
                names.add((run if run is not None else parts[0], found.group(1)))
    return [StreamId(storage.uri, project, r, s) for r, s in sorted(names)]


def take_over_run(
    storage: Storage, registry: Registry, project: str, run: str | None, *, from_id: str | None
) -> list[tuple[StreamId, Owner]]:
    """Hand every stream of a run (of a project, ``run=None``) whose owner is ``from_id`` over to ``registry``.

    All or nothing: if any stream of it is owned by a registry that is neither ``from_id`` nor
    ``registry``, nothing changes and the error lists every such stream. Streams ``registry``
    owns already are left as they are.

    Raises:
        StreamOwnedError: a stream is owned by another registry; every one is named.
        ConfigError: no stream of the run (or project) at ``storage``.
    """
    streams = run_streams(storage, project, run)
    where = f"run {project}/{run}" if run is not None else f"project {project}"
    if not streams:
        raise ConfigError(
            f"no stream of {where} at {storage.uri}: check the output_uri, project and run as the refusal printed them"
        )
    taking, refused = [], []
    for stream in streams:
        try:
            found = read_owner(storage, stream)
        except StreamOwnedError as exc:
            refused.append(f"{stream.label} (not an owner object tracker_saver wrote: {exc.owner})")
            continue
        current = _id(found)
        if current == registry.claims.registry_id(stream.project):
            continue
        if current != from_id:
            refused.append(f"{stream.label} ({found.describe() if found else 'no owner recorded: --from none'})")
        else:
            taking.append(stream)
    if refused:
        raise StreamOwnedError(
            f"{len(refused)} of the {len(streams)} streams of {where} at {storage.uri} are not owned by "
            f"{escape(from_id or 'no registry')}: {escape('; '.join(refused))}. Nothing was changed: take those over "
            "from their owner (--from as listed), or with --stream take the others one by one",
            owner=", ".join(refused),
        )
    return [(stream, take_over(storage, registry, stream, from_id=from_id)) for stream in taking]
