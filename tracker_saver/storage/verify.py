"""Read bytes once, hashing as they stream, and check them against the size and sha256 expected of them.

The one verification every reader uses (a download, ``load_checkpoint``, a pin's read-back, the
saver's ``dirname`` copies, log snapshots): :func:`digest` hashes a stream, :func:`check` compares,
:func:`copy_checked` writes a verified local copy. It knows no records: callers say what the
bytes are (``what``) and what to do when they differ (``fix``); the error is always worded the
same way.

Examples:
    >>> import io
    >>> digest(io.BytesIO(b"abc")).size
    3
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from tracker_saver.core.errors import ConfigError, IntegrityError
from tracker_saver.core.wording import plural

__all__ = ["CHUNK", "Digest", "check", "copy_checked", "digest", "file_mode"]

#: Bytes read at a time.
CHUNK = 1 << 20


class Digest(NamedTuple):
    """What identifies a checkpoint's bytes: their size and sha256 (hex)."""

    size: int
    sha256: str


def file_mode() -> int:
    """The mode ``open()`` would give a new file: ``0o666`` less the process's umask (0o644 under 022).

    ``mkstemp`` makes owner-only files; slot files and downloads get this mode instead, as
    Ignite's ``DiskSaver`` files do, so another user or a serving job can read them where the
    umask lets it. The umask is read from ``/proc`` (setting it to read it back would race other
    threads creating files); elsewhere 022 is assumed.

    Examples:
        >>> oct(file_mode() & 0o600)
        '0o600'
    """
    try:
        with open("/proc/self/status") as status:
            umask = next((int(line.split()[1], 8) for line in status if line.startswith("Umask:")), 0o022)
    except OSError:
        umask = 0o022
    return 0o666 & ~umask


def digest(stream: BinaryIO, *, into: BinaryIO | None = None, limit: int | None = None, progress: Any = None) -> Digest:
    """Size and sha256 of what is left to read in ``stream`` (at most ``limit`` bytes), read in 1 MiB chunks.

    With ``into``, each chunk is also written there (one read serves both); ``progress.update(n)``
    is called per chunk when given.

    Examples:
        >>> import io
        >>> out = io.BytesIO()
        >>> digest(io.BytesIO(b"abcdef"), into=out, limit=3), out.getvalue()
        (Digest(size=3, sha256='ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'), b'abc')
    """
    sha, size = hashlib.sha256(), 0
    while (limit is None or size < limit) and (
        chunk := stream.read(CHUNK if limit is None else min(CHUNK, limit - size))
    ):
        sha.update(chunk)
        size += len(chunk)
        if into is not None:
            into.write(chunk)
        if progress is not None:
            progress.update(len(chunk))
    return Digest(size, sha.hexdigest())


def check(found: Digest, expected: Digest, *, what: str, fix: str, **context: Any) -> None:
    """Raise ``IntegrityError`` (with ``context``: ``key``, ``record_id``) when ``found`` is not ``expected``.

    Examples:
        >>> check(Digest(3, "ab" * 32), Digest(3, "cd" * 32), what="s3://b/k", fix="load another record")
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.IntegrityError: s3://b/k has 3 bytes with sha256 abababababab…, expected 3 bytes with sha256 cdcdcdcdcdcd…: load another record
    """
    if found != expected:
        raise IntegrityError(
            f"{what} has {plural(found.size, 'byte')} with sha256 {found.sha256[:12]}…, expected "
            f"{plural(expected.size, 'byte')} with sha256 {expected.sha256[:12]}…: {fix}",
            **context,
        )


@contextlib.contextmanager
def _progress(label: str, total: int | None) -> Iterator[Any]:
    """A tqdm bar on stderr when it is a terminal (a bar that draws nothing otherwise)."""
    from tqdm import tqdm

    with tqdm(
        total=total, desc=label, unit="B", unit_scale=True, unit_divisor=1024, disable=not sys.stderr.isatty()
    ) as bar:
        yield bar


def copy_checked(
    src: BinaryIO, target: Path, expected: Digest, *, what: str, fix: str, label: str, **context: Any
) -> Path:
    """Copy ``src`` to the local file ``target``, replacing it only once the bytes match ``expected``.

    The bytes go to a temp file next to ``target`` (mode as ``open()`` would give), fsynced, and
    renamed into place only when size and sha256 match: nothing half-written or wrong is ever
    left at ``target``. ``target``'s folder must exist. A tqdm bar labelled ``label`` shows on a
    terminal.

    Raises:
        ConfigError: ``target``'s folder does not exist or cannot be written.
        IntegrityError: the bytes differ from ``expected`` (:func:`check`'s message; nothing is written).
    """
    if not target.parent.is_dir():
        raise ConfigError(
            f"cannot write {str(target)!r}: its folder {str(target.parent)!r} does not exist; create it first, "
            "or pass an existing folder"
        )
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-" + target.name[:100] + ".")
    except OSError as exc:
        raise ConfigError(f"cannot write {str(target)!r} ({exc.strerror}): pass a writable destination") from exc
    try:
        with os.fdopen(fd, "wb") as out, _progress(label, expected.size) as bar:
            os.fchmod(fd, file_mode())
            found = digest(src, into=out, progress=bar)
            out.flush()
            os.fsync(out.fileno())
        check(found, expected, what=what, fix=fix, **context)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return target
