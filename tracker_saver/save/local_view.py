"""A saver's ``dirname``: a local folder where each live checkpoint also appears under its filename.

Ignite finds checkpoints at ``save_handler.dirname / filename`` (``Checkpoint.last_checkpoint``,
``reload_objects``) and loads them with ``torch.load``. Our objects live under slot keys, so this
folder gives Ignite what it looks for, outside output_uri (which holds slot objects only):

- a local output_uri: a hard link to the slot file (no copy), placed when the record becomes
  live; the link keeps those bytes even after the slot is reused;
- S3, or a folder on another file system than a local output_uri (no link possible): a copy,
  checked against the record's size and sha256, placed when the record becomes live if the
  folder was asked for (``dirname=``), else only on :meth:`LocalView.local_copy`: a default
  folder never costs a save a copy.

When a save evicts a record, its file here goes. Every file here was written from, or checked
against, the record's sha256; :meth:`LocalView.local_copy` checks again before it returns a path.
Only regular files are linked or read, here and at output_uri: a symlink, FIFO or device is
refused with an ``IntegrityError`` (:func:`~tracker_saver.storage.files.open_regular`), never
followed into the view and never waited on.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import uuid
from pathlib import Path

from tracker_saver.core.errors import ConfigError, StorageError
from tracker_saver.core.naming import key_ext, run_prefix, safe_filename
from tracker_saver.core.records import Record
from tracker_saver.save.locate import locate
from tracker_saver.storage.base import Storage
from tracker_saver.storage.files import check_regular, open_regular, unlink_soon
from tracker_saver.storage.verify import Digest, copy_checked, digest

__all__ = ["LocalView", "default_dirname"]

log = logging.getLogger(__name__)

#: The longest file name (one path part) Linux file systems take, in bytes.
_NAME_MAX = 255


def _copy(storage: Storage, record: Record, target: Path) -> Path:
    """``record``'s object copied to ``target`` once its size and sha256 match (nothing written otherwise)."""
    assert record.key is not None
    with storage.get(record.key) as src:
        return copy_checked(
            src,
            target,
            _expected(record),
            what=f"record {record.id} ({record.name!r}): {record.uri}",
            fix="the object was probably overwritten or corrupted; nothing was written",
            label=record.name,
            key=record.key,
            record_id=record.id,
        )


def _expected(record: Record) -> Digest:
    return Digest(record.size or 0, record.sha256 or "")


def default_dirname(output_uri: str, project: str, run: str) -> Path:
    """``$XDG_CACHE_HOME/tracker_saver/checkpoints/<hash of output_uri>/<project>/<run>`` (``~/.cache``).

    Examples:
        >>> default_dirname("/data/ckpt", "mnist", "r1").parts[-5:]
        ('tracker_saver', 'checkpoints', 'ca2e26342993', 'mnist', 'r1')
    """
    digest = hashlib.sha256(output_uri.encode()).hexdigest()[:12]
    return views_root() / digest / run_prefix(project, run).rstrip("/")


def views_root() -> Path:
    """The folder every default dirname view lies in: ``$XDG_CACHE_HOME/tracker_saver/checkpoints`` (``~/.cache``).

    Examples:
        >>> views_root().parts[-2:]
        ('tracker_saver', 'checkpoints')
    """
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tracker_saver" / "checkpoints"


