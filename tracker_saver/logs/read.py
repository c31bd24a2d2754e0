"""Read a run's uploaded log files back: list them, download them (``tracker-saver runs logs PROJECT/RUN``).

Log objects live under the run's own ``logs/`` folder at its output_uri
(:func:`tracker_saver.core.naming.logs_prefix`); :class:`tracker_saver.logs.upload.LogUploader` puts them there.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracker_saver.core.errors import ConfigError
from tracker_saver.core.naming import check_key, logs_prefix
from tracker_saver.core.text import check_filters
from tracker_saver.registry import Query, Registry
from tracker_saver.registry.shared import shared_registry
from tracker_saver.storage import Storage, open_storage
from tracker_saver.storage.verify import digest

__all__ = ["LogObject", "download_logs", "list_logs"]


@dataclass(frozen=True)
class LogObject:
    """One uploaded log file: its storage key, size in bytes and, when the backend says, its
    modification time (seconds since the epoch)."""

    key: str
    size: int
    modified: float | None = None
    #: The file's path under the run's ``logs/`` folder (``train.log``, ``runs/x/events...``).
    name: str = ""


def _run_storage(
    project: str,
    run: str,
    output_uri: str | os.PathLike[str] | None,
    registry: str | os.PathLike[str] | Registry | None,
    storage_options: Mapping[str, Any] | None,
) -> Storage:
    """The storage of the run's logs: ``output_uri``, else the one output_uri of the run's records."""
    check_filters(project=project, run=run)
    options = dict(storage_options or {})
    opened: Registry | None = None
    if output_uri is None:
        opened = shared_registry(registry, create=False)  # a reader never creates an empty registry
        uris = sorted({r.output_uri for r in opened.records.query(Query(project=project, run=run)) if r.output_uri})
        if len(uris) != 1:
            found = f"its records name {len(uris)} ({', '.join(uris)})" if uris else "the registry has no record of it"
            raise ConfigError(
                f"cannot tell where run {run!r} of project {project!r} keeps its logs: {found}; pass output_uri="
            )
        output_uri = uris[0]
        for_uri = getattr(opened, "storage_options_for", None)  # a tracker that knows its S3 credentials
        if for_uri is not None:
            options = for_uri(output_uri, options)
    return open_storage(output_uri, **options)


def list_logs(
    project: str,
    run: str,
    *,
    output_uri: str | os.PathLike[str] | None = None,
    registry: str | os.PathLike[str] | Registry | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> list[LogObject]:
    """The log objects of one run, sorted by key.

    Args:
        project: the run's project.
        run: the run.
        output_uri: where the run uploaded its logs; default: the output_uri of the run's
            checkpoint records in ``registry`` (an error unless there is exactly one).
        registry: where to look for that output_uri (default as in :func:`~tracker_saver.open_registry`).
        storage_options: options for the storage backend (S3: ``endpoint_url``, ``profile``…).

    Examples:
        >>> import tempfile
        >>> list_logs("demo", "r1", output_uri=tempfile.mkdtemp())
        []
    """
    storage = _run_storage(project, run, output_uri, registry, storage_options)
    prefix = logs_prefix(project, run)  # a run or project may itself be named "logs": cut the prefix, not at "/logs/"
    return [LogObject(obj.key, obj.size, obj.modified, obj.key[len(prefix) :]) for obj in storage.list(prefix)]


def download_logs(
    project: str,
    run: str,
    dest: str | os.PathLike[str],
    *,
    output_uri: str | os.PathLike[str] | None = None,
    registry: str | os.PathLike[str] | Registry | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Download one run's log objects into the folder ``dest``, keeping their paths under ``logs/``.

    Each file is written to a temp file beside it and renamed, so nothing half-written is left.

    ``project``, ``run``, ``output_uri``, ``registry`` and ``storage_options`` are as for
    :func:`list_logs`.

    Args:
        dest: the folder to write to (created if missing).

    Returns:
        The files written, sorted.

    Examples:
        >>> import tempfile
        >>> download_logs("demo", "r1", tempfile.mkdtemp(), output_uri=tempfile.mkdtemp())
        []
    """
    storage = _run_storage(project, run, output_uri, registry, storage_options)
    folder = Path(dest).expanduser()
    prefix = logs_prefix(project, run)
    written = []
    for obj in storage.list(prefix):
        relative = check_key(obj.key[len(prefix) :])  # a key from the store, checked like our own
        target = folder.joinpath(*relative.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        with _replacing(target) as out, storage.get(obj.key) as src:
            digest(src, into=out)  # the one streaming read (the store keeps no digest of a log to check)
        written.append(target)
    return sorted(written)


@contextlib.contextmanager
def _replacing(target: Path) -> Iterator[Any]:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
