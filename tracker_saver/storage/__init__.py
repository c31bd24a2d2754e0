"""Open the storage for an output_uri, chosen by its scheme (``file`` or ``s3``)."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

from tracker_saver.core.errors import ConfigError
from tracker_saver.storage.base import ObjectStat, Storage

__all__ = ["ObjectStat", "Storage", "canonical_uri", "is_remote", "open_storage"]


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

    Args:
        uri: the output_uri.
        storage_options: backend options (S3: ``endpoint_url``, ``region_name``, ``profile``,
            ``addressing_style``, ``multipart_chunksize``, ``max_concurrency``, ...).

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
    if scheme in ("", "file"):
        from tracker_saver.storage.local import LocalStorage

        if storage_options:
            raise ConfigError(
                f"storage_options {sorted(storage_options)} do not apply to a local output_uri: "
                "remove them, or use an s3:// output_uri"
            )
        if scheme and urlsplit(text).netloc not in ("", "localhost"):  # file://../ckpt would mean /ckpt
            raise ConfigError(
                f"output_uri {text!r} names the host {urlsplit(text).netloc!r}: a file URI is "
                "file:///ABSOLUTE/PATH (three slashes); pass a relative folder as a plain path"
            )
        return LocalStorage(url2pathname(urlsplit(text).path) if scheme else text)
    if scheme == "s3":
        try:
            from tracker_saver.storage.s3 import S3Storage
        except ModuleNotFoundError as exc:
            raise ModuleNotFoundError(
                "an s3:// output_uri needs boto3: pip install 'boto3>=1.34' (the s3 extra)"
            ) from exc
        return S3Storage(text, **storage_options)
    raise ConfigError(
        f"output_uri {text!r} has the unknown scheme {scheme!r}: use a local folder, file:///path or s3://BUCKET/PREFIX"
    )
