"""Open the registry a user names: SQLite by default, ClearML when asked."""

from __future__ import annotations

import os
from pathlib import Path

from tracker_saver.errors import ConfigError
from tracker_saver.registry.base import Query, Registry

__all__ = ["DEFAULT_REGISTRY", "Query", "Registry", "open_registry", "registry_spec"]

#: Where records live when neither an argument nor ``TRACKER_SAVER_REGISTRY`` says otherwise.
DEFAULT_REGISTRY = "~/.tracker_saver/registry.db"


def registry_spec(registry: str | os.PathLike[str] | None) -> str:
    """The registry to use: the argument, else ``$TRACKER_SAVER_REGISTRY``, else the default."""
    if registry is not None:
        return os.fspath(registry)
    return os.environ.get("TRACKER_SAVER_REGISTRY") or DEFAULT_REGISTRY


def open_registry(registry: str | os.PathLike[str] | Registry | None = None) -> Registry:
    """Open a registry by name or path.

    Args:
        registry: ``None`` (``$TRACKER_SAVER_REGISTRY`` or ``~/.tracker_saver/registry.db``),
            ``"sqlite"`` (the default file), a file path or ``sqlite:///path``, ``":memory:"``,
            ``"clearml"`` (the current ClearML task's server), or a ``Registry`` instance.

    Examples:
        >>> open_registry(":memory:").uri
        'sqlite://:memory:'
    """
    if isinstance(registry, Registry):
        return registry
    spec = registry_spec(registry)
    if spec == "clearml":
        try:
            from tracker_saver.registry.clearml import ClearMLRegistry
        except ModuleNotFoundError as exc:
            raise ModuleNotFoundError("registry='clearml' needs clearml: pip install 'tracker-saver[clearml]'") from exc
        return ClearMLRegistry()
    if spec == "sqlite":
        env = os.environ.get("TRACKER_SAVER_REGISTRY")
        spec = env if env and env not in ("sqlite", "clearml") else DEFAULT_REGISTRY
    if spec.startswith("sqlite:///"):
        spec = spec[len("sqlite:///") :]  # sqlite:///rel/path or sqlite:////abs/path
    elif "://" in spec:
        raise ConfigError(
            f"registry {spec!r} is not understood: use 'sqlite', a file path, sqlite:///PATH or 'clearml'"
        )
    from tracker_saver.registry.sqlite import SQLiteRegistry

    return SQLiteRegistry(spec if spec == ":memory:" else Path(spec).expanduser())
