"""Local-folder storage: each write is a temp file in the slot's folder, fsync, ``os.replace``.

Only regular files are read or replaced (:func:`~tracker_saver.storage.files.open_regular`): a
symlink, FIFO, device or folder at a key's path, or a symlink on the way to it, is refused with an
``IntegrityError`` naming the path, never followed and never waited on. ``stat`` refuses them too
(that is how ``fsck`` sees them); ``list`` shows each entry as it is (``lstat``); ``delete``
unlinks a symlink or FIFO like a file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit
from urllib.request import url2pathname

from tracker_saver.core.errors import ConfigError, IntegrityError, StorageError
from tracker_saver.core.naming import check_key
from tracker_saver.storage.base import ObjectStat, Stable, Staged, StagedWrite, Storage, listed
from tracker_saver.storage.files import (
    WritebackFile,
    check_regular,
    close_later,
    drop_cached,
    fsync_dir,
    hold,
    open_regular,
)
from tracker_saver.storage.verify import file_mode

__all__ = ["LocalStorage", "LocalWrite", "fingerprint", "from_uri"]

#: Temp files start with this and are invisible to ``list``: a stream's footprint counts
#: only complete objects. A crash leaves at most one such file per slot, easy to find by name.
TEMP_PREFIX = ".tmp-"


def fingerprint(found: os.stat_result) -> str:
    """What identifies one version of a local file: ``<size>:<mtime_ns>:<inode>`` (a rename keeps all three)."""
    return f"{found.st_size}:{found.st_mtime_ns}:{found.st_ino}"


def _stat(key: str, found: os.stat_result) -> ObjectStat:
    return ObjectStat(key, found.st_size, found.st_mtime, fingerprint(found))


class LocalWrite(StagedWrite):
    """A staged write to a local file: a temp file in its folder; the commit point is ``os.replace``.

    The temp file is in the slot's own folder, so ``os.replace`` is an atomic rename: a crash
    leaves either the old slot bytes or the new ones (invariant 6), and at most one temp file.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> staged = LocalWrite(Path(tempfile.mkdtemp()) / "m.slot0.pt", "p/r/m.slot0.pt")
        >>> staged.file.write(b"x"), staged.abort()
        (1, False)
    """

    def __init__(self, path: Path, key: str) -> None:
        self.key = key
        self._path = path
        self._replaced = False
        check_regular(path, key=key)  # a FIFO, symlink or device there is refused before any byte is written
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, self._tmp = tempfile.mkstemp(dir=path.parent, prefix=TEMP_PREFIX + path.name + ".")
        except OSError as exc:
            raise self._error(exc) from exc
        try:
            os.fchmod(fd, file_mode())
        except OSError as exc:
            os.close(fd)
            os.unlink(self._tmp)
            raise self._error(exc) from exc
        self._file = os.fdopen(fd, "wb")
        self.file = WritebackFile(self._file)  # type: ignore[assignment]
        drop_cached(path)  # the bytes this write replaces stay on disk; their cached pages take the new ones

    def _error(self, exc: OSError) -> StorageError:
        return StorageError(f"cannot write {str(self._path)!r}: {exc.strerror}", key=self.key)

    def finish(self) -> None:
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        except OSError as exc:
            raise self._error(exc) from exc

    def commit(self) -> None:
        check_regular(self._path, key=self.key)  # put there since the write began: refused, not replaced
        old = hold(self._path)
        try:
            os.replace(self._tmp, self._path)
            self._replaced = True
            fsync_dir(self._path.parent)
        except OSError as exc:
            raise self._error(exc) from exc
        finally:
            if old is not None:
                close_later(old)

    def create(self) -> bool:
        """A commit point that never replaces: link the staged file to the key; ``False`` if the key exists."""
        try:
            os.link(self._tmp, self._path)
        except FileExistsError:
            return False
        except OSError as exc:
            raise self._error(exc) from exc
        fsync_dir(self._path.parent)
        return True

    def abort(self) -> bool:
        with contextlib.suppress(OSError):
            self._file.close()
        if not self._replaced:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._tmp)
        return self._replaced


class LocalStorage(Storage):
    """Objects as files under a local folder.

    Args:
        root: the folder; created if missing.

    Examples:
        >>> import tempfile
        >>> store = LocalStorage(tempfile.mkdtemp())
        >>> store.put_stream("a/b.slot0.pt", __import__("io").BytesIO(b"x"))
        >>> [s.key for s in store.list()]
        ['a/b.slot0.pt']
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().resolve()
        self.uri = self.root.as_uri()

    @property
    def local_root(self) -> Path:
        """``root``: the objects are files under it."""
        return self.root

    def check(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=self.root, prefix=TEMP_PREFIX):
                pass
        except OSError as exc:
            raise ConfigError(
                f"output_uri {str(self.root)!r} is not a writable folder ({exc.strerror}): "
                "pass a folder you can write to"
            ) from exc

    def _path(self, key: str) -> Path:
        """``key``'s file; a symlink on the way to it is refused (two keys, or a key and a file outside
        the root, would share bytes)."""
        checked = check_key(key)
        folder = str(self.root)  # resolved once: only what lies under it is looked at
        for part in checked.split("/")[:-1]:
            folder = os.path.join(folder, part)
            try:
                is_link = stat.S_ISLNK(os.lstat(folder).st_mode)
            except (FileNotFoundError, NotADirectoryError):
                break  # nothing further exists: a write makes plain folders
            if is_link:
                raise IntegrityError(
                    f"{folder!r} is a symlink on the way to {checked!r}: tracker_saver never follows a link out of "
                    f"output_uri {str(self.root)!r}; put a plain folder there (`tracker-saver fsck` reports it)",
                    key=key,
                )
        return self.root / checked

    def stage(self, key: str, *, stable: Stable | None = None) -> StagedWrite:
        """A temp file next to ``key``'s file; every write goes to it at once (``stable`` changes nothing)."""
        return LocalWrite(self._path(key), key)

    def _walk_top(self, prefix: str) -> Path:
        """The folder that holds every key starting with ``prefix``: the root, or a plain folder
        inside it (never anything a prefix like ``/etc/x`` or ``../x`` would name outside it)."""
        folder = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        parts = folder.split("/")
        if not folder or "\x00" in folder or any(part in ("", ".", "..") for part in parts):
            return self.root
        top = self.root.joinpath(*parts)
        return top if top.resolve() == top else self.root  # a symlink on the way: walk as before, from the root

    def staged(self, prefix: str = "") -> list[Staged]:
        """Temp files (``.tmp-<name>.<random>`` next to their key) of keys starting with ``prefix``."""
        out = []
        top = self._walk_top(prefix)
        for dirpath, _dirs, files in os.walk(top):
            for name in files:
                if not name.startswith(TEMP_PREFIX) or "." not in name[len(TEMP_PREFIX) :]:
                    continue  # check()'s probe has no key
                full = Path(dirpath) / name
                key = (full.parent / name[len(TEMP_PREFIX) :].rsplit(".", 1)[0]).relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    with contextlib.suppress(FileNotFoundError):
                        out.append(Staged(key, str(full), full.lstat().st_mtime))
        return sorted(out, key=lambda s: (s.key, s.ref))

    def abort_staged(self, item: Staged) -> None:
        tmp = Path(item.ref)
        if tmp.parent != self._path(item.key).parent or not tmp.name.startswith(TEMP_PREFIX):
            raise ConfigError(f"{item.ref!r} is not a temp file of {item.key!r} under {str(self.root)!r}")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        with open(path, "rb") as src:
            self.put_stream(key, src)

    def put_stream(self, key: str, stream: BinaryIO) -> None:
        staged = self.stage(key)
        try:
            shutil.copyfileobj(stream, staged.file, 1 << 20)
            staged.finish()
            staged.commit()
        except BaseException as exc:
            staged.abort()
            if isinstance(exc, OSError):  # a write into the temp file (a full disk, say)
                raise StorageError(f"cannot write {str(self._path(key))!r}: {exc.strerror}", key=key) from exc
            raise

    def copy(self, src_key: str, dst_key: str) -> None:
        """Copy through a temp file next to ``dst_key``: fsync, then ``os.link`` (which fails if ``dst_key``
        exists, atomically), fsync the folder."""
        with self.get(src_key) as src:
            staged = LocalWrite(self._path(dst_key), dst_key)
            try:
                shutil.copyfileobj(src, staged.file, 1 << 20)
                staged.finish()
                created = staged.create()
            except OSError as exc:  # a write into the temp file (a full disk, say)
                raise StorageError(f"cannot write {str(self._path(dst_key))!r}: {exc.strerror}", key=dst_key) from exc
            finally:
                staged.abort()  # the temp name goes; a link made stays
        if not created:
            raise StorageError(
                f"cannot copy {src_key!r} to {str(self._path(dst_key))!r}: an object is there already, and a copy "
                "never replaces one; copy to a new key",
                key=dst_key,
            )

    def get(self, key: str) -> contextlib.AbstractContextManager[BinaryIO]:
        path = self._path(key)
        try:
            return os.fdopen(open_regular(path, key=key), "rb")
        except OSError as exc:
            raise StorageError(f"cannot read {str(path)!r}: {exc.strerror}", key=key) from exc

    def stat(self, key: str) -> ObjectStat | None:
        """The regular file's stat; ``IntegrityError`` for anything else at ``key`` (a symlink, FIFO, device, folder)."""
        found = check_regular(self._path(key), key=key)
        return None if found is None else _stat(key, found)

    def list(self, prefix: str = "") -> list[ObjectStat]:
        out = []
        top = self._walk_top(prefix)
        for dirpath, _dirs, files in os.walk(top):
            for name in files:
                if name.startswith(TEMP_PREFIX):
                    continue
                full = Path(dirpath) / name
                key = full.relative_to(self.root).as_posix()
                if listed(key, prefix):  # as it is: a symlink's own stat, never its target's
                    with contextlib.suppress(FileNotFoundError):
                        out.append(_stat(key, full.lstat()))
        return sorted(out, key=lambda s: s.key)

    def read_small(self, key: str, limit: int = 1 << 16) -> bytes | None:
        try:
            with os.fdopen(open_regular(self._path(key), key=key), "rb") as f:
                return f.read(limit)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {str(self._path(key))!r}: {exc.strerror}", key=key) from exc

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """A temp file, fsynced, then ``os.link`` to ``key``: the link fails if ``key`` exists (atomic)."""
        staged = LocalWrite(self._path(key), key)
        try:
            staged.file.write(data)
            staged.finish()
            return staged.create()
        finally:
            staged.abort()  # the temp name goes; a link made stays

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StorageError(f"cannot delete {str(path)!r}: {exc.strerror}", key=key) from exc
        fsync_dir(path.parent)


def from_uri(uri: str, **storage_options: Any) -> LocalStorage:
    """A folder, or a ``file:///ABSOLUTE/PATH`` URI, as a :class:`LocalStorage` (which takes no options)."""
    if storage_options:
        raise ConfigError(
            f"storage_options {sorted(storage_options)} do not apply to a local output_uri: "
            "remove them, or use an s3:// output_uri"
        )
    if "://" not in uri:
        return LocalStorage(uri)
    if urlsplit(uri).netloc not in ("", "localhost"):  # file://../ckpt would mean /ckpt
        raise ConfigError(
            f"output_uri {uri!r} names the host {urlsplit(uri).netloc!r}: a file URI is "
            "file:///ABSOLUTE/PATH (three slashes); pass a relative folder as a plain path"
        )
    return LocalStorage(url2pathname(urlsplit(uri).path))
