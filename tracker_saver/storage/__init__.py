"""Open the storage for an output_uri, chosen by its scheme from one backend table (``file`` or ``s3``)."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tracker_saver.core.errors import ConfigError
from tracker_saver.core.extras import require
from tracker_saver.storage.base import ObjectStat, Storage

__all__ = ["BACKENDS", "Backend", "ObjectStat", "Storage", "canonical_uri", "is_remote", "open_storage"]


@dataclass(frozen=True)
class Backend:
    """A storage backend: the module whose ``from_uri(uri, **storage_options)`` opens it, and its extra."""

    module: str
    extra: str | None = None


#: output_uri scheme (``""`` for a plain path) → its backend, imported on first use.
BACKENDS: dict[str, Backend] = {
    "": Backend("tracker_saver.storage.local"),
    "file": Backend("tracker_saver.storage.local"),
    "s3": Backend("tracker_saver.storage.s3", extra="s3"),
}


def _scheme(text: str) -> str:
    return urlsplit(text).scheme.lower() if "://" in text else ""


def is_remote(uri: str | os.PathLike[str]) -> bool:
    """Whether ``uri`` is network storage, whose calls take the storage option ``timeout``.

    Examples:
        >>> is_remote("s3://ckpts/run"), is_remote("/data/ckpts")
        (True, False)
    """
    return _scheme(os.fspath(uri)) == "s3"


def canonical_uri(uri: str | os.PathLike[str]) -> str:
    """``uri`` spelled as its storage's ``uri`` (and its records' ``output_uri``), opening nothing.

    A folder becomes its absolute ``file://`` URI, an S3 URI loses its outer slashes: so an
    output_uri given the way ``TrackerSaver`` was given it finds that saver's records.

    Examples:
        >>> canonical_uri("s3://ckpts/team/"), canonical_uri("/data/../data/ckpt")
        ('s3://ckpts/team', 'file:///data/ckpt')
    """
    text = os.fspath(uri)
    if _scheme(text) == "s3":
        bucket, _, prefix = text[5:].partition("/")
        prefix = prefix.strip("/")
        return f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
    return open_storage(text).uri  # a local storage only resolves its path until it is used


def open_storage(uri: str | os.PathLike[str], **storage_options: Any) -> Storage:
    """Return the storage for ``uri``: a local folder, ``file://`` URI or ``s3://bucket/prefix``.

    The backend comes from :data:`BACKENDS` by the URI's scheme, imported on first use.

    Args:
        uri: the output_uri.
        storage_options: backend options (S3: ``endpoint_url``, ``region_name``, ``profile``,
            ``addressing_style``, ``multipart_chunksize``, ``max_concurrency``, ...).

    Raises:
        ConfigError: an empty URI, a NUL, an unknown scheme, or options the backend does not take.
        ModuleNotFoundError: the backend's extra is not installed (the message says what to install).

    Examples:
        >>> import tempfile
        >>> open_storage(tempfile.mkdtemp()).uri.startswith("file://")
        True
    """
    text = os.fspath(uri)
    if not text:
        raise ConfigError("output_uri is empty: pass a folder or s3://BUCKET/PREFIX")
    if "\x00" in text:
        raise ConfigError(f"output_uri {text!r} contains NUL: pass a folder or s3://BUCKET/PREFIX")
    scheme = _scheme(text)
    backend = BACKENDS.get(scheme)
    if backend is None:
        raise ConfigError(
            f"output_uri {text!r} has the unknown scheme {scheme!r}: use a local folder, file:///path or "
            "s3://BUCKET/PREFIX"
        )
    if backend.extra is not None:
        require(backend.extra, f"an {scheme}:// output_uri")
    opened: Storage = importlib.import_module(backend.module).from_uri(text, **storage_options)
    return opened
