"""Open the registry a user names: SQLite by default, ClearML or MLflow when asked, from one backend table.

A registry spec is read once, by :func:`parse_registry`, into a :class:`RegistrySpec` (its
kind and location); :func:`open_registry` opens it through :data:`BACKENDS` (kind → module,
imported on first use, with the extra to install when it is missing), as fsspec's
``known_implementations``. Every backend module has ``from_spec(location, *, timeout)``.
"""

from __future__ import annotations

import difflib
import importlib
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from tracker_saver.core.errors import ConfigError, RegistryError
from tracker_saver.core.extras import require
from tracker_saver.core.outage import DEFAULT_TIMEOUT_S
from tracker_saver.registry.base import Labels, Query, RecordStore, Registry, StreamClaims

__all__ = [
    "BACKENDS",
    "DEFAULT_REGISTRY",
    "NAME_IT",
    "NAME_IT_CLI",
    "Backend",
    "Labels",
    "Query",
    "RecordStore",
    "Registry",
    "RegistrySpec",
    "StreamClaims",
    "check_exists",
    "check_registry_path",
    "open_registry",
    "parse_registry",
]

#: Where records live when neither an argument nor ``TRACKER_SAVER_REGISTRY`` says otherwise.
DEFAULT_REGISTRY = "~/.tracker_saver/registry.db"

#: The names a new SQLite registry file may end with (any existing file, or ``sqlite:///PATH``, is taken as named).
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


@dataclass(frozen=True)
class Backend:
    """A registry backend: the module whose ``from_spec(location, *, timeout)`` opens it, and its extra."""

    module: str
    extra: str | None = None


#: Registry kind → its backend, imported on first use.
BACKENDS: dict[str, Backend] = {
    "sqlite": Backend("tracker_saver.registry.sqlite"),
    "clearml": Backend("tracker_saver.integrations.clearml.registry", extra="clearml"),
    "mlflow": Backend("tracker_saver.integrations.mlflow.registry", extra="mlflow"),
}


@dataclass(frozen=True)
class RegistrySpec:
    """A registry as a user named it: its kind (a key of :data:`BACKENDS`) and its location.

    ``location`` is the SQLite file (or ``":memory:"``), the ClearML project root, or the MLflow
    tracking URI; ``None`` where the kind's default applies.
    """

    kind: str
    location: str | None = None

    @property
    def key(self) -> str:
        """One string per registry, e.g. ``sqlite:/home/me/r.db`` or ``mlflow:``: equal specs, equal keys."""
        return f"{self.kind}:{self.location or ''}"


def parse_registry(registry: str | os.PathLike[str] | None = None) -> RegistrySpec:
    """Read a registry spec: explicit argument > ``$TRACKER_SAVER_REGISTRY`` > ``~/.tracker_saver/registry.db``.

    ``"sqlite"`` is the environment's file if it names one, else the default file; a file path
    or ``sqlite:///PATH``; ``":memory:"``; ``"clearml"`` or ``"clearml:ROOT"``; ``"mlflow"`` or
    ``"mlflow:URI"``. Opens and creates nothing.

    Raises:
        ConfigError: an unknown scheme; a word one or two letters off a kind (``"mlfow"``: did you
            mean ``mlflow``); a new file whose name does not end in ``.db``, ``.sqlite`` or
            ``.sqlite3`` (write ``sqlite:///PATH`` to use such a name); a ``sqlite:`` URL other than
            SQLAlchemy's ``sqlite:///RELATIVE`` and ``sqlite:////ABSOLUTE`` (``sqlite:/tmp/x.db``).

    Examples:
        >>> parse_registry("sqlite:////tmp/r.db"), parse_registry("clearml:team")
        (RegistrySpec(kind='sqlite', location='/tmp/r.db'), RegistrySpec(kind='clearml', location='team'))
        >>> parse_registry("mlfow")
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.ConfigError: registry 'mlfow' is neither a registry kind nor a registry file: did you mean 'mlflow'?
    """
    env = os.environ.get("TRACKER_SAVER_REGISTRY") or None
    spec = os.fspath(registry) if registry is not None else (env or DEFAULT_REGISTRY)
    if spec == "sqlite":  # "the SQLite registry": the environment's file if it names one
        spec = env if env and env not in BACKENDS else DEFAULT_REGISTRY
    kind, colon, rest = spec.partition(":")
    if kind in ("clearml", "mlflow"):
        return RegistrySpec(kind, rest or None)
    if spec == ":memory:":
        return RegistrySpec("sqlite", spec)
    if spec.startswith("sqlite:///"):  # sqlite:///rel/path or sqlite:////abs/path: any name, as asked
        return RegistrySpec("sqlite", str(Path(spec[len("sqlite:///") :]).expanduser()))
    if spec.startswith("sqlite:"):  # SQLAlchemy's forms only: a one- or two-slash URL is no path either
        raise ConfigError(f"registry {spec!r} is not a SQLite URL: {_sqlite_forms(spec[len('sqlite:') :])}")
    if "://" in spec:
        raise ConfigError(
            f"registry {spec!r} is not understood: use 'sqlite', a file path, sqlite:///PATH, 'clearml' or "
            "'mlflow[:http://HOST:PORT]'"
        )
    path = Path(spec).expanduser()
    if not path.exists() and path.suffix.lower() not in SQLITE_SUFFIXES:
        close = difflib.get_close_matches(spec.lower(), BACKENDS, n=1, cutoff=0.7)
        if close:
            raise ConfigError(
                f"registry {spec!r} is neither a registry kind nor a registry file: did you mean {close[0]!r}?"
            )
        raise ConfigError(
            f"registry {spec!r} names no registry file: a new SQLite registry's name ends in .db, .sqlite or .sqlite3 "
            f"({spec.rstrip('/')}.db), or write sqlite:///{spec} to use this name"
        )
    return RegistrySpec("sqlite", str(path))


