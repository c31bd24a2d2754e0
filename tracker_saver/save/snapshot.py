"""A consistent copy of a checkpoint for a background save: its tensors copied into reused CPU buffers.

The training thread takes the snapshot and goes on; the copy is what gets serialized, so
training may change its weights at once. Buffers go back to a :class:`BufferPool` when the save
is done and are reused by the next snapshot of the same shapes, so steady-state saving
allocates nothing. Tensors on a GPU are copied into pinned buffers (asynchronous device-to-host
copies, then one synchronize).
"""

from __future__ import annotations

import copy
import threading
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["BufferPool", "Snapshot", "take_snapshot"]

_Shape = tuple[tuple[int, ...], torch.dtype, bool]


class BufferPool:
    """CPU tensors kept for reuse, by shape, dtype and pinning.

    Examples:
        >>> pool = BufferPool()
        >>> a = pool.take(torch.zeros(3))
        >>> pool.give([a]); pool.take(torch.ones(3)) is a
        True
    """

    def __init__(self) -> None:
        self._free: dict[_Shape, list[torch.Tensor]] = defaultdict(list)
        self._lock = threading.Lock()

    def take(self, like: torch.Tensor) -> torch.Tensor:
        """A CPU buffer shaped like ``like`` (pinned if ``like`` is on a GPU), reused when one is free."""
        pinned = like.is_cuda
        key = (tuple(like.shape), like.dtype, pinned)
        with self._lock:
            if self._free[key]:
                return self._free[key].pop()
        return torch.empty(like.shape, dtype=like.dtype, pin_memory=pinned)

    def give(self, buffers: list[torch.Tensor]) -> None:
        """Return buffers once nothing reads them any more."""
        with self._lock:
            for buffer in buffers:
                self._free[(tuple(buffer.shape), buffer.dtype, buffer.is_pinned())].append(buffer)

    @property
    def nbytes(self) -> int:
        """Bytes held by free buffers."""
        with self._lock:
            return sum(t.nbytes for ts in self._free.values() for t in ts)


class Snapshot:
    """A checkpoint's copy and the pool buffers it uses; ``release()`` gives them back."""

    def __init__(self, checkpoint: Mapping[str, Any], buffers: list[torch.Tensor], pool: BufferPool) -> None:
        self.checkpoint = checkpoint
        self._buffers = buffers
        self._pool = pool

    @property
    def nbytes(self) -> int:
        """Bytes of tensor data in the copy."""
        return sum(t.nbytes for t in self._buffers)

    def release(self) -> None:
        """Give the buffers back to the pool (the copy must not be read afterwards)."""
        self._pool.give(self._buffers)
        self._buffers = []


def take_snapshot(checkpoint: Mapping[str, Any], pool: BufferPool) -> Snapshot:
    """Copy ``checkpoint``: tensors into pool buffers, every other value with ``copy.deepcopy``.

    Dicts, lists and tuples (named tuples included) are rebuilt with their types; a tensor that
    appears twice (tied weights) is copied once, so it stays shared, as ``torch.save`` keeps it.
    Strided tensors only are pooled; others (sparse, quantized…) are copied with ``clone``.

    Examples:
        >>> weights = {"w": torch.ones(2)}
        >>> snap = take_snapshot({"model": weights}, BufferPool())
        >>> _ = weights["w"].add_(1)
        >>> snap.checkpoint["model"]["w"].tolist()
        [1.0, 1.0]
    """
    buffers: list[torch.Tensor] = []
    copies: dict[int, torch.Tensor] = {}
    on_gpu = False

    def copy_tensor(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal on_gpu
        if id(tensor) in copies:
            return copies[id(tensor)]
        if tensor.layout is not torch.strided or tensor.is_quantized or tensor.device.type not in ("cpu", "cuda"):
            out = tensor.detach().to("cpu", copy=True)
        else:
            out = pool.take(tensor)
            buffers.append(out)
            out.copy_(tensor.detach(), non_blocking=tensor.is_cuda)
            on_gpu = on_gpu or tensor.is_cuda
        if isinstance(tensor, torch.nn.Parameter):
            out = torch.nn.Parameter(out, requires_grad=tensor.requires_grad)
        copies[id(tensor)] = out
        return out

    def walk(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return copy_tensor(value)
        if isinstance(value, dict):
            out = copy.copy(value)  # keeps the type (OrderedDict) and attributes such as _metadata
            for k, v in value.items():
                out[k] = walk(v)
            return out
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, tuple):
            items = [walk(v) for v in value]
            return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
        return copy.deepcopy(value)

    try:
        checkpoint_copy = walk(checkpoint)
        if on_gpu:
            torch.cuda.synchronize()  # the non-blocking device-to-host copies are complete
    except BaseException:
        pool.give(buffers)
        raise
    return Snapshot(checkpoint_copy, buffers, pool)
