"""Which of ``torch.save``'s write buffers a writer may keep and send later: a checkpoint's CPU tensor storages."""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import torch

__all__ = ["StableMemory"]


def _address(view: memoryview) -> int:
    # torch.frombuffer of a read-only view warns; we only read its address. Local, not a global filter.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given buffer is not writable")
        return int(torch.frombuffer(view, dtype=torch.uint8).data_ptr())


class StableMemory:
    """The memory of a checkpoint's CPU tensor storages, which stays as it is until its save ends.

    ``torch.save`` writes each storage with one ``write`` of a memoryview over the storage itself.
    A writer may keep such a view and hash or upload it later instead of copying it, as long as
    the checkpoint is alive and unchanged: in a synchronous save the training thread waits in the
    save; in an asynchronous one the snapshot is the saver's own. Every other buffer ``torch.save``
    passes (zip headers, the pickle, a GPU tensor's temporary CPU copy) may be reused or freed as
    soon as ``write`` returns, so it must be copied: ``view in stable`` says which is which.

    Examples:
        >>> import io
        >>> weights = torch.zeros(1024)
        >>> stable = StableMemory.of({"model": {"w": weights}, "epoch": 3})
        >>> seen = []
        >>> class Writer(io.RawIOBase):
        ...     def write(self, data):
        ...         seen.append(memoryview(data) in stable)
        ...         return len(memoryview(data))
        >>> torch.save({"w": weights}, Writer())
        >>> any(seen), all(seen)
        (True, False)
    """

    def __init__(self, ends: Mapping[int, int] | None = None) -> None:
        self._ends = dict(ends or {})  # storage start address -> end address

    @classmethod
    def of(cls, checkpoint: object) -> StableMemory:
        """The storages of every CPU tensor in ``checkpoint`` (dicts, lists and tuples are walked)."""
        ends: dict[int, int] = {}

        def walk(value: object) -> None:
            if isinstance(value, torch.Tensor):
                if value.device.type == "cpu" and value.layout is torch.strided and not value.is_quantized:
                    storage = value.untyped_storage()
                    if storage.nbytes():
                        ends[storage.data_ptr()] = storage.data_ptr() + storage.nbytes()
            elif isinstance(value, Mapping):
                for item in value.values():
                    walk(item)
            elif isinstance(value, (list, tuple)):
                for item in value:
                    walk(item)

        walk(checkpoint)
        return cls(ends)

    def __bool__(self) -> bool:
        return bool(self._ends)

    def __contains__(self, view: object) -> bool:
        if not self._ends or not isinstance(view, memoryview) or view.nbytes == 0:
            return False
        start = _address(view)
        end = self._ends.get(start)  # torch.save writes a storage whole, from its first byte
        return end is not None and start + view.nbytes <= end