def open_registry(
    registry: str | os.PathLike[str] | RegistrySpec | Registry | None = None,
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
            server of ``$MLFLOW_TRACKING_URI``), ``"mlflow:http://HOST:PORT"``, a spec
            :func:`parse_registry` read, or a ``Registry`` instance.
        timeout: for a ClearML or MLflow registry, the seconds one call may wait on a server that
            stopped answering (SQLite is local: it has its own busy timeout).
        create: whether a SQLite file that does not exist yet is created. Readers pass
            ``False``: a mistyped path is then an error, not a new empty registry.

    Raises:
        ConfigError: the spec is not understood (:func:`parse_registry`).
        RegistryError: ``create=False`` and there is no SQLite registry at the path.
        ModuleNotFoundError: the backend's extra is not installed (the message says what to install).

    Examples:
        >>> open_registry(":memory:").uri
        'sqlite://:memory:'
    """
    if isinstance(registry, Registry):
        return registry
    spec = registry if isinstance(registry, RegistrySpec) else parse_registry(registry)
    if spec.kind == "sqlite":
        check_exists(spec.location or "", create=create)
    backend = BACKENDS[spec.kind]
    if backend.extra is not None:
        require(backend.extra, f"registry={spec.kind!r}")
    opened: Registry = importlib.import_module(backend.module).from_spec(spec.location, timeout=timeout)
    return opened


#: How the error for a registry that does not exist says to name it, to a Python caller (the
#: command line's own words are :data:`tracker_saver.cli.shared.NAME_IT_CLI`).
NAME_IT = "pass registry= the file the saver wrote (or set TRACKER_SAVER_REGISTRY)"


#: The same, in the command line's words.
NAME_IT_CLI = "pass --registry PATH, the file the saver wrote (or set TRACKER_SAVER_REGISTRY)"

#: Where the demo and the examples keep their registry, relative to the folder they ran in.
NEARBY = ("registry.db", "demo-output/registry.db")


def _sqlite_forms(rest: str) -> str:
    """The SQLite URL forms, with the two readings of what was typed after ``sqlite:``.

    Examples:
        >>> _sqlite_forms("/tmp/x.db")
        'write sqlite:///RELATIVE/PATH or sqlite:////ABSOLUTE/PATH, as SQLAlchemy and MLflow read them (for /tmp/x.db: sqlite:////tmp/x.db or the plain path /tmp/x.db)'
    """
    path = rest.lstrip("/")
    readings = f"/{path}: sqlite:////{path} or the plain path /{path}"
    if not rest.startswith("/") or rest.startswith("//"):
        readings = f"{path} in the current folder: sqlite:///{path}; for {readings}"
    return (
        "write sqlite:///RELATIVE/PATH or sqlite:////ABSOLUTE/PATH, as SQLAlchemy and MLflow read them "
        f"(for {readings})"
    )


def check_exists(path: str, *, create: bool, cli: bool = False) -> None:
    """Raise ``RegistryError`` when a reader (``create=False``) names a SQLite file that does not exist.

    The message says where a registry is instead, when one is near: the absolute path that a
    relative ``sqlite:///tmp/x.db`` (SQLAlchemy's reading) may have meant, or the ``registry.db``
    the demo or the quickstart left in the current folder when the default was looked at. ``cli``
    words the fix for the command line.

    Examples:
        >>> check_exists("/nonexistent/registry.db", create=False)
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.RegistryError: no registry at /nonexistent/registry.db: check the path, or pass registry= the file the saver wrote (or set TRACKER_SAVER_REGISTRY)
    """
    if create or path == ":memory:" or Path(path).is_file():
        return
    where = path
    fix = f"check the path, or {NAME_IT_CLI if cli else NAME_IT}"

    def spell(named: str) -> str:
        return f"--registry {shlex.quote(named)}" if cli else f"registry={named!r}"

    absolute = os.path.join(os.sep, path)
    # Only where no registry was named: a named path that is missing is a typo to fix, not a hint to follow.
    defaulted = path == os.path.expanduser(DEFAULT_REGISTRY)
    nearby = [p for p in NEARBY if defaulted and Path(p).is_file()]
    if not os.path.isabs(path) and Path(absolute).is_file():
        where = f"{path} (relative to the current folder)"
        fix = f"for {absolute}: {spell('sqlite:///' + absolute)} or {spell(absolute)}"
    elif nearby:
        fix = f"./{nearby[0]} exists: {spell('./' + nearby[0])}"
    raise RegistryError(f"no registry at {where}: {fix}")


def check_registry_path(path: str | os.PathLike[str]) -> None:
    """Check, creating nothing, that a SQLite registry can be made or opened at ``path``.

    The neutral entry point for generic code (the saver): the SQLite backend stays behind it.

    Examples:
        >>> check_registry_path(":memory:")
    """
    from tracker_saver.registry.sqlite_check import check_registry_path as check

    check(path)
