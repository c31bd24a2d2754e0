"""ClearML glue: the drop-in ``ClearMLSaver``, clearml.conf S3 credentials, the torch.save binding guard.

``from tracker_saver.clearml import ClearMLSaver`` replaces
``from ignite.handlers.clearml_logger import ClearMLSaver`` with the same constructor.
"""

from __future__ import annotations

import threading
from typing import Any

from tracker_saver.errors import ConfigError
from tracker_saver.pipeline import is_writing
from tracker_saver.registry.clearml import ClearMLRegistry, task_run
from tracker_saver.saver import TrackerSaver

__all__ = ["ClearMLSaver", "clearml_s3_options", "guard_torch_save_binding"]

_guard_lock = threading.Lock()
_guard_installed = False


def _skip_our_writes(callback_type: Any, model_info: Any) -> Any:
    # ClearML's binding calls this for every torch.save it sees; returning None makes it skip
    # the file. While tracker_saver writes a slot, the checkpoint is ours: no second upload.
    return None if is_writing() else model_info


def guard_torch_save_binding() -> None:
    """Make ClearML's ``torch.save`` binding skip every file a tracker_saver pipeline writes.

    ``Task.init`` patches ``torch.save`` (``auto_connect_frameworks``) and uploads what it sees
    under its own names. This registers, once per process, a ``WeightsFileHandler``
    pre-callback — the mechanism ClearML's and Ignite's maintainers settled on — that returns
    ``None`` (skip) for our writes, so output_uri only ever holds slot objects.

    Examples:
        >>> guard_torch_save_binding(); guard_torch_save_binding()  # idempotent
    """
    global _guard_installed
    from clearml.binding.frameworks import WeightsFileHandler

    with _guard_lock:
        if not _guard_installed:
            WeightsFileHandler.add_pre_callback(_skip_our_writes)
            _guard_installed = True


def clearml_s3_options(output_uri: str, endpoint_url: str | None = None) -> dict[str, Any]:
    """S3 options from clearml.conf (``sdk.aws.s3``) for ``output_uri``, if boto3 finds no credentials.

    ClearML users keep their keys in clearml.conf. boto3's own chain (environment, profile,
    instance role) wins; only when it has nothing are the bucket's (or the default) key, secret,
    region and host taken from there. For a non-AWS host, ClearML names buckets
    ``s3://HOST:PORT/BUCKET``; ``endpoint_url`` (or ``AWS_ENDPOINT_URL``) selects that entry.

    Examples:
        >>> clearml_s3_options("/not/s3")
        {}
    """
    if not output_uri.startswith("s3://"):
        return {}
    import os

    import boto3
    from clearml.config import get_config_for_bucket

    if boto3.Session().get_credentials() is not None:
        return {}
    endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    lookup = output_uri
    if endpoint:
        host = endpoint.split("://", 1)[-1].rstrip("/")
        lookup = f"s3://{host}/{output_uri[len('s3://'):]}"
    cfg = get_config_for_bucket(lookup)
    if not (cfg.key and cfg.secret):
        return {}
    options: dict[str, Any] = {"aws_access_key_id": cfg.key, "aws_secret_access_key": cfg.secret}
    if cfg.token:
        options["aws_session_token"] = cfg.token
    if cfg.region:
        options["region_name"] = cfg.region
    if cfg.host and not endpoint_url:
        options["endpoint_url"] = f"{'https' if cfg.secure else 'http'}://{cfg.host}"
    return options


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

    def __init__(self, logger: Any = None, output_uri: str | None = None, dirname: str | None = None, *args: Any, **kwargs: Any) -> None:
        from clearml import Task

        if logger is not None:
            from ignite.handlers.clearml_logger import ClearMLLogger

            if not isinstance(logger, ClearMLLogger):
                raise ConfigError(f"logger {logger!r} is not an ignite ClearMLLogger: pass one, or None")
        task: Any = Task.current_task()
        if task is None:
            raise ConfigError("ClearMLSaver needs a ClearML task: call clearml.Task.init(...) or create a ClearMLLogger first")
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
        kwargs.setdefault("registry", ClearMLRegistry(task))
        kwargs.setdefault("run", task_run(task))  # also with a registry that knows no task
        super().__init__(uri, **kwargs)
