"""The local side of log upload: which files and how often (checked up front), and a snapshot of each to send."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tracker_saver.core.errors import ConfigError
from tracker_saver.storage.verify import digest

__all__ = ["DEFAULT_FILES", "Sent", "check_every", "check_patterns", "sha256_file", "snapshot_file"]

#: What :class:`~tracker_saver.logs.upload.LogUploader` uploads by default: ``logging`` files under ``logs/`` and
#: TensorBoard event files under ``runs/`` (``SummaryWriter``'s default folder).
DEFAULT_FILES = ("logs/*.log", "runs/**/events.out.tfevents.*")


def check_patterns(files: object) -> tuple[str, ...]:
    """``files`` as a tuple of glob patterns relative to ``root``; ``ConfigError`` for anything else."""
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    if not isinstance(files, Iterable):
        raise ConfigError(f"files={files!r}: pass a list of glob patterns, e.g. {list(DEFAULT_FILES)!r}")
    patterns = []
    for pattern in files:
        if not isinstance(pattern, (str, os.PathLike)) or not os.fspath(pattern).strip():
            raise ConfigError(f"files pattern {pattern!r} is not a glob: pass strings such as 'logs/*.log'")
        text = os.fspath(pattern)
        if "\x00" in text:
            raise ConfigError(f"files pattern {text!r} contains NUL: pass a glob such as 'logs/*.log'")
        if Path(text).is_absolute() or ".." in Path(text).parts:
            raise ConfigError(
                f"files pattern {text!r} reaches outside root=: log keys are the files' paths relative "
                "to root, so pass a relative pattern without '..' and set root= to the folder that holds the logs"
            )
        patterns.append(text)
    if not patterns:
        raise ConfigError(f"files=[] matches nothing: pass glob patterns, e.g. {list(DEFAULT_FILES)!r}")
    return tuple(patterns)


def check_every(every_iterations: object, every_seconds: object) -> tuple[int | None, float | None]:
    """How often to upload: ``(every_iterations, every_seconds)`` checked, at least one of them set."""
    if every_iterations is not None and (
        not isinstance(every_iterations, int) or isinstance(every_iterations, bool) or every_iterations < 1
    ):
        raise ConfigError(f"every_iterations={every_iterations!r}: pass an int >= 1, or None")
    if every_seconds is not None and (
        isinstance(every_seconds, bool)
        or not isinstance(every_seconds, (int, float))
        or not math.isfinite(every_seconds)
        or every_seconds <= 0
    ):
        raise ConfigError(f"every_seconds={every_seconds!r}: pass a number of seconds > 0, or None")
    if every_iterations is None and every_seconds is None:
        raise ConfigError(
            "every_iterations and every_seconds are both None: pass at least one, so logs go up during "
            "the run and not only at its end (e.g. every_seconds=60)"
        )
    return every_iterations, None if every_seconds is None else float(every_seconds)


@dataclass
class Sent:
    """What the last upload of one file sent: the file's (size, mtime_ns) then, and the bytes' sha256."""

    signature: tuple[int, int]
    sha256: str
    size: int


def sha256_file(path: Path) -> str:
    """The sha256 of a file's bytes, read a chunk at a time."""
    with open(path, "rb") as f:
        return digest(f).sha256


def snapshot_file(path: Path, size: int, folder: str) -> tuple[Path, int, str]:
    """Copy the first ``size`` bytes of ``path`` (what it held when stat'ed) to ``folder``: the
    upload then reads a file nobody appends to, so its length and content agree."""
    copy = Path(folder) / path.name
    with open(path, "rb") as src, open(copy, "wb") as dst:
        copied, sha256 = digest(src, into=dst, limit=size)
    return copy, copied, sha256
