"""DESIGN's path of one checkpoint: the one place that touches storage and registry together.

Save: claim the stream → slot allocator → pre-upload callbacks → record ``pending`` →
serialize and hash into the staged write → at the commit point, the digest is noted and the
slot's previous record leaves live, in one registry transaction → commit → post-upload
callbacks → record ``live`` → the after-save step (``keep_every``'s archive keep). A failure
before the commit point puts nothing in the slot and leaves the previous record live; one after
it is settled by what the slot holds (``recovery``). Remove: Ignite's ``remove`` only marks the
slot as the next to replace.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import torch

from tracker_saver.core.claims import LEASE_S, Holder
from tracker_saver.core.errors import (
    CallbackError,
    ConfigError,
    IntegrityError,
    SerializationError,
    StorageError,
    StreamBusyError,
    StreamOwnedError,
    TrackerSaverError,
)
from tracker_saver.core.naming import key_ext, run_prefix, slot_key
from tracker_saver.core.records import LOADABLE, MetaValue, Record, RecordState, StreamId, UploadInfo
from tracker_saver.core.timings import SaveClock
from tracker_saver.lifecycle.after_save import AfterSave
from tracker_saver.lifecycle.aliases import keep_aliased
from tracker_saver.registry.base import Query, Registry, stream_query
from tracker_saver.save.callbacks import CallbackChain
from tracker_saver.save.hashing import HashingWriter, hash_alongside
from tracker_saver.save.interrupts import interrupt_behind
from tracker_saver.save.local_view import LocalView
from tracker_saver.save.memory import StableMemory
from tracker_saver.save.ownership import Owner, claim_stream, ensure_owner, owned, release_owner
from tracker_saver.save.recovery import Action, owner_of, settle_stream
from tracker_saver.save.slots import Choice, SlotAllocator
from tracker_saver.storage.base import StagedWrite, Storage

__all__ = ["Pipeline", "check_save_kwargs", "is_writing", "kept_filenames", "writing"]

log = logging.getLogger(__name__)

#: errno values that mean "the device is full" (no space left, disk quota exceeded).
_FULL = (errno.ENOSPC, errno.EDQUOT)

_local = threading.local()


def check_save_kwargs(save_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """``save_kwargs`` as a dict, if ``torch.save(checkpoint, f, **save_kwargs)`` accepts them.

    Examples:
        >>> check_save_kwargs({"pickle_protocol": 4})
        {'pickle_protocol': 4}
    """
    kwargs = dict(save_kwargs or {})
    # torch.serialization.save: ClearML's binding replaces torch.save with a (*args, **kwargs) wrapper.
    accepted = [p for p in inspect.signature(torch.serialization.save).parameters if p not in ("obj", "f")]
    unknown = sorted(k for k in kwargs if k not in accepted)
    if unknown:
        raise ConfigError(
            f"save_kwargs {unknown} are not keywords of torch.save: pass only {accepted} "
            "(the checkpoint and the file are the saver's)"
        )
    return kwargs


def is_writing() -> bool:
    """Whether this thread is inside a pipeline's ``torch.save`` (for framework bindings).

    ClearML patches ``torch.save`` to upload whatever it sees; the saver hands this to the
    ClearML binding guard so it skips our writes, and there is never a second copy.
    """
    return bool(getattr(_local, "writing", False))


@contextlib.contextmanager
def writing() -> Iterator[None]:
    """Mark this thread as writing a slot (what :func:`is_writing` reports)."""
    _local.writing = True
    try:
        yield
    finally:
        _local.writing = False


def kept_filenames(checkpoint: Mapping[str, Any]) -> list[str]:
    """The filenames Ignite keeps, from the ``checkpointer`` entry ``include_self=True`` adds.

    Ignite writes its own ``state_dict()`` (``{"_saved": [(priority, filename), ...]}``) into the
    checkpoint after updating ``_saved``: after ``Checkpoint.load_objects`` restored it, this is
    the only way the saver learns which earlier records Ignite still keeps.
    """
    state = checkpoint.get("checkpointer") if isinstance(checkpoint, Mapping) else None
    saved = state.get("_saved") if isinstance(state, Mapping) else None
    if not isinstance(saved, (list, tuple)):
        return []
    return [
        item[1] for item in saved if isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[1], str)
    ]


class Pipeline:
    """Runs DESIGN's path of one checkpoint against a storage and a registry, one writer per stream.

    Args:
        storage: where slot objects are written.
        registry: where records and stream claims are kept.
        callbacks: the user's pre/post-upload callbacks, run after the slot allocator.
        holder: this saver's claim on the streams it writes.
        save_kwargs: keywords for ``torch.save`` (``pickle_protocol``, …), as ``DiskSaver(**kwargs)``.
        view: the saver's ``dirname``, which follows each save once its record is live.
        after_save: the last step of each save that did not fail: ``keep_every``'s archive keep.
    """

    def __init__(
        self,
        storage: Storage,
        registry: Registry,
        callbacks: CallbackChain,
        holder: Holder,
        *,
        save_kwargs: Mapping[str, Any] | None = None,
        view: LocalView | None = None,
        after_save: AfterSave | None = None,
    ) -> None:
        self.storage = storage
        self.registry = registry
        self.callbacks = callbacks
        self.holder = holder
        self.save_kwargs = dict(save_kwargs or {})
        self.view = view
        self.after_save = after_save
        self.slots = SlotAllocator()
        self._claimed: dict[StreamId, float] = {}  # stream -> when the claim was last renewed
        self._owned: set[StreamId] = set()  # streams whose owner object names this registry
        # ``open`` runs on the async worker and on the caller's thread (``TrackerSaver.adopt``):
        # one at a time, so a stream is settled and loaded once.
        self._lock = threading.RLock()

    def open(self, stream: StreamId) -> None:
        """Be ``stream``'s one writer and, on its first use, settle and load it.

        Its steps: renew the writer's claim → decide whose stream it is → settle what an earlier
        writer left → load the slots.

        Raises:
            StreamBusyError: another live saver writes the stream.
            StreamOwnedError: another registry owns the stream.
        """
        with self._lock:
            self._renew_claim(stream)
            self._own(stream)
            if not self.slots.loaded(stream):
                self._settle(stream)
                self.slots.load(stream, self.registry.records.query(stream_query(stream, states=LOADABLE)))

    def _renew_claim(self, stream: StreamId) -> None:
        """Claim ``stream`` for this writer, renewed every quarter lease (a killed holder's lease runs out)."""
        now = time.monotonic()
        if now - self._claimed.get(stream, -LEASE_S) >= LEASE_S / 4:
            self.registry.claims.claim(stream, self.holder)
            self._claimed[stream] = now

    def _own(self, stream: StreamId, *, first_save: bool = False) -> Owner | None:
        """Decide whose ``stream`` is, before any byte of it is written or deleted: the one place that does.

        Ours when its owner object names this registry, or when this registry has records of it
        from before owners were recorded (claimed now). A stream new to this registry is claimed
        by its first save, once that save is checked (``first_save``); the owner object that call
        wrote is returned, for :meth:`_unclaim` if the save is refused.

        Raises:
            StreamOwnedError: another registry owns the stream.
        """
        if stream in self._owned:
            return None
        if owned(self.storage, self.registry, stream):
            self._owned.add(stream)
            return None
        if not first_save and not self.registry.records.query(stream_query(stream, limit=1)):
            return None  # new to this registry: its first save claims it
        claim = claim_stream(self.storage, self.registry, stream)
        self._owned.add(stream)
        return claim

    def _settle(self, stream: StreamId) -> None:
        """Settle what a dead writer, or a save of ours that failed, left in a stream we own."""
        if stream not in self._owned:
            return  # nobody owns it: nothing of ours to settle, and nothing to delete
        # We hold the claim: every pending record of the stream is a dead writer's (or ours, from a
        # save that failed), and every unfinished write to its slots is one that an outage or a kill
        # left (a retried CreateMultipartUpload the server ran late, say).
        for line in settle_stream(self.storage, self.registry, stream).lines():
            log.warning("%s: %s", stream.label, line)

    def recover(self, project: str, run: str) -> list[Action]:
        """Start-up recovery: settle what killed writers left in this run at this output_uri.

        Pending records are settled, and unfinished writes (temp files, multipart uploads a
        dead writer or an outage left) removed. Streams that another live saver holds are its
        own business and left alone.
        """
        query = Query(output_uri=self.storage.uri, project=project, run=run, states=(RecordState.PENDING,))
        streams = {r.stream_id for r in self.registry.records.query(query)}
        if unfinished := self.storage.staged(run_prefix(project, run)):
            # every staged write has a record of its stream (step 4 comes first)
            everything = self.registry.records.query(Query(output_uri=self.storage.uri, project=project, run=run))
            known = {r.stream_id for r in everything}
            streams |= {s for item in unfinished if (s := owner_of(item.key, known)) is not None}
        actions: list[Action] = []
        for stream in sorted(streams, key=lambda s: s.stream):
            try:
                self.registry.claims.claim(stream, self.holder)
            except StreamBusyError:
                continue
            try:
                ensure_owner(self.storage, self.registry, stream)
                settled = settle_stream(self.storage, self.registry, stream)  # we hold the claim
                actions += settled.actions
                for item in settled.removed:
                    log.warning("start-up recovery in %s: removed unfinished write %s", stream.label, item.ref)
            except StreamOwnedError as exc:  # its owner settles it; this saver refuses to save there
                log.warning("start-up recovery left %s alone: %s", stream.label, exc)
            finally:
                with self._lock:
                    self.registry.claims.release(stream, self.holder)
                    self._claimed.pop(stream, None)
        for action in actions:
            log.warning("start-up recovery in %s/%s: %s", project, run, action)
        return actions

    def close(self) -> None:
        """Give up every stream claim this pipeline holds."""
        with self._lock:
            for stream in list(self._claimed):
                self.registry.claims.release(stream, self.holder)
                del self._claimed[stream]

    def save(
        self,
        checkpoint: Mapping[str, Any],
        info: UploadInfo,
        clock: SaveClock | None = None,
        *,
        at: float | None = None,
    ) -> Record | None:
        """Write ``checkpoint`` into the slot chosen for ``info``; return its live record.

        DESIGN's steps: open the stream → choose the slot → pre-upload callbacks → claim a stream
        new to this registry → record ``pending`` → serialize, hash and stage the bytes → at the
        commit point, note the digest and take the slot's previous record out of live → commit →
        post-upload callbacks → record ``live``, with what the save cost (``clock``'s
        :data:`~tracker_saver.core.records.TIMING_KEYS`; a clock started here when none is given)
        in the metadata of that one commit → the after-save step (``keep_every``'s archive keep,
        due or not by ``at``, where training was when Ignite called).
        A failure before the commit point leaves the previous record live and raises.
        """
        clock = clock or SaveClock.start()
        clock.lap("begin")
        stream = info.stream_id
        self.open(stream)
        choice = self._choose_slot(stream, checkpoint, info.filename)
        key = slot_key(info.project, info.run, info.stream, choice.slot, key_ext(info.filename))
        claim: Owner | None = None
        try:
            # every value checked (ConfigError) before anything is claimed
            final = self.callbacks.run_pre(replace(info, slot=choice.slot, key=key))
            if final is None:
                self.slots.abandon(stream, choice)
                log.debug("upload of %s skipped by a pre-upload callback", info.filename)
                self._after_save(None, at)
                return None
            claim = self._own(stream, first_save=True)
            clock.lap("open")
            record = self.registry.records.create_pending(final, uri=self.storage.url(key))
            clock.lap("pending")
        except BaseException:
            self.slots.abandon(stream, choice)
            if claim is not None:
                self._unclaim(stream, claim)
            raise
        # CPU tensors' storages outlive torch.save's writes: their hash and upload may trail them.
        stable = StableMemory.of(checkpoint)
        writer = HashingWriter(stable=stable, parallel=hash_alongside(background=clock.background))
        staged: StagedWrite | None = None
        superseded = False
        writing_since = time.perf_counter()
        try:
            staged = self.storage.stage(key, stable=stable)
            self._serialize(checkpoint, staged, writer, clock)  # step 5: the bytes are staged
            replaces = choice.replaces.id if choice.replaces is not None else None
            digest = writer.sha256  # waits for the hash that ran alongside the writes
            clock.lap("hash")
            if choice.replaces is not None:  # an alias on the record it evicts moves to a pin of its bytes first
                keep_aliased(self.storage, self.registry, choice.replaces, owner=ensure_owner)
            self.registry.records.supersede(record.id, sha256=digest, size=writer.size, replaces=replaces)  # step 6
            superseded = True
            clock.lap("supersede")
            staged.commit()  # step 7: the commit point
            fingerprint = self._committed(key, writer.size)
            clock.lap("commit")
        except BaseException as exc:
            reached = staged.abort() if staged is not None else False
            self._undo(stream, choice, record, exc, superseded=superseded, reached=reached)
            raise
        write_s = time.perf_counter() - writing_since
        written: dict[str, MetaValue] = {"sha256": writer.sha256, "size": writer.size, "uri": record.uri}
        done = replace(final, metadata={**final.metadata, **written})
        post_error: CallbackError | None = None
        try:
            try:
                self.callbacks.run_post(done)  # step 8
            except CallbackError as exc:
                post_error = exc  # the bytes are committed: the record still becomes live
            # Last, so no callback can forge them; durable ends here, before the commit's round-trip.
            metadata = {**done.metadata, **clock.metadata(size=writer.size, write_s=write_s)}
            live = self.registry.records.make_live(  # step 9
                record.id, sha256=writer.sha256, size=writer.size, metadata=metadata, fingerprint=fingerprint
            )
        except BaseException:
            # The bytes are in the slot, the record is pending with their digest: start-up
            # recovery (or the next save's) promotes it. Reload the slots from the registry.
            self.slots.abandon(stream, choice)
            self.slots.forget(stream)
            raise
        clock.lap("live")
        self.slots.committed(stream, choice, live)
        if self.view is not None:
            self.view.committed(live, choice.replaces)
            clock.lap("view")
        log.debug("saved %s, seconds by step: %s", info.filename, clock.laps)
        if post_error is not None:
            raise post_error
        self._after_save(live, at)
        return live

    def _choose_slot(self, stream: StreamId, checkpoint: Mapping[str, Any], filename: str) -> Choice:
        """The slot allocator's choice for ``filename``, told first which filenames Ignite keeps."""
        self.slots.adopt(stream, [f for f in kept_filenames(checkpoint) if f != filename])
        return self.slots.choose(stream, filename)

    def _after_save(self, live: Record | None, at: float | None) -> None:
        """The last step: ``keep_every`` keeps ``live`` outside the slots if it is due at ``at``.

        Raises:
            StorageError, IntegrityError: the archive copy failed; the save stays live.
        """
        if self.after_save is not None:
            self.after_save.saved(self.storage, self.registry, live, at)

    def _unclaim(self, stream: StreamId, claim: Owner) -> None:
        """After a save refused before its first byte: the owner object it wrote goes, so the stream is as before."""
        try:
            if release_owner(self.storage, self.registry, stream, claim):
                self._owned.discard(stream)
        except TrackerSaverError:
            # The original error is raised; the claim stays, as after any save of this registry.
            log.warning("could not take back the claim on %s after a refused save", stream.label, exc_info=True)

    def _undo(
        self, stream: StreamId, choice: Choice, record: Record, exc: BaseException, *, superseded: bool, reached: bool
    ) -> None:
        """After a failed save: the previous record back to live, the new one failed.

        ``superseded``: step 6 ran (the slot's previous record left live); ``reached``: the
        staged write's commit may have changed the slot (its ``abort`` said so).
        """
        self.slots.abandon(stream, choice)
        if isinstance(exc, StorageError):
            # An outage may leave unfinished writes it could not abort: the stream's next save
            # reopens it, which removes them (``open``).
            self.slots.forget(stream)
        why = f"{type(exc).__name__}: {exc}"
        try:
            if not reached:  # the slot's bytes are provably untouched: no need to read them
                if superseded and choice.replaces is not None:
                    self.registry.records.restore(choice.replaces.id, RecordState.LIVE)
                    self.slots.forget(stream)
                self.registry.records.fail(record.id, why)
                return
            # The commit may have reached the store: what the slot holds now decides.
            self.slots.forget(stream)
            settled = settle_stream(self.storage, self.registry, stream, slot=choice.slot, restored=RecordState.LIVE)
            for line in settled.lines():
                log.info("%s after a failed save: %s", stream.label, line)
        except TrackerSaverError:
            # The original error is raised; the next save's recovery (or start-up's) settles the records.
            self.slots.forget(stream)
            log.warning("could not settle the records of %s after a failed save", stream.label, exc_info=True)

    def _serialize(
        self, checkpoint: Mapping[str, Any], staged: StagedWrite, writer: HashingWriter, clock: SaveClock
    ) -> None:
        """``torch.save`` through ``writer`` into ``staged``, then ``finish`` it; errors made ours."""
        key = staged.key
        try:
            writer.target = staged.file
            with writing():
                torch.save(checkpoint, writer, **self.save_kwargs)  # type: ignore[arg-type]
            clock.lap("serialize")
            staged.finish()
            clock.lap("finish")
        except TrackerSaverError:
            raise
        except Exception as exc:
            if (interrupt := interrupt_behind(exc)) is not None:
                raise interrupt from None  # Ctrl-C inside torch's writer came out as its RuntimeError
            cause = staged.failure or writer.error or exc
            if isinstance(cause, TrackerSaverError):  # the storage's own (torch.save re-wraps it)
                raise cause from cause.__cause__
            if isinstance(cause, OSError):
                fix = ": free space there, or pass an output_uri with room" if cause.errno in _FULL else ""
                raise StorageError(f"writing {self.storage.url(key)} failed: {cause}{fix}", key=key) from cause
            # TypeError (e.g. "cannot pickle '_thread.lock'") must not escape as such:
            # Ignite would retry the handler without metadata and hide this failure.
            raise SerializationError(
                f"torch.save could not serialize the checkpoint for {key!r}: {exc!r}; "
                "put only state_dict()-able objects in Checkpoint's to_save"
            ) from exc

    def _committed(self, key: str, size: int) -> str | None:
        """The committed object's fingerprint, once it is seen to hold every byte written (a store that
        cut it short is caught here)."""
        stat = self.storage.stat(key)
        if stat is None or stat.size != size:
            raise IntegrityError(
                f"{self.storage.url(key)} holds {stat.size if stat else 'no'} bytes after writing "
                f"{size}: the write did not complete",
                key=key,
            )
        return stat.fingerprint

    def remove(self, filename: str, *, project: str, run: str) -> None:
        """Ignite's ``remove``: the record stays live; its slot is the next its stream replaces.

        Ignite does not say the stream: a record of an earlier process (a restored ``_saved``)
        is found in the registry by filename, and its stream opened.
        """
        if self.slots.remove(filename):
            return
        query = Query(output_uri=self.storage.uri, project=project, run=run, filename=filename, states=LOADABLE)
        found = self.registry.records.query(query)
        if not found:
            log.debug("remove(%r): no live record of that name; nothing to do", filename)
            return
        stream = found[-1].stream_id
        if self.slots.loaded(stream):
            return  # loaded, yet not live there: nothing to do
        self.open(stream)
        self.slots.remove(filename)
