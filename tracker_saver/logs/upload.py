"""Upload a run's log files to ``<output_uri>/<project>/<run>/logs/``, off the training thread.

:class:`LogUploader` is an Ignite handler: every N iterations or seconds, and always at
``COMPLETED`` and ``EXCEPTION_RAISED``, it uploads the files its globs match that changed since
their last upload (by size and mtime; the final upload also compares a content hash). Each
upload copies a snapshot of the file's current bytes first, so a file that a logging handler
is still appending to goes up whole and consistent. The uploads run on a
:class:`tracker_saver.save.background.Background` worker of their own, so the network never blocks
training, and a failure is raised on the training thread by the next upload or at the end of the
run, never only logged (DESIGN invariant 5).

Log objects are not checkpoint objects: they live under the run's own ``logs/`` folder, which
no stream's slot keys, footprint or ``fsck`` ever count. :func:`list_logs` and
:func:`download_logs` read them back (``tracker-saver runs logs``; :mod:`tracker_saver.logs.read`,
re-exported here). Which files, how often, and the snapshot of each are
:mod:`tracker_saver.logs.files`'s.

Examples:
    >>> import tempfile
    >>> list_logs("demo", "r1", output_uri=tempfile.mkdtemp())
    []
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tracker_saver.core.errors import ClosedError, ConfigError, RegistryError, StorageError
from tracker_saver.core.masking import strip_userinfo
from tracker_saver.core.naming import check_name, log_key, logs_prefix
from tracker_saver.core.outage import DEFAULT_TIMEOUT_S
from tracker_saver.logs.files import DEFAULT_FILES, Sent, check_every, check_patterns, sha256_file, snapshot_file
from tracker_saver.logs.read import LogObject, download_logs, list_logs
from tracker_saver.registry.context import RunContext
from tracker_saver.save.background import Background
from tracker_saver.save.ignite_engine import handler_count, run_last_added_before_save_handlers
from tracker_saver.storage import Storage, is_remote, open_storage

if TYPE_CHECKING:
    from ignite.engine import Engine

    from tracker_saver.save.saver import TrackerSaver

__all__ = [
    "DEFAULT_FILES",
    "ArtifactTask",
    "LogObject",
    "LogUploader",
    "download_logs",
    "list_logs",
    "log_key",
    "logs_prefix",
]

log = logging.getLogger(__name__)


@runtime_checkable
class ArtifactTask(Protocol):
    """An experiment tracker's task that shows files in its UI: ``clearml.Task`` is one."""

    def upload_artifact(
        self, name: str, artifact_object: Any, metadata: Mapping[str, Any] | None = ..., wait_on_upload: bool = ...
    ) -> bool:
        """Attach ``artifact_object`` (a local file, or the URL of a remote object) as ``name``."""
        ...


