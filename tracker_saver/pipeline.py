"""The ordered save and evict steps: the one place that touches storage and registry together.

Save, in DESIGN's order: callbacks (slot allocator first) → record ``pending`` → serialize
and hash while writing the slot atomically → check the object's size → post-upload callbacks →
record ``live``. Any failure marks the record ``failed``, gives the slot back, and raises.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO

import torch

from tracker_saver.callbacks import CallbackChain
from tracker_saver.errors import IntegrityError, SerializationError, StorageError, TrackerSaverError
from tracker_saver.records import Record, UploadInfo
from tracker_saver.registry.base import Registry
from tracker_saver.slots import SlotAllocator
from tracker_saver.storage.base import Storage

__all__ = ["HashingWriter", "Pipeline", "is_writing", "writing"]

log = logging.getLogger(__name__)

_local = threading.local()


def is_writing() -> bool:
    """Whether this thread is inside a pipeline's ``torch.save`` (for framework bindings).

    ClearML patches ``torch.save`` to upload whatever it sees; ``tracker_saver.clearml``
    asks this to make ClearML's binding skip our writes, so there is never a second copy.
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


class HashingWriter:
    """A write-only file that hashes and counts what passes through to ``target``.

    It has no ``name`` attribute on purpose: ClearML's ``torch.save`` binding registers only
    files it can name, so our writes never become a second, untracked upload.
    """

    def __init__(self, target: BinaryIO) -> None:
        self._target = target
        self._sha = hashlib.sha256()
        self.size = 0
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        try:
            self._target.write(view)
        except OSError as exc:
            self.error = exc  # torch may rewrap it; keep the original for the error message
            raise
        self._sha.update(view)
        self.size += view.nbytes
        return view.nbytes

    def flush(self) -> None:
        self._target.flush()

    @property
    def sha256(self) -> str:
        return self._sha.hexdigest()


class Pipeline:
    """Runs one save or one remove against a storage and a registry.

    Args:
        storage: where slot objects are written.
        registry: where records are kept.
        slots: the slot allocator (also the first pre-upload callback).
        callbacks: the user's pre/post-upload callbacks, run after the allocator.
    """

    def __init__(self, storage: Storage, registry: Registry, slots: SlotAllocator, callbacks: CallbackChain) -> None:
        self.storage = storage
        self.registry = registry
        self.slots = slots
        self.callbacks = callbacks

    def save(self, checkpoint: Mapping[str, Any], info: UploadInfo) -> Record | None:
        """Write ``checkpoint`` to the slot chosen for ``info`` and commit its record live."""
        info = self.slots(info)
        try:
            final = self.callbacks.run_pre(info)
            if final is not None:
                assert final.key is not None
                record = self.registry.create_pending(final, uri=self.storage.url(final.key))
        except BaseException:
            self.slots.release(info)
            raise
        if final is None:
            self.slots.release(info)
            log.debug("upload of %s skipped by a pre-upload callback", info.filename)
            return None
        info = final
        assert info.key is not None
        self.slots.bind(info.filename, record.id)
        try:
            sha256, size = self._write(checkpoint, info.key)
            info.metadata.update(sha256=sha256, size=size, uri=record.uri)
            self.callbacks.run_post(info)
            return self.registry.commit(record.id, sha256=sha256, size=size, metadata=info.metadata)
        except BaseException as exc:
            self.slots.release(info)
            try:
                self.registry.fail(record.id, f"{type(exc).__name__}: {exc}")
            except TrackerSaverError:
                log.exception("could not mark record %s failed", record.id)
            raise

    def _write(self, checkpoint: Mapping[str, Any], key: str) -> tuple[str, int]:
        writer: HashingWriter | None = None
        try:
            with self.storage.writer(key) as target:
                writer = HashingWriter(target)
                with writing():
                    torch.save(checkpoint, writer)  # type: ignore[arg-type]
        except TrackerSaverError:
            raise
        except Exception as exc:
            if writer is not None and writer.error is not None:
                raise StorageError(f"writing {self.storage.url(key)} failed: {writer.error}", key=key) from writer.error
            if isinstance(exc, OSError):
                raise StorageError(f"writing {self.storage.url(key)} failed: {exc}", key=key) from exc
            # TypeError (e.g. "cannot pickle '_thread.lock'") must not escape as such:
            # Ignite would retry the handler without metadata and hide this failure.
            raise SerializationError(
                f"torch.save could not serialize the checkpoint for {key!r}: {exc!r}; "
                "put only state_dict()-able objects in Checkpoint's to_save"
            ) from exc
        assert writer is not None
        stat = self.storage.stat(key)
        if stat is None or stat.size != writer.size:
            raise IntegrityError(
                f"{self.storage.url(key)} holds {stat.size if stat else 'no'} bytes after writing "
                f"{writer.size}: the write did not complete",
                key=key,
            )
        return writer.sha256, writer.size

    def remove(self, filename: str) -> Record | None:
        """Ignite's ``remove``: evict the record and free its slot; its bytes stay until reused."""
        record_id = self.slots.remove(filename)
        if record_id is None:
            log.debug("remove(%r): no saved record of that name; nothing to do", filename)
            return None
        return self.registry.evict(record_id)

