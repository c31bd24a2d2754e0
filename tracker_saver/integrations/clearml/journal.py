"""The local journal that stands in for the ClearML registry while ClearML runs in offline mode.

``Task.set_offline(True)``, ``CLEARML_OFFLINE_MODE=1`` and ignite's
``ClearMLLogger.set_bypass_mode(True)`` leave no server to hold records. The saver then records
every checkpoint in a SQLite registry inside the task's offline session folder
(``<Task.get_offline_mode_folder()>/tracker_saver/registry.db``, :data:`JOURNAL`), which
ClearML zips with the session when the task closes. Every invariant holds exactly as online:
it is the SQLite registry. :func:`tracker_saver.clearml.import_offline_session` (or
``tracker-saver sync``) later imports the session and pushes each record as the ClearML model
an online save would have made (:mod:`tracker_saver.integrations.clearml.sync`).

The run is ``<task name>.<offline task id>`` and the project the task's, as online.

Examples:
    Offline, under ``Task.init`` (``tests/test_clearml_offline.py`` runs this)::

        Task.set_offline(True)
        task = Task.init("mnist", "resnet")
        saver = TrackerSaver("/data/ckpt", registry="clearml")   # the journal, not a server
        saver.registry.path   # '.../offline/offline-<id>/tracker_saver/registry.db'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tracker_saver.core.errors import ConfigError
from tracker_saver.integrations.clearml.binding import skip_saves_while
from tracker_saver.integrations.clearml.codec import task_run
from tracker_saver.integrations.clearml.conf import with_clearml_credentials
from tracker_saver.registry.sqlite import SQLiteRegistry
from tracker_saver.save.local_view import views_root

__all__ = ["JOURNAL", "ClearMLJournal", "offline_journal"]

#: Where the journal lives inside an offline session folder (and so inside its zip).
JOURNAL = "tracker_saver/registry.db"


class ClearMLJournal(SQLiteRegistry):
    """A SQLite registry in an offline ClearML task's session folder, which knows the task's run.

    Args:
        task: the offline ``clearml.Task`` (``Task.init`` under offline mode).

    Raises:
        ConfigError: ``task`` has no offline session folder (it is not an offline task).

    Examples:
        Offline, under ``Task.init``::

            journal = ClearMLJournal(Task.current_task())
            journal.run_defaults()   # {'project': 'mnist', 'run': 'resnet.offline-1f2e...'}
    """

    def __init__(self, task: Any) -> None:
        folder = task.get_offline_mode_folder() if hasattr(task, "get_offline_mode_folder") else None
        if not folder:
            raise ConfigError(
                f"task {getattr(task, 'id', task)!r} has no offline session folder: the ClearML journal is for "
                "offline mode (Task.set_offline(True) before Task.init)"
            )
        self._task = task
        super().__init__(Path(folder) / JOURNAL)

    def run_defaults(self) -> dict[str, str]:
        """The task's project and run (``<task name>.<offline id>``); its output_uri if it has one."""
        defaults = {"project": str(self._task.get_project_name() or ""), "run": task_run(self._task)}
        if getattr(self._task, "output_uri", None):  # offline, Task.init leaves it None
            defaults["output_uri"] = str(self._task.output_uri)
        return {k: v for k, v in defaults.items() if v}

    def storage_options_for(self, output_uri: str, options: Mapping[str, Any]) -> dict[str, Any]:
        """Add clearml.conf's S3 credentials when neither ``options`` nor boto3's chain has any."""
        return with_clearml_credentials(output_uri, options)

    def guard_writes(self, is_writing: Callable[[], bool]) -> None:
        """Make ClearML's ``torch.save`` binding skip what is saved while ``is_writing()``."""
        skip_saves_while(is_writing, views=views_root())

    def artifact_task(self) -> None:
        """``None``: offline there is no server to show them, so a run's logs go to its output_uri only."""
        return None


def offline_journal(task: Any = None) -> ClearMLJournal | None:
    """The journal of ``task`` (default: the current task) when ClearML is in offline mode, else ``None``.

    Raises:
        ConfigError: offline mode without a task (there is no session folder to hold the journal).

    Examples:
        >>> offline_journal() is None   # ClearML online (the default)
        True
    """
    from clearml import Task

    if not Task.is_offline():
        return None
    task = task if task is not None else Task.current_task()
    if task is None:
        raise ConfigError(
            "ClearML is in offline mode and no task is running: call clearml.Task.init(...) first; "
            "its offline session folder holds the journal of the checkpoints"
        )
    return ClearMLJournal(task)
