"""Open the registry a user names: SQLite by default, ClearML or MLflow when asked."""

from __future__ import annotations

import os
from pathlib import Path

from tracker_saver.core.errors import ConfigError, RegistryError
from tracker_saver.core.outage import DEFAULT_TIMEOUT_S
from tracker_saver.registry.base import Labels, Query, RecordStore, Registry, StreamClaims

__all__ = [
    "DEFAULT_REGISTRY",
    "NAME_IT",
    "Labels",
    "Query",
    "RecordStore",
    "Registry",
    "StreamClaims",
    "check_exists",
    "check_registry_path",
    "open_registry",
    "sqlite_path",
]

#: Where records live when neither an argument nor ``TRACKER_SAVER_REGISTRY`` says otherwise.
DEFAULT_REGISTRY = "~/.tracker_saver/registry.db"


def sqlite_path(registry: str | os.PathLike[str] | None) -> str | None:
    """The SQLite file a registry spec names (``None`` for ClearML); opens nothing.

    Explicit argument > ``$TRACKER_SAVER_REGISTRY`` > ``~/.tracker_saver/registry.db``.

    Examples:
        >>> sqlite_path("sqlite:////tmp/r.db"), sqlite_path("clearml"), sqlite_path(":memory:")
        ('/tmp/r.db', None, ':memory:')
    """
    env = os.environ.get("TRACKER_SAVER_REGISTRY") or None
    spec = os.fspath(registry) if registry is not None else (env or DEFAULT_REGISTRY)
    if spec == "sqlite":  # "the SQLite registry": the environment's file if it names one
        spec = env if env and env not in ("sqlite", "clearml", "mlflow") else DEFAULT_REGISTRY
    if spec in ("clearml", "mlflow") or spec.startswith(("clearml:", "mlflow:")):
        return None
    if spec.startswith("sqlite:///"):
        spec = spec[len("sqlite:///") :]  # sqlite:///rel/path or sqlite:////abs/path
    elif "://" in spec:
        raise ConfigError(
            f"registry {spec!r} is not understood: use 'sqlite', a file path, sqlite:///PATH, 'clearml' or "
            "'mlflow[:http://HOST:PORT]'"
        )
    return spec if spec == ":memory:" else str(Path(spec).expanduser())


def open_registry(
    registry: str | os.PathLike[str] | Registry | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    create: bool = True,
) -> Registry:
    """Open a registry by name or path.

    Args:
        registry: ``None`` (``$TRACKER_SAVER_REGISTRY`` or ``~/.tracker_saver/registry.db``),
            ``"sqlite"`` (the default file), a file path or ``sqlite:///path``, ``":memory:"``,
            ``"clearml"`` (the current ClearML task's server; in ClearML's offline mode, the
            task's local journal, :mod:`tracker_saver.integrations.clearml.journal`), ``"clearml:ROOT"``
            (records' projects under the ClearML project ``ROOT``), ``"mlflow"`` (the tracking
            server of ``$MLFLOW_TRACKING_URI``), ``"mlflow:http://HOST:PORT"``, or a ``Registry`` instance.
        timeout: for a ClearML or MLflow registry, the seconds one call may wait on a server that
            stopped answering (SQLite is local: it has its own busy timeout).
        create: whether a SQLite file that does not exist yet is created. Readers pass
            ``False``: a mistyped path is then an error, not a new empty registry.

    Raises:
        RegistryError: ``create=False`` and there is no SQLite registry at the path.

    Examples:
        >>> open_registry(":memory:").uri
        'sqlite://:memory:'
    """
    if isinstance(registry, Registry):
        return registry
    path = sqlite_path(registry)
    spec = os.fspath(registry) if registry is not None else os.environ.get("TRACKER_SAVER_REGISTRY", "")
    if path is None and (spec == "mlflow" or spec.startswith("mlflow:")):
        return _open_mlflow(spec.partition(":")[2] or None, timeout=timeout)
    if path is None:
        try:
            from tracker_saver.integrations.clearml.journal import offline_journal
            from tracker_saver.integrations.clearml.registry import ClearMLRegistry
        except ModuleNotFoundError as exc:
            raise ModuleNotFoundError(
                "registry='clearml' needs clearml: pip install 'clearml>=1.16,<3' (the clearml extra)"
            ) from exc
        if (journal := offline_journal()) is not None:  # ClearML offline mode: a local journal
            return journal
        root = spec.partition(":")[2] or None
        return ClearMLRegistry(project_root=root, timeout=timeout)
    check_exists(path, create=create)
    from tracker_saver.registry.sqlite import SQLiteRegistry

    return SQLiteRegistry(path)


def _open_mlflow(uri: str | None, *, timeout: float) -> Registry:
    try:
        from tracker_saver.integrations.mlflow.registry import MLflowRegistry
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            "registry='mlflow' needs mlflow: pip install 'mlflow>=3.4,<4' (the mlflow extra)"
        ) from exc
    return MLflowRegistry(uri, timeout=timeout)


#: How the error for a registry that does not exist says to name it, to a Python caller (the
#: command line's own words are :data:`tracker_saver.cli.shared.NAME_IT_CLI`).
NAME_IT = "pass registry= the file the saver wrote (or set TRACKER_SAVER_REGISTRY)"


def check_exists(path: str, *, create: bool) -> None:
    """Raise ``RegistryError`` when a reader (``create=False``) names a SQLite file that does not exist.

    Examples:
        >>> check_exists("/nonexistent/registry.db", create=False)
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.RegistryError: no registry at /nonexistent/registry.db: check the path, or pass registry= the file the saver wrote (or set TRACKER_SAVER_REGISTRY)
    """
    if not create and path != ":memory:" and not Path(path).is_file():
        raise RegistryError(f"no registry at {path}: check the path, or {NAME_IT}")


def check_registry_path(path: str | os.PathLike[str]) -> None:
    """Check, creating nothing, that a SQLite registry can be made or opened at ``path``.

    The neutral entry point for generic code (the saver): the SQLite backend stays behind it.

    Examples:
        >>> check_registry_path(":memory:")
    """
    from tracker_saver.registry.sqlite_check import check_registry_path as check

    check(path)
