"""What ClearML shows of a record: its model listed on its run's task, and its state mirrored on the model.

A live record's model is one of its task's output models (entry name: Ignite's filename);
its state is mirrored where ClearML's UI, ``Model.query_models`` and ``InputModel`` look
(archive, tags, uri: :func:`tracker_saver.integrations.clearml.codec.mirror`). The truth is the
model's metadata ``state`` (:mod:`tracker_saver.integrations.clearml.records`).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tracker_saver.core.errors import ConfigError, RegistryError
from tracker_saver.core.records import MetaValue, RecordState, UploadInfo
from tracker_saver.integrations.clearml.codec import mirror, pending_fields, pending_model, task_run, with_metadata
from tracker_saver.integrations.clearml.transport import ClearMLTransport, TaskNotWritableError

__all__ = ["ClearMLTasks"]


class ClearMLTasks:
    """A ClearML registry's tasks: which task a record's model belongs to, its output-model list, the mirror.

    Args:
        transport: the registry's transport, through which every request goes.
        task: the ``clearml.Task`` whose checkpoints these are; ``None``: ``Task.current_task()`` at each save.
        framework: the framework shown on each model it creates.

    Examples:
        Needs a ClearML server (``tests/test_clearml_*.py`` run these against the stand-in)::

            tasks = ClearMLTasks(ClearMLTransport(), None, framework="PyTorch")
            tasks.current_task()   # the task Task.init made, or None
    """

    def __init__(self, transport: ClearMLTransport, task: Any, *, framework: str) -> None:
        if not isinstance(framework, str) or not framework:
            raise ConfigError(f"framework {framework!r} must be a framework name such as 'PyTorch'")
        self._transport = transport
        #: The task given (``None``: the current task at each save).
        self.task = task
        #: The framework shown on each model this registry creates.
        self.framework = framework
        self._lock = threading.Lock()
        self._attached: dict[tuple[str, str], str] = {}  # (task id, entry name) -> model id we listed
        self._last_created = 0.0

    def current_task(self) -> Any:
        """The registry's task, else ClearML's current task (``None`` if none)."""
        if self.task is not None:
            return self.task
        from clearml import Task

        return Task.current_task()

    def _task_for(self, project_id: str, run: str) -> str | None:
        """The id of the registry's task when ``run`` is that task (``<task name>.<task id>``) in this project."""
        task = self.current_task()
        if task is None:
            return None
        try:
            task_project, this_run = task.project, task_run(task)
        except Exception as exc:
            raise RegistryError(
                f"ClearML registry {self._transport.uri}: cannot read the current task ({exc})"
            ) from exc
        return str(task.id) if task_project == project_id and this_run == run else None

    def create_model(
        self,
        info: UploadInfo,
        *,
        uri: str,
        metadata: dict[str, MetaValue],
        tags: list[str],
        extra: dict[str, MetaValue],
        kind: str,
    ) -> dict[str, Any]:
        """Create the model of ``info`` not ready (as a pending one) on its run's task, then write its
        metadata (``extra`` last): the model as written. ``kind`` names it in messages ("pinned model")."""
        project_id = self._transport.project_id(info.project, create=True)
        assert project_id is not None
        task_id = self._task_for(project_id, info.run)
        with self._lock:
            now = max(time.time(), self._last_created + 1e-6)  # creation order survives equal clock reads
            self._last_created = now
        fields = {**pending_fields(info, uri=uri, metadata=metadata, created_at=now), **extra}
        new = pending_model(info, tags)
        data = self._transport.send(
            self._transport.services().models.CreateRequest(
                **new, project=project_id, task=task_id, framework=self.framework, ready=False
            ),
            f"creating the {kind} of {info.filename!r}",
        )
        record_id = str(data["id"])
        self._transport.write_metadata(
            record_id, fields, f"writing the metadata of {kind} {record_id} ({info.filename!r})"
        )
        return with_metadata({**new, "id": record_id, "project": project_id, "task": task_id}, fields)

    def attach(self, model: dict[str, Any], filename: str) -> bool:
        """List the model among its task's output models (entry name: Ignite's filename); whether it is listed.

        A finished task (completed, stopped, failed, published: an imported offline session, a save
        after ``task.close()``) cannot be changed on clearml-server: the model is then linked by its
        ``task`` field only, the task and its status are left alone, and nothing fails.
        """
        task_id = model.get("task")
        if not task_id:
            return False
        try:
            self._transport.send(
                self._transport.services().tasks.AddOrUpdateModelRequest(
                    task=task_id, name=filename, model=model["id"], type="output"
                ),
                f"listing model {model['id']} on task {task_id}",
                record_id=model["id"],
            )
        except TaskNotWritableError:
            return False
        with self._lock:
            self._attached[(task_id, filename)] = model["id"]
        return True

    def detach(self, model: dict[str, Any], filename: str) -> None:
        """Take the model off its task's output models, unless the entry now names another model."""
        task_id = model.get("task")
        if not task_id:
            return
        tasks = self._transport.services().tasks
        with self._lock:
            known = self._attached.get((task_id, filename))
        if known is None:  # attached by another process: look before deleting by name
            data = self._transport.send(
                tasks.GetAllRequest(id=[task_id], only_fields=["id", "models.output"]),
                f"reading the models of task {task_id}",
                record_id=model["id"],
            )
            entries = [e for t in data.get("tasks") or [] for e in ((t.get("models") or {}).get("output") or [])]
            known = next((e.get("model") for e in entries if e.get("name") == filename), None)
        # Entries are keyed by name: a later save of the same filename (e.g. after a restart)
        # replaced ours, and that live model must stay listed.
        if known != model["id"]:
            return
        try:
            self._transport.send(
                tasks.DeleteModelsRequest(task=task_id, models=[{"name": filename, "type": "output"}]),
                f"taking model {model['id']} off task {task_id}",
                record_id=model["id"],
            )
        except TaskNotWritableError:
            # A finished task keeps its list: the model is archived, its uri cleared, its state says evicted.
            pass
        with self._lock:
            self._attached.pop((task_id, filename), None)

    def show(self, model: dict[str, Any], state: RecordState, stream: str) -> dict[str, Any]:
        """Mirror ``state`` where ClearML's UI, ``Model.query_models`` and ``InputModel`` look (:func:`mirror`)."""
        fields = mirror(model, state, stream)
        self._transport.send(
            self._transport.services().models.EditRequest(model=model["id"], **fields),
            f"updating model {model['id']}",
            record_id=model["id"],
        )
        return {**model, **fields}