class LogUploader:
    """Upload a run's log files to ``<output_uri>/<project>/<run>/logs/`` while it trains.

    Every ``every_iterations`` iterations or ``every_seconds`` seconds (whichever comes first),
    and always when the engine completes or raises, the files that ``files`` match under
    ``root`` and that changed since their last upload go up, each as a snapshot of its current
    bytes, keyed by its path relative to ``root``. The uploads run on a background thread: a
    periodic upload is skipped while the previous one still runs, so a slow or failing endpoint
    never blocks training. An upload's error is raised by the next periodic upload or at
    ``COMPLETED`` (``StorageError``). At ``EXCEPTION_RAISED`` the training error is logged with
    its traceback and the logs still go up; a failure then is added as a note to the training
    error and printed to stderr, never raised in its place (see :meth:`attach`).

    Args:
        output_uri: a local folder or ``s3://BUCKET/PREFIX``; taken from ``saver`` when given.
        project: the run's project (default ``"default"``); taken from ``saver`` when given.
        run: the run (default ``"default"``); taken from ``saver`` when given.
        files: glob patterns relative to ``root`` (``**`` recurses); default :data:`DEFAULT_FILES`.
        root: the folder the patterns and the keys are relative to; default the current folder.
        every_iterations: upload every this many iterations (``None``: not by iterations).
        every_seconds: upload when this many seconds passed since the last upload, checked
            after each iteration (``None``: not by time). At least one of the two is needed.
        keep_local: ``False`` deletes each local file once its final upload (at ``COMPLETED``,
            ``EXCEPTION_RAISED`` or :meth:`close`) is confirmed: the object exists with the snapshot's size,
            and the file did not change since. A failed upload never deletes anything.
        storage_options: options for the storage backend (S3: ``endpoint_url``, ``profile``…).
        saver: a :class:`~tracker_saver.TrackerSaver` whose output_uri, storage, project, run and
            saving rank to use (the common case); then pass none of those.
        task: a tracker task to attach each log file to as an artifact, so it shows in the
            tracker's UI, e.g. ``clearml.Task.current_task()``. With an S3 output_uri the
            artifact links to the uploaded object; with a local one the tracker uploads a copy.
            With ``saver=`` on a ClearML registry, its task is used when none is given.
        save_on_rank: only this distributed rank uploads (the one that saves checkpoints).

    Raises:
        ConfigError: a bad argument (a pattern that is not a relative glob, ``every_*`` <= 0
            or both ``None``, conflicting ``saver`` and ``output_uri``), or an unusable output_uri.

    Examples:
        >>> import logging, tempfile
        >>> from ignite.engine import Engine
        >>> work = Path(tempfile.mkdtemp()); (work / "logs").mkdir()
        >>> log = logging.getLogger("example"); handler = logging.FileHandler(work / "logs" / "train.log")
        >>> log.addHandler(handler); log.setLevel(logging.INFO)
        >>> trainer = Engine(lambda e, batch: log.info("batch %s", batch))
        >>> uploader = LogUploader(work / "bucket", project="demo", run="r1", root=work, every_iterations=2)
        >>> uploader.attach(trainer)
        >>> _ = trainer.run([1, 2, 3], max_epochs=1)
        >>> [o.name for o in list_logs("demo", "r1", output_uri=work / "bucket")]
        ['train.log']
        >>> log.removeHandler(handler); handler.close(); uploader.close()
    """

    def __init__(
        self,
        output_uri: str | os.PathLike[str] | None = None,
        *,
        project: str | None = None,
        run: str | None = None,
        files: Sequence[str | os.PathLike[str]] | str = DEFAULT_FILES,
        root: str | os.PathLike[str] | None = None,
        every_iterations: int | None = None,
        every_seconds: float | None = 60.0,
        keep_local: bool = True,
        storage_options: Mapping[str, Any] | None = None,
        saver: TrackerSaver | None = None,
        task: ArtifactTask | None = None,
        save_on_rank: int = 0,
    ) -> None:
        self.patterns = check_patterns(files)
        self.every_iterations, self.every_seconds = check_every(every_iterations, every_seconds)
        if not isinstance(keep_local, bool):
            raise ConfigError(f"keep_local={keep_local!r}: pass True (keep the local files) or False")
        if task is not None and not isinstance(task, ArtifactTask):
            raise ConfigError(f"task {task!r} has no upload_artifact(): pass a clearml.Task, or None")
        if not isinstance(save_on_rank, int) or isinstance(save_on_rank, bool) or save_on_rank < 0:
            raise ConfigError(f"save_on_rank={save_on_rank!r}: pass the rank that uploads, an int >= 0")
        self.root = Path(os.getcwd() if root is None else root).expanduser().absolute()
        self.keep_local = keep_local
        self.task = task
        if saver is not None:
            given = [n for n, v in (("output_uri", output_uri), ("project", project), ("run", run)) if v is not None]
            if given or storage_options:
                raise ConfigError(
                    f"LogUploader got saver= and {', '.join(given) or 'storage_options'}: pass either a saver "
                    "(its output_uri, storage, project and run are used) or output_uri/project/run, not both"
                )
            self.storage: Storage = saver.storage
            self.project, self.run = saver.project, saver.run
            self.save_on_rank = saver.save_on_rank
            if task is None and self._is_uploading_rank():
                # A registry that belongs to a tracker task (ClearML) offers it: the logs show there too.
                if isinstance(saver.registry, RunContext):
                    self.task = task = saver.registry.artifact_task()
        else:
            if output_uri is None or not os.fspath(output_uri):
                raise ConfigError("LogUploader needs an output_uri (a folder or s3://BUCKET/PREFIX) or a saver=")
            self.project = check_name("project", "default" if project is None else project)
            self.run = check_name("run", "default" if run is None else run)
            options = dict(storage_options or {})
            if is_remote(output_uri):
                options.setdefault("timeout", DEFAULT_TIMEOUT_S)
            self.storage = open_storage(output_uri, **options)
            self.storage.check()
            self.save_on_rank = save_on_rank
        logs_prefix(self.project, self.run)  # the run's names must make keys: fail now, not at the first upload
        # A local output_uri under root must never be matched by the globs: it would upload its own uploads.
        self._skip = self.storage.local_root
        self._background = Background(max_pending=1, name="tracker-saver-logs")
        self._sent: dict[Path, Sent] = {}  # touched by the worker only
        self._attached: set[str] = set()  # keys attached to ``task``; worker only
        self._last = time.monotonic()  # training thread only
        self._closed = False
        self._crash: BaseException | None = None  # the training error last handled

    # -- the Ignite side (training thread) -------------------------------------------------------
    def attach(self, engine: Engine) -> None:
        """Upload periodically while ``engine`` runs, and finally when it completes or raises.

        On ``EXCEPTION_RAISED`` the training error is first logged with its traceback (logger
        ``tracker_saver.logs.upload``, level ERROR), so a log file that records the root logger holds
        the crash, then the logs go up. That handler runs after the ones you added before and
        before a save handler's (``TrackerSaver.attach`` raises the error again, and Ignite runs
        no handler after one that raises). It never changes whether the error propagates: it
        raises it again only when it is the event's one handler, as Ignite would without any.
        """
        from ignite.engine import Events

        engine.add_event_handler(Events.ITERATION_COMPLETED, self._on_iteration)
        engine.add_event_handler(Events.COMPLETED, self._on_completed)
        engine.add_event_handler(Events.EXCEPTION_RAISED, self._on_exception)
        run_last_added_before_save_handlers(engine, Events.EXCEPTION_RAISED)

    def _is_uploading_rank(self) -> bool:
        import ignite.distributed as idist

        return idist.get_world_size() <= 1 or idist.get_rank() == self.save_on_rank

    def _on_iteration(self, engine: Engine) -> None:
        iteration = engine.state.iteration
        by_count = self.every_iterations is not None and iteration % self.every_iterations == 0
        by_time = self.every_seconds is not None and time.monotonic() - self._last >= self.every_seconds
        if (by_count or by_time) and self._is_uploading_rank():
            self.upload()

    def _on_completed(self, engine: Engine) -> None:
        if self._is_uploading_rank():
            self.upload(final=True)
            self.flush()

    def _on_exception(self, engine: Engine, error: BaseException) -> None:
        from ignite.engine import Events

        alone = handler_count(engine, Events.EXCEPTION_RAISED) == 1
        seen, self._crash = self._crash is error, error
        try:
            # Ignite fires the event a second time for the same error, at the end of run(),
            # when a handler raised it again: its logs went up the first time.
            if self._is_uploading_rank() and not seen:
                log.error("training raised %s: uploading the run's logs", type(error).__name__, exc_info=error)
                self.upload(final=True)
                self.flush()
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            error.add_note(f"tracker_saver: the final upload of the run's logs failed too: {text}")
            print(f"tracker_saver: the final upload of the run's logs failed: {text}", file=sys.stderr)
            if alone:
                raise error  # noqa: B904 (the training error comes first; the upload error is its __context__)
        if alone:
            raise error

    def upload(self, *, final: bool = False) -> None:
        """Queue an upload of every changed file, after raising an earlier upload's error.

        A periodic upload (``final=False``) is skipped while the previous one still runs. A final
        one is always queued, even when an earlier error is raised; it also compares content
        hashes and, with ``keep_local=False``, deletes the files it confirms. :meth:`flush` waits.
        """
        if self._closed:
            raise ClosedError("this LogUploader is closed: create a new one to upload again")
        self._last = time.monotonic()
        if not final:
            self._background.raise_error()
            if self._background.pending():
                return  # the one in flight (or the next) takes these changes too
        self._background.submit(lambda: self._upload_all(final), what="final log upload" if final else "log upload")

    def flush(self, timeout: float | None = None) -> None:
        """Wait until queued uploads are done, then raise the first error any met.

        Raises:
            FlushTimeoutError: ``timeout`` seconds passed first.
        """
        self._background.flush(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Upload what changed since the last upload (lines logged after the run ended), wait
        for it, and stop the upload thread; idempotent.

        Raises:
            StorageError: that upload (or an earlier one not raised yet) failed.
            FlushTimeoutError: ``timeout`` seconds passed first.
        """
        if self._closed:
            return
        try:
            if self._is_uploading_rank():
                self.upload(final=True)
        finally:
            self._closed = True
            self._background.close(timeout)

    def uploaded(self) -> dict[str, str]:
        """``{key: sha256}`` of what this uploader sent last, per file (call after :meth:`flush`)."""
        sent = list(self._sent.items())
        return {log_key(self.project, self.run, p.relative_to(self.root)): s.sha256 for p, s in sent}

    # -- the worker side -----------------------------------------------------------------------
    def _files(self) -> dict[str, Path]:
        """The matched files by key; two files for one key would overwrite each other: an error."""
        found: dict[str, Path] = {}
        for pattern in self.patterns:
            for path in sorted(self.root.glob(pattern)):
                if path.is_file() and not (self._skip is not None and path.resolve().is_relative_to(self._skip)):
                    key = log_key(self.project, self.run, path.relative_to(self.root))
                    if found.setdefault(key, path) != path:
                        raise ConfigError(
                            f"log files {str(found[key])!r} and {str(path)!r} would both upload to {key!r} "
                            "(root's logs/ folder is the run's logs/ folder): narrow files= so that one of them matches"
                        )
        return found

    def _upload_all(self, final: bool) -> None:
        errors: list[Exception] = []
        with tempfile.TemporaryDirectory(prefix="tracker-saver-logs-") as folder:
            for key, path in self._files().items():
                try:
                    self._upload_one(path, key, final, folder)
                except Exception as exc:  # one file's failure must not keep the others from going up
                    errors.append(exc)
        if errors:
            for other in errors[1:]:
                errors[0].add_note(f"another log file failed too: {type(other).__name__}: {other}")
            raise errors[0]

    def _upload_one(self, path: Path, key: str, final: bool, folder: str) -> None:
        try:
            stat = path.stat()
        except FileNotFoundError:
            return  # rotated or deleted since the glob: nothing left to upload
        signature = (stat.st_size, stat.st_mtime_ns)
        sent = self._sent.get(path)
        # The final upload also compares content: a same-size rewrite within one mtime tick
        # keeps the signature.
        unchanged = sent is not None and sent.signature == signature
        if unchanged and not final:
            return
        if unchanged and sent is not None and sha256_file(path) == sent.sha256:
            copy, size, sha256 = None, sent.size, sent.sha256
        else:
            try:
                copy, size, sha256 = snapshot_file(path, stat.st_size, folder)
            except FileNotFoundError:
                return
            except OSError as exc:
                raise StorageError(
                    f"cannot read log file {str(path)!r} ({exc.strerror}) to upload it to {self.storage.url(key)}: "
                    "check its permissions, or narrow files= so it is not matched",
                    key=key,
                ) from exc
            self.storage.put_file(key, copy)
            self._sent[path] = Sent(signature, sha256, size)
        if self.task is not None and (final or key not in self._attached):
            self._attach(path, key, copy, size, sha256)
        if final and not self.keep_local:
            self._delete_confirmed(path, key, signature, size)

    def _attach(self, path: Path, key: str, copy: Path | None, size: int, sha256: str) -> None:
        assert self.task is not None
        name = path.relative_to(self.root).as_posix()
        if is_remote(self.storage.uri):
            target: Any = self.storage.url(key)  # a link to the object: nothing uploaded twice
        elif copy is not None:
            target = copy
        elif key in self._attached:
            return  # the task already has these bytes
        else:
            target = path
        try:
            ok = self.task.upload_artifact(
                name, artifact_object=target, metadata={"key": key, "size": size, "sha256": sha256}, wait_on_upload=True
            )
        except Exception as exc:
            raise RegistryError(
                f"attaching log file {name!r} to task {getattr(self.task, 'id', self.task)!s} failed "
                f"({type(exc).__name__}: {strip_userinfo(str(exc))}): check that the tracker's server is reachable"
            ) from exc
        if ok is False:
            raise RegistryError(
                f"attaching log file {name!r} to task {getattr(self.task, 'id', self.task)!s} failed "
                "(upload_artifact returned False): check the tracker's log and its files server"
            )
        self._attached.add(key)

    def _delete_confirmed(self, path: Path, key: str, signature: tuple[int, int], size: int) -> None:
        stored = self.storage.stat(key)
        if stored is None or stored.size != size:
            raise StorageError(
                f"log object {self.storage.url(key)} is {'missing' if stored is None else f'{stored.size} bytes'} "
                f"after its final upload of {size} bytes: kept the local file {str(path)!r}",
                key=key,
            )
        with contextlib.suppress(FileNotFoundError):
            now = path.stat()
            if (now.st_size, now.st_mtime_ns) == signature:
                path.unlink()
            # else something still writes to it after the run ended: keeping it loses nothing

    def __repr__(self) -> str:
        return (
            f"LogUploader(output_uri={self.storage.uri!r}, project={self.project!r}, run={self.run!r}, "
            f"files={list(self.patterns)!r}, root={str(self.root)!r})"
        )
