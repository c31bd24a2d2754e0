"""The drop-in ``ClearMLSaver`` for Ignite's, on top of the ClearML registry and leaf glue.

Public as ``from tracker_saver.clearml import ClearMLSaver`` (:mod:`tracker_saver.clearml`), which
replaces ``from ignite.handlers.clearml_logger import ClearMLSaver`` with the same constructor.
This is the top of the ClearML integration: it imports the generic saver, the ClearML registry
(:mod:`tracker_saver.integrations.clearml.registry`) and the leaves (``binding``, ``conf``);
nothing generic imports it. ``guard_torch_save_binding``, ``clearml_s3_options`` and
``import_offline_session`` (ClearML's offline mode, docs/clearml.md) are gathered here for
:mod:`tracker_saver.clearml` to re-export.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import tempfile
import warnings
from datetime import datetime
from typing import Any

import ignite.distributed as idist

from tracker_saver.core.errors import ConfigError
from tracker_saver.integrations.clearml.binding import skip_saves_while
from tracker_saver.integrations.clearml.conf import clearml_s3_options
from tracker_saver.integrations.clearml.journal import offline_journal
from tracker_saver.integrations.clearml.registry import ClearMLRegistry, task_run
from tracker_saver.integrations.clearml.sync import SyncReport, import_offline_session
from tracker_saver.registry import Registry, parse_registry
from tracker_saver.save.distributed import check_save_on_rank
from tracker_saver.save.local_view import views_root
from tracker_saver.save.pipeline import is_writing
from tracker_saver.save.saver import RunContext, TrackerSaver

__all__ = ["ClearMLSaver", "SyncReport", "clearml_s3_options", "guard_torch_save_binding", "import_offline_session"]


def guard_torch_save_binding() -> None:
    """Make ClearML's ``torch.save`` binding skip every file a tracker_saver pipeline writes.

    ``Task.init`` patches ``torch.save`` (``auto_connect_frameworks``) and uploads what it sees
    under its own names. This registers, once per process, a ``WeightsFileHandler``
    pre-callback that returns ``None`` (skip) while :func:`tracker_saver.save.pipeline.is_writing`,
    so output_uri only ever holds slot objects. ``ClearMLSaver`` and ``registry="clearml"`` do
    it for you; call it yourself when another registry saves under a ClearML task.

    Examples:
        >>> guard_torch_save_binding(); guard_torch_save_binding()  # idempotent
    """
    skip_saves_while(is_writing, views=views_root())


class ClearMLSaver(TrackerSaver):
    """Drop-in for ``ignite.handlers.clearml_logger.ClearMLSaver``, with tracker_saver's guarantees.

    Same constructor. The task is ``Task.current_task()`` (as in ignite: call ``Task.init`` or
    create a ``ClearMLLogger`` first). Checkpoints go to ``output_uri`` (which, as in ignite,
    also becomes the task's ``output_uri``), else the task's ``output_uri``, else, as in
    ignite, a new temporary folder, with a ``UserWarning`` that names it: it does not survive
    a reboot. project is the task's project and run is ``<task name>.<task id>``
    (ClearML's own folder name): ``continue_last_task=True`` continues the slots, while a new
    task with the same name is a new run that leaves the earlier task's checkpoints alone. Task
    names may hold any characters; keys use a safe slug of them, models keep them.

    Records go to the task's ClearML server, unless ``registry=`` names another registry (a
    SQLite file, say): that one never contacts ClearML (offline mode works), and its records
    still get the task's project and run.

    Compared with ignite's: one ClearML model per checkpoint named by its semantic filename
    (not one per slot, renamed), typed metadata, renames kept, slots rebuilt on resume, no
    duplicate upload by ClearML's binding, and every failure raised in the training process.

    Args:
        logger: a ``ClearMLLogger`` (optional; only checked, as in ignite).
        output_uri: where checkpoints go; also set as the task's ``output_uri``.
        dirname: the local folder where each live checkpoint appears under its filename, as in
            ignite (``last_checkpoint``, ``reload_objects``, ``get_local_copy``); see
            ``TrackerSaver``'s ``dirname``. With S3 it holds a verified copy of each live
            checkpoint, as ignite keeps its files locally. Never used as the output_uri.
        args: ignored DiskSaver positional arguments (writes are always atomic).
        kwargs: ``atomic``, ``create_dir``, ``require_empty`` are accepted and ignored (writes
            are always atomic, folders are created, slots are reused); any ``TrackerSaver``
            keyword (``registry``, ``storage_options``, ``pre_upload``…) is passed on; any other
            goes to ``torch.save``, as ignite's ``DiskSaver(**kwargs)`` does (checked here).

    Examples:
        Under a ClearML task (see docs/clearml.md)::

            from tracker_saver.clearml import ClearMLSaver
            Checkpoint(to_save, ClearMLSaver(), n_saved=1, filename_prefix="epoch")
    """

    _DISK_SAVER_ARGS = ("atomic", "create_dir", "require_empty")
    _COPY_TO_DIRNAME = True  # ignite's ClearMLSaver keeps every live checkpoint in dirname, also for S3

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
        own = inspect.signature(TrackerSaver.__init__).parameters
        save_kwargs = dict(kwargs.pop("save_kwargs", None) or {})
        save_kwargs.update({k: kwargs.pop(k) for k in list(kwargs) if k not in own})
        kwargs.update(dirname=dirname, save_kwargs=save_kwargs)
        if kwargs.get("registry") is None:
            kwargs["registry"] = offline_journal(task) or ClearMLRegistry(task)  # offline: a journal
        elif not _names_clearml(kwargs["registry"]):
            # Another registry never asks ClearML: the task itself knows its project (Task.init
            # keeps the name; offline mode has no server), as an online ClearML registry records it.
            project = task.get_project_name()
            if project:
                kwargs.setdefault("project", project)
        kwargs.setdefault("run", task_run(task))  # also with a registry that knows no task
        uri = output_uri or task.output_uri
        temporary = None if uri else _temporary_folder(check_save_on_rank(kwargs.get("save_on_rank", 0)))
        try:
            super().__init__(uri or temporary, **kwargs)
        except BaseException:
            if temporary:  # bad input leaves nothing behind: the folder is still empty
                with contextlib.suppress(OSError):
                    os.rmdir(temporary)
            raise
        if temporary:
            warnings.warn(
                f"ClearMLSaver created a temporary checkpoints directory: {temporary}; it will not survive a "
                f"reboot. Task {task.name!r} has no output_uri: to keep the checkpoints, pass output_uri= "
                "(a folder or s3://BUCKET/PREFIX) or Task.init(output_uri=...)",
                UserWarning,
                stacklevel=2,
            )
        guard_torch_save_binding()  # also with a registry that is not ClearML's


def _names_clearml(registry: Any) -> bool:
    """Whether ``registry=`` is a ClearML registry: ``"clearml"``, ``"clearml:ROOT"`` or a tracker's run context."""
    if isinstance(registry, Registry):
        return isinstance(registry, RunContext)
    return parse_registry(registry).kind == "clearml"


def _temporary_folder(save_on_rank: int) -> str:
    """A new temporary folder, made by the saving rank; every rank gets its name (as in ignite's ClearMLSaver)."""
    folder = ""
    if idist.get_rank() == save_on_rank:
        folder = tempfile.mkdtemp(prefix=f"tracker_saver_checkpoints_{datetime.now():%Y_%m_%d_%H_%M_%S_}")
    if idist.get_world_size() > 1:
        # a collective, as the set-up that follows is: every rank builds the saver (docs/ddp.md)
        folder = str(idist.broadcast(folder, src=save_on_rank))
    return folder
