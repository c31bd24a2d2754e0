"""What made a checkpoint: git commit, host, command line and versions, as record metadata.

:func:`lineage` is computed once per saver and merged into every record's metadata, so
``find_models(where="git_dirty=False")`` or ``where="git_commit=3f2a..."`` find checkpoints
by the code that made them. The command line goes through
:func:`~tracker_saver.core.masked_command.mask_command` first: a registry is shared, so a
``--aws-secret-access-key``, a ``--password -Xy9`` or a signed URL in ``argv`` must never reach it.
"""

from __future__ import annotations

import logging
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import ignite
import torch

from tracker_saver.core.masked_command import MASK, mask_command
from tracker_saver.core.records import MetaValue, clip
from tracker_saver.core.text import escape

_log = logging.getLogger(__name__)

__all__ = ["GIT_TIMEOUT_S", "LINEAGE_KEYS", "MASK", "git_state", "lineage", "mask_command"]

#: The metadata keys :func:`lineage` may set (git, ClearML and MLflow keys only when they apply).
LINEAGE_KEYS = (
    "git_commit",
    "git_dirty",
    "host",
    "command",
    "python",
    "torch",
    "ignite",
    "clearml_task_id",
    "mlflow_run_id",
)

#: The longest, in seconds, one ``git`` call may take (a huge or network-mounted repository).
GIT_TIMEOUT_S = 3.0


def git_state(folder: str | os.PathLike[str]) -> dict[str, MetaValue]:
    """``git_commit`` and ``git_dirty`` of the repository holding ``folder``; ``{}`` outside one.

    Dirty means a tracked file differs from the commit (staged or not); untracked files
    (outputs, data) do not count. Git missing, a folder outside a repository, a repository
    without commits or a git that takes longer than :data:`GIT_TIMEOUT_S` all give ``{}``.

    Examples:
        >>> import tempfile
        >>> git_state(tempfile.mkdtemp())
        {}
    """
    commit = _git(folder, "rev-parse", "--verify", "HEAD")
    if commit is None:
        return {}
    status = _git(folder, "status", "--porcelain", "--untracked-files=no")
    state: dict[str, MetaValue] = {"git_commit": commit.strip()}
    if status is not None:
        state["git_dirty"] = bool(status.strip())
    return state


def _git(folder: str | os.PathLike[str], *args: str) -> str | None:
    # GIT_OPTIONAL_LOCKS=0: `git status` must not take the index lock of a repository that
    # the user may be committing to at that moment.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    try:
        done = subprocess.run(
            ["git", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):  # no git, an unreadable folder, a timeout
        return None
    return done.stdout if done.returncode == 0 else None


def _script_folder(argv: Sequence[str]) -> Path:
    """The folder of the running script (``python path/train.py`` or ``-m``), else the cwd."""
    script = Path(argv[0]) if argv and argv[0] not in ("", "-c", "-") else None
    if script is not None and script.is_file():
        return script.resolve().parent
    return Path.cwd()


def _clearml_task_id() -> str | None:
    # Only a process that already imported clearml can have a task: look, never import it.
    clearml = sys.modules.get("clearml")
    if clearml is None:
        return None
    try:
        task = clearml.Task.current_task()
    except Exception as exc:  # a broken or half-configured clearml must not stop a checkpoint
        _log.debug("no ClearML task id for the lineage: %s", exc)
        return None
    return str(task.id) if task is not None else None


def _mlflow_run_id() -> str | None:
    # As for ClearML: only a process that imported mlflow can have an active run.
    mlflow = sys.modules.get("mlflow")
    active = mlflow.active_run() if mlflow is not None and hasattr(mlflow, "active_run") else None
    return str(active.info.run_id) if active is not None else None


def lineage(argv: Sequence[str] | None = None) -> dict[str, MetaValue]:
    """What makes this process's checkpoints, as record metadata.

    Keys: ``git_commit`` and ``git_dirty`` (when the script's folder, or else the working
    folder, is in a git repository), ``host``, ``command`` (``argv`` masked by
    :func:`mask_command`), ``python``, ``torch``, ``ignite`` (versions) and
    ``clearml_task_id`` (when a ClearML task is current), ``mlflow_run_id`` (when an MLflow run is
    active).

    Args:
        argv: the command line; ``sys.argv`` by default.

    Examples:
        >>> facts = lineage(["train.py", "--token", "t0p"])
        >>> facts["command"], facts["torch"] == torch.__version__
        ('train.py --token ***', True)
    """
    argv = list(sys.argv if argv is None else argv)
    facts: dict[str, MetaValue] = {**git_state(_script_folder(argv))}
    facts.update(
        host=socket.gethostname(),
        command=clip(escape(mask_command(argv))),  # nor a control character typed in argv, nor a 100 KB argv
        python=platform.python_version(),
        torch=str(torch.__version__),
        ignite=str(ignite.__version__),
    )
    for key, found in (("clearml_task_id", _clearml_task_id()), ("mlflow_run_id", _mlflow_run_id())):
        if found is not None:
            facts[key] = found
    return facts