class LocalView:
    """The files of ``folder``: one per live record, named by its filename.

    Args:
        folder: the folder (made on first use).
        storage: the saver's storage (where the records' objects are).
        copies: when each record becomes live, copy its bytes here where no hard link can be made
            (S3, another file system); else they are copied only by :meth:`local_copy`.

    Examples:
        >>> import tempfile
        >>> from tracker_saver.storage.local import LocalStorage
        >>> root = tempfile.mkdtemp()
        >>> view = LocalView(Path(root) / "named", LocalStorage(root + "/ckpt"), copies=False)
        >>> view.places  # a local storage's files are hard links: placed at each save
        True
    """

    def __init__(self, folder: Path, storage: Storage, *, copies: bool) -> None:
        self.folder = folder
        self.storage = storage
        self.copies = copies
        #: whether each save places its file here (a hard link or a copy)
        self.places = copies or storage.local_root is not None
        root = storage.local_root
        if root is not None and folder.resolve().is_relative_to(root.resolve()):
            raise ConfigError(
                f"dirname {str(folder)!r} is inside output_uri {str(root)!r}, which holds slot objects only: "
                "pass a dirname outside it"
            )

    def check(self) -> None:
        """Make the folder and check it can be written (the saver calls it when given ``dirname=``)."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=self.folder):
                pass
        except OSError as exc:
            raise ConfigError(
                f"dirname {str(self.folder)!r} is not a writable folder ({exc.strerror}): pass a folder you can write to"
            ) from exc

    def path(self, filename: str) -> Path:
        """Where ``filename`` appears: ``folder / filename``, as Ignite's ``last_checkpoint`` names it.

        A filename that would leave the folder (``../x.pt``, ``/abs/x.pt``) or that the file
        system cannot hold (a part over 255 bytes) gets a safe name in the folder instead, which
        only :meth:`local_copy` knows (with a warning when it is placed).
        """
        path = self.folder / filename
        inside = path.resolve().is_relative_to(self.folder.resolve()) and path.resolve() != self.folder.resolve()
        if inside and all(len(part.encode()) <= _NAME_MAX for part in Path(filename).parts):
            return path
        digest = hashlib.sha256(filename.encode()).hexdigest()[:8]
        return self.folder / safe_filename(f"{filename[:150]}-{digest}", key_ext(filename))

    def committed(self, live: Record, replaced: Record | None) -> None:
        """A save made ``live`` and evicted ``replaced``: the folder follows."""
        try:
            if replaced is not None and replaced.filename != live.filename:
                # Often the last link of the replaced slot file: its blocks are freed off this (training) thread.
                unlink_soon(self.path(replaced.filename))
            if self.places:
                self._place(live, copy=self.copies)
        except OSError as exc:
            raise StorageError(
                f"{live.filename!r} is saved and live, but its file in dirname {str(self.folder)!r} could not be "
                f"placed ({exc}): free space there, or pass another dirname"
            ) from exc

    def local_copy(self, record: Record) -> Path:
        """A local file with ``record``'s bytes, checked against its size and sha256 first.

        Raises:
            IntegrityError: the object differs from the record, or its key is not its stream's (:mod:`.locate`).
        """
        locate(record, storage=self.storage)
        path = self.path(record.filename)
        with contextlib.suppress(FileNotFoundError), os.fdopen(open_regular(path), "rb") as f:
            if digest(f) == _expected(record):
                return path
        self._place(record)
        with os.fdopen(open_regular(path), "rb") as f:  # a hard link is the slot file itself: check it as a download is
            matches = digest(f) == _expected(record)
        if not matches:
            path.unlink()
            return _copy(self.storage, record, path)  # raises IntegrityError, writes nothing
        return path

    def _place(self, record: Record, *, copy: bool = True) -> None:
        """Link (local) or copy ``record``'s object to its path; without ``copy``, only a link."""
        assert record.key is not None
        path = self.path(record.filename)
        if path != self.folder / record.filename:
            log.warning(
                "checkpoint %r cannot appear in dirname under its filename (it leaves the folder, or is too long): "
                "it is %s; Checkpoint.last_checkpoint will not find it: use saver.get_local_copy(filename)",
                record.filename,
                path,
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        root = self.storage.local_root
        if root is None:
            if copy:
                _copy(self.storage, record, path)
            return
        tmp = path.with_name(f".tmp-{path.name[:100]}.{uuid.uuid4().hex[:12]}")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        slot = root / record.key
        check_regular(slot, key=record.key)  # the view gets the slot file itself, never what a symlink names
        try:
            os.link(slot, tmp, follow_symlinks=False)
        except OSError:  # another file system, or links refused: a verified copy, if asked for
            if copy:
                _copy(self.storage, record, path)
            return
        os.replace(tmp, path)

    def __repr__(self) -> str:
        return f"LocalView({str(self.folder)!r})"
