"""What ClearML shows of a record: its model listed on its run's task, and its state mirrored on the model.

A live record's model is one of its task's output models (entry name: Ignite's filename);
its state is mirrored where ClearML's UI, ``Model.query_models`` and ``InputModel`` look
(archive, tags, uri: :func:`tracker_saver.integrations.clearml.codec.mirror`). The truth is the
model's metadata ``state`` (:mod:`tracker_saver.integrations.clearml.states`).
"""

from __future__ import annotations

import time
from typing import Any

from tracker_saver.core.errors import RegistryError
from tracker_saver.core.records import MetaValue, RecordState, UploadInfo
from tracker_saver.integrations.clearml.codec import mirror, pending_fields, pending_model, task_run, with_metadata
from tracker_saver.integrations.clearml.transport import ClearMLTransport, TaskNotWritableError

__all__ = ["ClearMLTasks"]


class ClearMLTasks(ClearMLTransport):
    """A ClearML registry's tasks: which task a record's model belongs to, its output-model list, the mirror."""

    def _current_task(self) -> Any:
        if self._task is not None:
            return self._task
        from clearml import Task

        return Task.current_task()

    def _task_for(self, project_id: str, run: str) -> str | None:
        """The id of the registry's task when ``run`` is that task (``<task name>.<task id>``) in this project."""
        task = self._current_task()
        if task is None:
            return None
        try:
            task_project, this_run = task.project, task_run(task)
        except Exception as exc:
            raise RegistryError(f"ClearML registry {self.uri}: cannot read the current task ({exc})") from exc
        return str(task.id) if task_project == project_id and this_run == run else None

    def _create_model(
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
        project_id = self._project_id(info.project, create=True)
        assert project_id is not None
        task_id = self._task_for(project_id, info.run)
        with self._lock:
            now = max(time.time(), self._last_created + 1e-6)  # creation order survives equal clock reads
            self._last_created = now
        fields = {**pending_fields(info, uri=uri, metadata=metadata, created_at=now), **extra}
        new = pending_model(info, tags)
        data = self._send(
            self._services().models.CreateRequest(
                **new, project=project_id, task=task_id, framework=self._framework, ready=False
            ),
            f"creating the {kind} of {info.filename!r}",
        )
        record_id = str(data["id"])
        self._metadata_write(record_id, fields, f"writing the metadata of {kind} {record_id} ({info.filename!r})")
        return with_metadata({**new, "id": record_id, "project": project_id, "task": task_id}, fields)

    def _attach(self, model: dict[str, Any], filename: str) -> bool:
        """List the model among its task's output models (entry name: Ignite's filename); whether it is listed.

        A finished task (completed, stopped, failed, published: an imported offline session, a save
        after ``task.close()``) cannot be changed on clearml-server: the model is then linked by its
        ``task`` field only, the task and its status are left alone, and nothing fails.
        """
        task_id = model.get("task")
        if not task_id:
            return False
        try:
            self._send(
                self._services().tasks.AddOrUpdateModelRequest(
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

    def _detach(self, model: dict[str, Any], filename: str) -> None:
        """Take the model off its task's output models, unless the entry now names another model."""
        task_id = model.get("task")
        if not task_id:
            return
        tasks = self._services().tasks
        with self._lock:
            known = self._attached.get((task_id, filename))
        if known is None:  # attached by another process: look before deleting by name
            data = self._send(
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
            self._send(
                tasks.DeleteModelsRequest(task=task_id, models=[{"name": filename, "type": "output"}]),
                f"taking model {model['id']} off task {task_id}",
                record_id=model["id"],
            )
        except TaskNotWritableError:
            # A finished task keeps its list: the model is archived, its uri cleared, its state says evicted.
            pass
        with self._lock:
            self._attached.pop((task_id, filename), None)

    def _show(self, model: dict[str, Any], state: RecordState, stream: str) -> dict[str, Any]:
        """Mirror ``state`` where ClearML's UI, ``Model.query_models`` and ``InputModel`` look (:func:`mirror`)."""
        fields = mirror(model, state, stream)
        self._send(
            self._services().models.EditRequest(model=model["id"], **fields),
            f"updating model {model['id']}",
            record_id=model["id"],
        )
        return {**model, **fields}
