"""``TrackerSaver``: Ignite's save handler that turns ``__call__``/``remove`` into pipeline steps."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import ignite.distributed as idist
from ignite.engine import Engine, Events
from ignite.handlers.checkpoint import DiskSaver

from tracker_saver.core.claims import new_holder, release_local
from tracker_saver.core.errors import SerializationError
from tracker_saver.core.masking import redact_url
from tracker_saver.core.outage import DEFAULT_TIMEOUT_S
from tracker_saver.core.records import LOADABLE, MetaValue, Record, RecordState, StreamId, UploadInfo
from tracker_saver.core.timings import SaveClock
from tracker_saver.lifecycle.after_save import AfterSave
from tracker_saver.lifecycle.archive import Archive
from tracker_saver.lifecycle.retention import Retention
from tracker_saver.lifecycle.schedule import KeepEvery
from tracker_saver.lifecycle.webhooks import Webhook
from tracker_saver.registry import Query, Registry, RegistrySpec, check_registry_path, open_registry
from tracker_saver.registry.context import RunContext
from tracker_saver.save import preemption
from tracker_saver.save.background import Background
from tracker_saver.save.callbacks import CallbackChain, PostUploadCallback, PreUploadCallback
from tracker_saver.save.continues import continued
from tracker_saver.save.distributed import check_save_on_rank, check_world, open_for_reading, share_outcome
from tracker_saver.save.interrupts import interrupt_behind
from tracker_saver.save.lineage import lineage as compute_lineage
from tracker_saver.save.local_view import LocalView, default_dirname
from tracker_saver.save.ownership import ensure_owner
from tracker_saver.save.pipeline import Pipeline, check_save_kwargs, is_writing
from tracker_saver.save.preemption import DEFAULT_GRACE_S
from tracker_saver.save.setup import check_options, check_registry_outside, open_targets, upload_info
from tracker_saver.save.snapshot import BufferPool, take_snapshot

__all__ = ["RunContext", "TrackerSaver"]

log = logging.getLogger(__name__)


class TrackerSaver(DiskSaver):
    """Save Ignite checkpoints to cycled slot keys at ``output_uri`` and record each one.

    It is a ``DiskSaver`` because Ignite treats one specially: ``Checkpoint.last_checkpoint`` and
    ``Checkpoint.reload_objects`` look for ``save_handler.dirname / filename`` only when the handler
    is a ``DiskSaver``, so each live checkpoint also appears in ``dirname`` (see ``dirname`` below).

    Every checkpoint becomes a record named by Ignite's semantic filename, with typed metadata
    (global_step, score, priority, slot, sha256, …). Its bytes go to
    ``<output_uri>/<project>/<run>/<basename>.slot<k><ext>``, so a stream never holds more than
    its ``n_saved`` objects, even across restarts. A stream has one writer at a time: a second
    saver on the same output_uri, project, run and basename gets ``StreamBusyError``.

    Args:
        output_uri: a local folder, ``file:///path`` or ``s3://BUCKET/PREFIX``. Holds checkpoint
            objects only: never the registry. With ClearML, defaults to the task's output_uri.
        project: namespace of the run (any text; keys use a safe slug, ``/`` makes
            subfolders); with ClearML the task's project, else ``"default"``.
        run: the run (any text); a new process with the same ``run`` continues its streams'
            slots. With ClearML ``"<task name>.<task id>"``, else ``"default"``.
        registry: ``None`` (``$TRACKER_SAVER_REGISTRY`` or ``~/.tracker_saver/registry.db``),
            a SQLite path, ``"clearml"``, or a ``Registry``.
        storage_options: options for the storage backend (S3: ``endpoint_url``, ``profile``, …).
        pre_upload: a list of callbacks run after the slot allocator (``None``: none); see
            :class:`CallbackChain`.
        post_upload: a list of callbacks run once the bytes are complete, before the record is live.
        save_on_rank: in distributed training, the rank that serializes, uploads and registers
            (like Ignite's ``DiskSaver``). The others open no registry and no storage, and do
            no I/O; construction, each save and :meth:`flush` are collectives that raise the
            saving rank's failure on every rank. Build the saver on every rank, inside the
            function ``idist.Parallel`` runs. See docs/ddp.md.
        async_upload: the training thread only copies the checkpoint's tensors into reused
            CPU buffers and returns; serialization, upload and registration run on a
            background thread, in Ignite's order. Errors are raised by the next save or by
            :meth:`flush`; call :meth:`attach` (or :meth:`flush`/:meth:`close`) so a run ends
            with its checkpoints durable. Off by default: see docs/async.md.
        max_pending: with ``async_upload``, how many snapshots may wait or upload at once
            (each is a copy of the checkpoint in memory); a save beyond that waits for the
            oldest to end, which an outage bounds by ``timeout``, and raises its error if it failed.
        timeout: the longest, in seconds, one save waits on an S3 endpoint or a ClearML server
            that stopped answering (refused, frozen, or answering 5xx) before it raises
            ``StorageError`` or ``RegistryError``; an outage shorter than about half of it is
            ridden through by retries. Sets the S3 storage option ``timeout`` and the ClearML
            registry's. Default 60 s; see docs/outages.md.
        lineage: add what made each checkpoint to its metadata, computed once: ``git_commit``,
            ``git_dirty``, ``host``, ``command`` (secrets masked), ``python``, ``torch``,
            ``ignite``, ``clearml_task_id``; see :mod:`tracker_saver.save.lineage`. Pre-upload
            callbacks see these keys and may change or drop them (the callback wins).
        dirname: a local folder (outside output_uri) where each live checkpoint also appears
            under its filename, as with Ignite's ``DiskSaver``, so ``Checkpoint.last_checkpoint``,
            ``reload_objects`` and ``load_objects`` work. A local output_uri gets hard links
            there (no copy); S3 (or a dirname on another file system) gets a verified copy when
            each save is live if you pass ``dirname``, else only on :meth:`get_local_copy`. Default
            ``~/.cache/tracker_saver/checkpoints/<hash of output_uri>/<project>/<run>``.
        save_kwargs: keywords passed on to ``torch.save`` (``pickle_protocol``,
            ``_use_new_zipfile_serialization``…), as ``DiskSaver(**kwargs)`` does; checked here.
        keep_every: also keep a save outside the slots every N epochs or iterations of the trainer
            (:meth:`attach` it) or minutes of wall time (``"10 epochs"``, ``"30 min"``, a ``KeepEvery``):
            a stream then holds ``n_saved`` slots plus its archive (docs/lifecycle.md).
        keep_every_max: the most archive entries a stream keeps (oldest go first); ``None``: all.
        history: a ``Retention``: :meth:`close` prunes this run's old records by it. SQLite only (docs/lifecycle.md).
        webhook: a ``Webhook(url, secret)``: POST every event, signed, from a thread a save only wakes. SQLite only.
            ``Webhook()`` reads both from ``TRACKER_SAVER_WEBHOOK_URL`` and ``TRACKER_SAVER_WEBHOOK_SECRET``.

    Raises:
        ConfigError: at construction, for an unwritable or unknown output_uri, a bad
            project/run name, or a registry inside output_uri.

    Examples:
        >>> import tempfile, torch
        >>> from ignite.engine import Engine, Events
        >>> from ignite.handlers import Checkpoint
        >>> root = tempfile.mkdtemp()
        >>> saver = TrackerSaver(root + "/ckpt", project="demo", run="r1", registry=root + "/reg.db")
        >>> trainer = Engine(lambda e, b: None)
        >>> ckpt = Checkpoint({"model": torch.nn.Linear(2, 1)}, saver, n_saved=1)
        >>> _ = trainer.add_event_handler(Events.EPOCH_COMPLETED, ckpt)
        >>> _ = trainer.run([0, 1], max_epochs=3)
        >>> [r.name for r in saver.records(live=True)]
        ['model_6.pt']
    """

    _COPY_TO_DIRNAME = False  # copy (S3, no hard link) each live checkpoint only when dirname= is given

    def __init__(
        self,
        output_uri: str | os.PathLike[str] | None = None,
        *,
        project: str | None = None,
        run: str | None = None,
        registry: str | os.PathLike[str] | Registry | None = None,
        storage_options: Mapping[str, Any] | None = None,
        pre_upload: Iterable[PreUploadCallback] | None = None,
        post_upload: Iterable[PostUploadCallback] | None = None,
        save_on_rank: int = 0,
        async_upload: bool = False,
        max_pending: int = 1,
        timeout: float = DEFAULT_TIMEOUT_S,
        lineage: bool = True,
        dirname: str | os.PathLike[str] | None = None,
        save_kwargs: Mapping[str, Any] | None = None,
        keep_every: KeepEvery | str | None = None,
        keep_every_max: int | None = None,
        history: Retention | None = None,
        webhook: Webhook | None = None,
    ) -> None:
        self.kwargs = check_save_kwargs(save_kwargs)
        archive = Archive.of(keep_every, keep_every_max, owner=ensure_owner)
        self._after_save = AfterSave(history=history, webhook=webhook, archive=archive)
        self.callbacks = CallbackChain(pre_upload, post_upload)
        timeout = check_options(max_pending=max_pending, timeout=timeout, lineage=lineage)
        self.save_on_rank = check_save_on_rank(save_on_rank)
        # The world is fixed here: a saver made before the process group would think every rank saves.
        self._world_size = idist.get_world_size()
        self._saving = self._world_size <= 1 or idist.get_rank() == self.save_on_rank
        opened, spec, self.project, self.run, self.storage = open_targets(
            registry, project=project, run=run, output_uri=output_uri, storage_options=storage_options, timeout=timeout
        )
        folder = Path(dirname).expanduser() if dirname else default_dirname(self.storage.uri, self.project, self.run)
        self._view = LocalView(folder.absolute(), self.storage, copies=bool(dirname) or self._COPY_TO_DIRNAME)
        # Not DiskSaver.__init__: it makes `dirname` at once (before our checks), raising a bare ValueError on the
        # saving rank only. Ignite reads `dirname` alone; `save_on_rank` and `kwargs` above are DiskSaver's others.
        self.dirname = self._view.folder
        self._registry_spec = spec  # None: an instance or a tracker's registry, `opened`
        self._registry: Registry | None = opened
        self._timeout = timeout
        self._background: Background | None = None
        self._async = async_upload
        self._buffers = BufferPool()
        self._holder = new_holder(self)
        self._pipeline: Pipeline | None = None
        self._removed: BaseException | None = None  # a distributed remove's error, raised by the save after it
        self._lineage: dict[str, MetaValue] = compute_lineage() if lineage and self._saving else {}
        # The other ranks wait here for the saving rank's registry and storage, so a later
        # resume on them finds the registry created, and a bad argument raises on every rank.
        share_outcome(lambda: self._open_for_saving(spec), src=self.save_on_rank, what="TrackerSaver's set-up")
        if async_upload and self._saving:
            self._background = Background(max_pending=max_pending)

    def _open_for_saving(self, spec: RegistrySpec | None) -> None:
        """Check output_uri, open (create, migrate) the registry and recover this run's streams."""
        # Validate everything before creating anything: a bad argument leaves no folder or file.
        # The registry file is checked (not opened) first, as check() creates output_uri's folder.
        db_path = spec.location if spec is not None else None
        check_registry_outside(self.storage, db_path)
        if db_path is not None:
            check_registry_path(db_path)
        self.storage.check()
        if self._view.places:
            self._view.check()
        registry = self._registry or open_registry(self._registry_spec)
        self._registry = registry
        # Which registry is the first thing to know when `tracker-saver models list` finds nothing.
        log.info(
            "%s/%s: records in registry %s, checkpoints at %s",
            self.project,
            self.run,
            redact_url(registry.uri),
            self.storage.uri,
        )
        if isinstance(registry, RunContext):
            # A tracker may have patched torch.save (ClearML's Task.init does): skip our slot writes.
            registry.guard_writes(is_writing)
        self._pipeline = Pipeline(
            self.storage,
            registry,
            self.callbacks,
            self._holder,
            save_kwargs=self.kwargs,
            view=self._view,
            after_save=self._after_save,  # keep_every's archive keep: the save's last step
        )
        self._pipeline.recover(self.project, self.run)
        # Once, after recovery settled the earlier process's records: a rerun script would replace them unannounced.
        if (continuing := continued(registry, self.storage.uri, self.project, self.run)) is not None:
            log.info("%s", continuing)
        self._after_save.open(registry, Query(output_uri=self.storage.uri, project=self.project, run=self.run))

    @property
    def registry(self) -> Registry:
        """Where this saver's records live.

        On a rank that does not save, it is opened on first use (by :func:`tracker_saver.resume`,
        :meth:`records`), never created, and only read.
        """
        if self._registry is None:
            self._registry = open_for_reading(self._registry_spec, timeout=self._timeout)
        return self._registry

    def _pipeline_of_saving_rank(self) -> Pipeline:
        assert self._pipeline is not None, "only the saving rank has a pipeline"
        return self._pipeline

    def __call__(self, checkpoint: Mapping[str, Any], filename: str, metadata: Mapping[str, Any] | None = None) -> None:
        """Save one checkpoint (Ignite calls this after ``remove`` of the one it replaces).

        In distributed training every rank calls it (Ignite does): the saving rank saves, then
        every rank raises that save's error, if any (:func:`tracker_saver.save.distributed.share_outcome`).
        What the save cost goes on its record (:mod:`tracker_saver.core.timings`), timed from here.
        """
        clock = SaveClock.start(background=self._background is not None)
        check_world(self._world_size)
        if self._world_size <= 1:
            self._call(checkpoint, filename, metadata, clock)
            return
        share_outcome(
            lambda: self._call(checkpoint, filename, metadata, clock),
            src=self.save_on_rank,
            what=f"the checkpoint save of {filename!r}",
        )

    def _call(
        self, checkpoint: Mapping[str, Any], filename: str, metadata: Mapping[str, Any] | None, clock: SaveClock
    ) -> None:
        if self._removed is not None:  # the remove Ignite made just before this save failed
            error, self._removed = self._removed, None
            raise error
        # Where training is, for keep_every: read at Ignite's call, as a background save runs after training moved on.
        at = self._after_save.now()
        info = upload_info(
            filename, metadata, project=self.project, run=self.run, lineage=self._lineage, output_uri=self.storage.uri
        )
        if self._background is None:
            self._save(checkpoint, info, clock, at)
            return
        with self._background.reserve() as enqueue:  # waits while max_pending snapshots are pending
            try:
                snapshot = take_snapshot(checkpoint, self._buffers)
            except Exception as exc:
                if (interrupt := interrupt_behind(exc)) is not None:
                    raise interrupt from None  # Ctrl-C during the copy: an interrupt, not a bad to_save
                raise SerializationError(
                    f"could not copy {filename!r} for a background save: {exc!r}; put only "
                    "state_dict()-able objects in Checkpoint's to_save"
                ) from exc
            clock.handed_over()  # before the queue takes it: the worker reads it after (a queue put is µs)
            enqueue(lambda: self._save(snapshot.checkpoint, info, clock, at), what=filename, done=snapshot.release)

    def _save(self, checkpoint: Mapping[str, Any], info: UploadInfo, clock: SaveClock, at: float | None) -> None:
        try:
            self._pipeline_of_saving_rank().save(checkpoint, info, clock, at=at)
        except TypeError as exc:
            # Ignite retries save_handler(checkpoint, filename) on TypeError: never let one out.
            raise SerializationError(f"saving {info.filename!r} failed: {exc!r}") from exc

    def remove(self, filename: str) -> None:
        """Ignite dropped ``filename``: the next save of its stream replaces its slot.

        The record stays live until that save reaches its commit point, so a failed save never
        costs the last good checkpoint. Harmless for a name that never finished saving.
        In distributed training only the saving rank acts, and an error here is raised by the
        save Ignite makes right after (on every rank), not here: the other ranks are about to
        wait for that save's outcome.
        """
        if not self._saving:
            return
        if self._world_size <= 1:
            self._remove(filename)
            return
        try:
            self._remove(filename)
        except BaseException as exc:
            self._removed = self._removed or exc

    def _remove(self, filename: str) -> None:
        remove = self._pipeline_of_saving_rank().remove
        if self._background is None:
            remove(filename, project=self.project, run=self.run)
        else:  # in order with the saves before and after it
            self._background.submit(
                lambda: remove(filename, project=self.project, run=self.run), what=f"remove {filename}"
            )

    def stream_id(self, stream: str) -> StreamId:
        """The identity of this saver's stream ``stream`` (Ignite's basename, e.g. ``best_model``)."""
        return StreamId(self.storage.uri, self.project, self.run, stream)

    def adopt(self, stream: str, filenames: Iterable[str]) -> None:
        """Claim ``stream`` and tell the slot allocator that Ignite keeps these filenames.

        :func:`tracker_saver.resume` calls this after restoring a handler's ``_saved``; with
        ``include_self=True`` the saver learns it from each checkpoint by itself. Does nothing
        on a rank that does not save (it writes no stream).

        Raises:
            StreamBusyError: another live saver writes the stream.
        """
        if not self._saving:
            return
        stream_id = self.stream_id(stream)
        pipeline = self._pipeline_of_saving_rank()
        pipeline.open(stream_id)
        pipeline.slots.adopt(stream_id, filenames)

    def get_local_copy(self, filename: str) -> str | None:
        """A local path to ``filename``'s bytes, checked against the record's sha256; ``None`` if not live.

        The file is ``dirname / filename`` (what ``Checkpoint.last_checkpoint`` names): a hard link
        or a verified download of the slot object, as Ignite's ``ClearMLSaver.get_local_copy``
        gives a local copy. In distributed training, call it on the saving rank.

        Raises:
            IntegrityError: the object no longer matches its record (nothing is written).

        Examples:
            >>> import tempfile, torch
            >>> from ignite.handlers import Checkpoint
            >>> root = tempfile.mkdtemp()
            >>> saver = TrackerSaver(root + "/ckpt", registry=root + "/reg.db", dirname=root + "/named")
            >>> ckpt = Checkpoint({"model": torch.nn.Linear(2, 1)}, saver)
            >>> ckpt(Engine(lambda e, b: None))
            >>> saver.get_local_copy("model_0.pt") == str(ckpt.last_checkpoint)
            True
        """
        found = [r for r in self.records(live=True) if r.filename == filename]
        return str(self._view.local_copy(found[-1])) if found else None

    def check(self) -> None:
        """Check again that output_uri can be written (the constructor already did once).

        For S3 this reaches the endpoint: wrong credentials, a missing bucket or a wrong
        endpoint raise ``ConfigError`` here, before training spends time.
        """
        self.storage.check()

    def add_pre_upload(self, callback: PreUploadCallback) -> None:
        """Add a pre-upload callback; it runs after the slot allocator."""
        self.callbacks.add_pre(callback)

    def add_post_upload(self, callback: PostUploadCallback) -> None:
        """Add a post-upload callback."""
        self.callbacks.add_post(callback)

    def records(self, *, live: bool | None = None) -> list[Record]:
        """This run's records at this output_uri, oldest first; ``live=True`` keeps only loadable ones."""
        states = None if live is None else LOADABLE if live else tuple(s for s in RecordState if s not in LOADABLE)
        query = Query(output_uri=self.storage.uri, project=self.project, run=self.run, states=states)
        return self.registry.records.query(query)

    def flush(self, timeout: float | None = None) -> None:
        """Block until every save is durable and registered, then raise the first error any met.

        Synchronous saves are done when they return, so this only waits with ``async_upload``.
        In distributed training with ``async_upload`` it is a collective: call it on every rank
        (:meth:`attach` does); every rank raises the saving rank's error.

        Raises:
            FlushTimeoutError: ``timeout`` seconds passed first; it names the saves not yet durable.
        """
        if self._world_size > 1 and self._async:
            share_outcome(lambda: self._flush(timeout), src=self.save_on_rank, what="the background checkpoint saves")
        else:
            self._flush(timeout)

    def _flush(self, timeout: float | None = None) -> None:
        if self._background is not None:
            self._background.flush(timeout)

    def attach(
        self,
        engine: Engine,
        *,
        save_on_sigterm: Callable[[Engine], Any] | None = None,
        sigterm_grace: float = DEFAULT_GRACE_S,
    ) -> None:
        """Flush when ``engine`` completes or raises, so a run ends with its checkpoints durable.

        On ``EXCEPTION_RAISED`` the training error is raised again after the flush (Ignite
        would otherwise treat the handler as having dealt with it); a background save error
        met during that flush becomes its ``__context__``.

        Args:
            engine: the trainer.
            save_on_sigterm: a ``Checkpoint`` handler to run once on SIGTERM (preemption): the
                engine stops after the current iteration, the handler saves, the saver flushes,
                stderr says what is durable, and the process exits with status 143 within
                ``sigterm_grace`` seconds of the signal (plus one synchronous save's time);
                see :mod:`tracker_saver.save.preemption`. Needs the main thread.
            sigterm_grace: seconds from SIGTERM to exit (default 25, under the 30 s grace
                Kubernetes and Slurm give by default).

        Examples:
            >>> import tempfile, torch
            >>> from ignite.handlers import Checkpoint
            >>> root = tempfile.mkdtemp()
            >>> saver = TrackerSaver(root + "/ckpt", registry=root + "/reg.db", async_upload=True)
            >>> trainer = Engine(lambda e, b: None)
            >>> last = Checkpoint({"model": torch.nn.Linear(2, 1)}, saver, n_saved=1)
            >>> _ = trainer.add_event_handler(Events.EPOCH_COMPLETED, last)
            >>> saver.attach(trainer, save_on_sigterm=last)
            >>> _ = trainer.run([0, 1], max_epochs=2)  # durable when run() returns
            >>> [r.name for r in saver.records(live=True)]
            ['model_4.pt']
        """
        if save_on_sigterm is not None:
            preemption.save_on_sigterm(
                engine, save_on_sigterm, flush=self.flush, durable=lambda: self.records(live=True), grace=sigterm_grace
            )
        self._after_save.attach(engine)  # keep_every's epochs and iterations are this engine's
        engine.add_event_handler(Events.COMPLETED, lambda _: self.flush())
        engine.add_event_handler(Events.EXCEPTION_RAISED, self._flush_then_reraise)

    def _flush_then_reraise(self, engine: Engine, error: BaseException) -> None:
        if isinstance(error, SystemExit):
            raise error  # preemption's exit: it flushed within its grace already
        try:
            self._flush()  # never a collective here: the other ranks may be anywhere
        except Exception:
            raise error  # noqa: B904 (the training error comes first; the flush error is its __context__)
        raise error

    def close(self, timeout: float | None = None) -> None:
        """Flush, stop the background worker, give up this saver's stream claims and the registry.

        Raises:
            FlushTimeoutError: ``timeout`` seconds passed before the background saves were done.
        """
        try:
            if self._background is not None:
                self._background.close(timeout)
                self._buffers = BufferPool()  # the snapshot buffers kept between saves go
        finally:
            try:
                if self._pipeline is not None:
                    self._pipeline.close()
                self._after_save.close()
            finally:
                release_local(self._holder)
                if self._registry is not None:
                    self._registry.close()

    def __repr__(self) -> str:
        spec = self._registry_spec
        registry = self._registry.uri if self._registry is not None else f"sqlite:///{spec.location if spec else ''}"
        return f"TrackerSaver(output_uri={self.storage.uri!r}, project={self.project!r}, run={self.run!r}, registry={registry!r})"
