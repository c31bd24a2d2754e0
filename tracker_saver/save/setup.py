"""What ``TrackerSaver`` checks and resolves before it saves: options, registry, storage, each save's info.

Examples:
    >>> check_options(max_pending=1, timeout=60, lineage=True)
    60.0
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from tracker_saver.core.errors import ConfigError
from tracker_saver.core.masking import strip_userinfo
from tracker_saver.core.naming import check_name, fallback_basename, parse_filename
from tracker_saver.core.outage import check_timeout
from tracker_saver.core.records import MetaValue, UploadInfo, clean_metadata
from tracker_saver.core.text import check_text, first_refused
from tracker_saver.registry import Registry, RegistrySpec, open_registry, parse_registry
from tracker_saver.registry.context import RunContext
from tracker_saver.storage import Storage, is_remote, open_storage

__all__ = ["Targets", "check_location", "check_options", "check_registry_outside", "open_targets", "upload_info"]


def check_options(*, max_pending: Any, timeout: Any, lineage: Any) -> float:
    """Check the saver's plain options; the timeout in seconds.

    Raises:
        ConfigError: an option of the wrong type or range, naming it and what to pass.
    """
    if not isinstance(max_pending, int) or isinstance(max_pending, bool) or max_pending < 1:
        raise ConfigError(
            f"max_pending={max_pending!r}: pass how many snapshots may wait for the background "
            "upload, an int >= 1 (each holds a copy of the checkpoint in memory)"
        )
    if not isinstance(lineage, bool):
        raise ConfigError(f"lineage={lineage!r}: pass True to record what made each checkpoint, or False")
    return check_timeout("timeout", timeout)


class Targets(NamedTuple):
    """Where a saver writes: its registry (``None``: the SQLite file of ``spec``, opened later), project, run, storage."""

    registry: Registry | None
    spec: RegistrySpec | None
    project: str
    run: str
    storage: Storage


def open_targets(
    registry: str | os.PathLike[str] | Registry | None,
    *,
    project: str | None,
    run: str | None,
    output_uri: str | os.PathLike[str] | None,
    storage_options: Mapping[str, Any] | None,
    timeout: float,
) -> Targets:
    """Resolve the registry, project, run and storage; a tracker registry gives their defaults.

    A SQLite registry is not opened here (the saving rank opens it after its checks); opening a
    storage does no I/O.

    Raises:
        ConfigError: a bad project or run name, an output_uri or registry path that breaks the
            text rule (:func:`check_location`), or no output_uri given nor known to the tracker.
    """
    check_location("registry", registry if registry is not None else os.environ.get("TRACKER_SAVER_REGISTRY"))
    opened: Registry | None = None
    spec: RegistrySpec | None = None
    if isinstance(registry, Registry):
        opened = registry
    elif (spec := parse_registry(registry)).kind != "sqlite":
        # a tracker: it knows the run's project and name (ClearML: the task's, and its output_uri)
        opened = open_registry(spec, timeout=timeout)
    asks = project is None or run is None or not output_uri  # what the tracker's run may fill in
    defaults: Mapping[str, str] = opened.run_defaults() if asks and isinstance(opened, RunContext) else {}
    # None means "not given"; an explicit "" is a bad name like "  ", not a request for the default.
    project = check_name("project", project if project is not None else defaults.get("project") or "default")
    run = check_name("run", run if run is not None else defaults.get("run") or "default")
    output_uri = output_uri or defaults.get("output_uri")
    check_location("output_uri", output_uri)  # the caller's, or the tracker's (a ClearML task's)
    if not output_uri:
        raise ConfigError(
            "TrackerSaver needs an output_uri: pass a folder or s3://BUCKET/PREFIX "
            "(with registry='clearml' it defaults to the task's output_uri)"
        )
    options = dict(storage_options or {})
    if is_remote(output_uri):
        options.setdefault("timeout", timeout)
    if isinstance(opened, RunContext):
        options = opened.storage_options_for(os.fspath(output_uri), options)
    return Targets(opened, None if opened is not None else spec, project, run, open_storage(output_uri, **options))


def check_location(what: str, location: object) -> None:
    """Raise ``ConfigError`` if ``location`` (an output_uri or a registry path) holds what the text rule refuses.

    A control character (ESC, CR, …) or a lone surrogate (bytes that are not UTF-8) in a path or a
    URI reaches every record's uri, every message and every table that shows it: refused here,
    shown escaped (without a ``user:password@``), before anything is created. A NUL is left to the
    storage's and the registry's own checks, which name it. ``None`` and a :class:`Registry` pass.

    Examples:
        >>> check_location("output_uri", "/data/ckpt (v2)")
        >>> check_location("output_uri", "/data/ck\\x1b[2Jpt")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.ConfigError: output_uri '/data/ck\\x1b[2Jpt' holds U+001B (ESC) at character 9, ...
    """
    if not isinstance(location, (str, os.PathLike)):
        return
    text = os.fspath(location)
    if not isinstance(text, str) or "\x00" in text or first_refused(text) is None:
        return
    check_text(what, strip_userinfo(text))  # the message shows the value, never a user:password@ in it
    raise ConfigError(f"{what} holds a control character or a lone surrogate in its user:password@ part: remove it")


def check_registry_outside(storage: Storage, path: str | None) -> None:
    """Raise ``ConfigError`` if the SQLite file ``path`` lies inside a local ``storage``'s folder."""
    root = storage.local_root
    if path is None or root is None or path == ":memory:":
        return
    if Path(path).resolve().is_relative_to(Path(root).resolve()):
        raise ConfigError(
            f"registry {path!r} is inside output_uri {str(root)!r}, which holds checkpoint "
            "objects only: put the registry elsewhere (default ~/.tracker_saver/registry.db)"
        )


def upload_info(
    filename: str,
    metadata: Mapping[str, Any] | None,
    *,
    project: str,
    run: str,
    lineage: Mapping[str, MetaValue],
    output_uri: str,
) -> UploadInfo:
    """One save's identity and metadata, from Ignite's filename and metadata (warns without them)."""
    if metadata is None or "basename" not in metadata:
        metadata = {"basename": fallback_basename(filename)}
        warnings.warn(
            f"TrackerSaver got no Ignite metadata for {filename!r} (a call from outside "
            f"ignite.handlers.Checkpoint): it is saved in stream {metadata['basename']!r}, as DiskSaver "
            "saves such a call; pass metadata={'basename': ...} or save through Checkpoint to choose",
            UserWarning,
            stacklevel=4,  # the caller of TrackerSaver.__call__
        )
    basename = check_name("stream (Ignite's basename, from filename_prefix and to_save)", str(metadata["basename"]))
    score_name = metadata.get("score_name")
    if isinstance(score_name, str):  # it is part of the filename: checked first, to name it
        check_text("score_name (Checkpoint's)", score_name)
    check_text("checkpoint filename (from Checkpoint's filename_pattern)", filename)
    parsed = parse_filename(filename, basename, score_name, metadata.get("priority"))
    return UploadInfo(
        project=project,
        run=run,
        stream=basename,
        filename=filename,
        metadata=clean_metadata({**parsed, **lineage}),
        output_uri=output_uri,
    )
