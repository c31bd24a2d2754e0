"""A tqdm progress bar for large transfers, fed by s3transfer's byte callbacks."""

from __future__ import annotations

import sys
import threading
from typing import Any

__all__ = ["PROGRESS_BYTES", "Progress"]

#: Transfers at least this large show a tqdm bar, when stderr is a terminal.
PROGRESS_BYTES = 64 * 1024 * 1024


class Progress:
    """An s3transfer callback that shows a tqdm bar once a transfer is large enough.

    The bar appears only when stderr is a terminal (never in CI logs or files) and the transfer
    is known or seen to reach ``PROGRESS_BYTES``.

    Note:
        s3transfer calls it from its worker threads.
    """

    def __init__(self, desc: str, total: int | None, enabled: bool | None) -> None:
        self._desc = desc
        self._total = total
        self._enabled = sys.stderr.isatty() if enabled is None else enabled
        self._seen = 0
        self._bar: Any = None
        self._lock = threading.Lock()

    def __call__(self, nbytes: int) -> None:
        if not self._enabled:
            return
        with self._lock:
            self._seen += nbytes
            if self._bar is None:
                if max(self._seen, self._total or 0) < PROGRESS_BYTES:
                    return
                from tqdm.auto import tqdm

                self._bar = tqdm(
                    total=self._total,
                    desc=self._desc,
                    unit="B",
                    unit_scale=True,
                    unit_divisor=1024,
                    file=sys.stderr,
                    leave=False,
                    initial=self._seen - nbytes,
                )
            self._bar.update(nbytes)

    def close(self) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
