"""The drop-in ``ClearMLSaver`` for Ignite's, on top of the ClearML registry and leaf glue.

``from tracker_saver.clearml import ClearMLSaver`` replaces
``from ignite.handlers.clearml_logger import ClearMLSaver`` with the same constructor. This is
the top of the ClearML integration: it imports the generic saver, the ClearML registry
(:mod:`tracker_saver.registry.clearml`) and the leaves (:mod:`tracker_saver.integrations`);
nothing generic imports it. ``guard_torch_save_binding``, ``clearml_s3_options`` and
``import_offline_session`` (ClearML's offline mode, docs/clearml.md) are re-exported here,
their public home.
"""

from __future__ import annotations

from typing import Any

from tracker_saver.errors import ConfigError
from tracker_saver.integrations.clearml_binding import skip_saves_while
from tracker_saver.integrations.clearml_conf import clearml_s3_options
from tracker_saver.pipeline import is_writing
from tracker_saver.registry.clearml import ClearMLRegistry, task_run
from tracker_saver.registry.clearml_journal import offline_journal
from tracker_saver.registry.clearml_sync import SyncReport, import_offline_session
from tracker_saver.saver import TrackerSaver

__all__ = ["ClearMLSaver", "SyncReport", "clearml_s3_options", "guard_torch_save_binding", "import_offline_session"]


def guard_torch_save_binding() -> None:
    """Make ClearML's ``torch.save`` binding skip every file a tracker_saver pipeline writes.

    ``Task.init`` patches ``torch.save`` (``auto_connect_frameworks``) and uploads what it sees
    under its own names. This registers, once per process, a ``WeightsFileHandler``
    pre-callback that returns ``None`` (skip) while :func:`tracker_saver.pipeline.is_writing`,
    so output_uri only ever holds slot objects. ``ClearMLSaver`` and ``registry="clearml"`` do
    it for you; call it yourself when another registry saves under a ClearML task.

    Examples:
        >>> guard_torch_save_binding(); guard_torch_save_binding()  # idempotent
    """
    skip_saves_while(is_writing)


class ClearMLSaver(TrackerSaver):
    """Drop-in for ``ignite.handlers.clearml_logger.ClearMLSaver``, with tracker_saver's guarantees.

    Same constructor. The task is ``Task.current_task()`` (as in ignite: call ``Task.init`` or
    create a ``ClearMLLogger`` first). Checkpoints go to ``output_uri`` (which, as in ignite,
    also becomes the task's ``output_uri``), else the task's ``output_uri``, else ``dirname``
    as a local folder. project is the task's project and run is ``<task name>.<task id>``
    (ClearML's own folder name): ``continue_last_task=True`` continues the slots, while a new
    task with the same name is a new run that leaves the earlier task's checkpoints alone. Task
    names may hold any characters; keys use a safe slug of them, models keep them.

    Compared with ignite's: one ClearML model per checkpoint named by its semantic filename
    (not one per slot, renamed), typed metadata, renames kept, slots rebuilt on resume, no
    duplicate upload by ClearML's binding, and every failure raised in the training process.

    Args:
        logger: a ``ClearMLLogger`` (optional; only checked, as in ignite).
        output_uri: where checkpoints go; also set as the task's ``output_uri``.
        dirname: a local folder used when neither ``output_uri`` nor the task has one.
        args: ignored DiskSaver positional arguments (writes are always atomic).
        kwargs: ``atomic``, ``create_dir``, ``require_empty`` are accepted and ignored (writes
            are always atomic, folders are created, slots are reused); any ``TrackerSaver``
            keyword (``registry``, ``storage_options``, ``pre_upload``…) is passed on.

    Examples:
        Under a ClearML task (see docs/clearml.md)::

            from tracker_saver.clearml import ClearMLSaver
            Checkpoint(to_save, ClearMLSaver(), n_saved=1, filename_prefix="epoch")
    """

    _DISK_SAVER_ARGS = ("atomic", "create_dir", "require_empty")

    def __init__(
        self, logger: Any = None, output_uri: str | None = None, dirname: str | None = None, *args: Any, **kwargs: Any
    ) -> None:
        from clearml import Task

        if logger is not None:
            from ignite.handlers.clearml_logger import ClearMLLogger

            if not isinstance(logger, ClearMLLogger):
                raise ConfigError(f"logger {logger!r} is not an ignite ClearMLLogger: pass one, or None")
        task: Any = Task.current_task()
        if task is None:
            raise ConfigError(
                "ClearMLSaver needs a ClearML task: call clearml.Task.init(...) or create a ClearMLLogger first"
            )
        if output_uri:
            task.output_uri = output_uri
        for name in self._DISK_SAVER_ARGS:
            kwargs.pop(name, None)
        uri = output_uri or task.output_uri or dirname
        if not uri:
            raise ConfigError(
                f"ClearMLSaver has nowhere to write: task {task.name!r} has no output_uri; pass output_uri= "
                "(a folder or s3://BUCKET/PREFIX), dirname=, or Task.init(output_uri=...)"
            )
        kwargs.setdefault("registry", offline_journal(task) or ClearMLRegistry(task))  # offline: a journal
        kwargs.setdefault("run", task_run(task))  # also with a registry that knows no task
        super().__init__(uri, **kwargs)
        guard_torch_save_binding()  # also with a registry that is not ClearML's
