"""The ClearML registry: records as ClearML models, read and written over the API through one ``send``.

How records map to models (and claims to hidden models) is
:mod:`tracker_saver.integrations.clearml.codec`. :class:`ClearMLRegistry` holds its transport, the
one place ClearML errors become ``RegistryError`` (:mod:`~tracker_saver.integrations.clearml.transport`),
and one collaborator per job, each in its own module and given only the transport (and the tasks
where it creates or mirrors models): the record's model on its task and its state mirror
(:mod:`~tracker_saver.integrations.clearml.tasks`). Three of them are the registry's parts:
``records``, reads and state changes (:mod:`~tracker_saver.integrations.clearml.records`);
``labels``, names, tags, aliases and pinned records (:mod:`~tracker_saver.integrations.clearml.labels`);
``claims``, stream claims (:mod:`~tracker_saver.integrations.clearml.claims`). This module adds
what a ``TrackerSaver`` asks of a registry that knows its run (``RunContext``).

Requests per operation, measured against the stand-in (``tests/test_clearml_registry.py``
asserts them): ``create_pending`` 2 (``models.create`` + ``models.add_or_update_metadata``;
once per project 1 more to look it up); ``make_live`` 4 (get, metadata, edit,
``tasks.add_or_update_model``); ``evict`` 4 (get, edit, ``tasks.delete_models``, metadata; 5
when another process listed the model, to read the task's list first); ``supersede`` 5 with a
replaced record (``models.get_all``, metadata, then the eviction's edit, delete_models,
metadata); ``claim`` 3 when the stream is free (get_all, create, get_all), 2 to renew (get_all,
edit); ``release`` 2 (get_all, ``models.delete``); ``get`` 1; ``query`` 1 per 500 models.
ClearML's own ``OutputModel`` + ``update_weights`` + ``set_all_metadata`` + ``tags`` makes
~18, and ignite's ``ClearMLSaver`` ~21 per save.

Examples:
    Needs a ClearML server (``tests/test_clearml_*.py`` run these against the stand-in)::

        from clearml import Task
        task = Task.init("mnist", "resnet-lr0.1")
        registry = ClearMLRegistry()  # records of this task
        live = registry.records.query(Query(project="mnist", states=(RecordState.LIVE,)))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tracker_saver.core.outage import DEFAULT_TIMEOUT_S
from tracker_saver.integrations.clearml.binding import skip_saves_while
from tracker_saver.integrations.clearml.claims import ClearMLClaims
from tracker_saver.integrations.clearml.codec import CLAIM_TAG_PREFIX, STATE_TAGS, STREAM_TAG_PREFIX, task_run
from tracker_saver.integrations.clearml.conf import with_clearml_credentials
from tracker_saver.integrations.clearml.journal import offline_journal
from tracker_saver.integrations.clearml.labels import ClearMLLabels
from tracker_saver.integrations.clearml.records import ClearMLRecords
from tracker_saver.integrations.clearml.tasks import ClearMLTasks
from tracker_saver.integrations.clearml.transport import ClearMLTransport
from tracker_saver.registry.base import Labels, RecordStore, Registry, StreamClaims
from tracker_saver.save.local_view import views_root

__all__ = ["CLAIM_TAG_PREFIX", "ClearMLRegistry", "STATE_TAGS", "STREAM_TAG_PREFIX", "from_spec", "task_run"]


class ClearMLRegistry(Registry):
    """Records as ClearML models: the run's task lists its live checkpoints as output models.

    Args:
        task: the ClearML ``Task`` whose checkpoints these are; ``None`` uses
            ``Task.current_task()`` at each save (records of a project and run that match no
            task are models without a task). Reading needs no task.
        project_root: a ClearML project under which record projects live
            (``"team/ckpts"`` + project ``mnist`` → ClearML project ``team/ckpts/mnist``).
        framework: the framework shown on each model.
        timeout: seconds one call may wait on a ClearML server that stopped answering (refused,
            hanging, or answering 5xx) before it raises ``RegistryError``; default 60. The
            registry logs in with a session of its own, so this never changes the SDK's
            settings (:mod:`tracker_saver.integrations.clearml.session`, docs/outages.md).

    Attributes:
        transport: the connection every request goes through (session, ``send``, projects, model reads).
        tasks: the models' tasks: the task given, each model's output-model entry, the state mirror.

    Note:
        Safe to call from the upload worker thread: the session is thread-safe and the
        registry's own caches are locked.

    Raises:
        ConfigError: ClearML is not configured, the server cannot be reached, or it is too old.

    Examples:
        With a configured ClearML server::

            registry = ClearMLRegistry(project_root="experiments")
            registry.records.get("4f1c...").name   # 'best_model_17_val_acc=0.9312.pt'
    """

    def __init__(
        self,
        task: Any = None,
        *,
        project_root: str | None = None,
        framework: str = "PyTorch",
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.transport = ClearMLTransport(task, project_root=project_root, timeout=timeout)
        self.tasks = ClearMLTasks(self.transport, task, framework=framework)
        self.records: RecordStore = ClearMLRecords(self.transport, self.tasks, self._skip)
        self.labels: Labels = ClearMLLabels(self.transport, self.tasks, self.records)
        self.claims: StreamClaims = ClearMLClaims(self.transport)
        self.transport.session()  # connect now: a bad configuration fails here, before any training
        self.uri = self.transport.uri  # its final form once logged in: clearml://HOST[:PORT][/ROOT]

    def artifact_task(self) -> Any:
        """The ClearML task that runs now (``None`` if none): ``LogUploader(saver=...)`` attaches logs to it."""
        return self.tasks.current_task()

    # -- what a TrackerSaver asks of a registry that knows its run (tracker_saver.save.saver.RunContext)
    def run_defaults(self) -> dict[str, str]:
        """The task's project, run (``<task name>.<task id>``) and output_uri, for a ``TrackerSaver`` given none."""
        found = self.task_project_run
        if found is None:
            return {}
        defaults = {"project": found[0], "run": found[1]}
        output_uri = getattr(self.tasks.current_task(), "output_uri", None)
        if output_uri:
            defaults["output_uri"] = str(output_uri)
        return defaults

    def storage_options_for(self, output_uri: str, options: Mapping[str, Any]) -> dict[str, Any]:
        """Add clearml.conf's S3 credentials when neither ``options`` nor boto3's chain has any."""
        return with_clearml_credentials(output_uri, options)

    def guard_writes(self, is_writing: Callable[[], bool]) -> None:
        """Make ClearML's ``torch.save`` binding (``Task.init`` patches it) skip what is saved while ``is_writing()``."""
        skip_saves_while(is_writing, views=views_root())

    @property
    def task_project_run(self) -> tuple[str, str] | None:
        """``(project, run)`` of the registry's task, as records name them; ``None`` without a task."""
        task = self.tasks.current_task()
        if task is None:
            return None
        names = self.transport.project_names([task.project])
        return self.transport.record_project(names.get(task.project, "")), task_run(task)


def from_spec(project_root: str | None, *, timeout: float) -> Registry:
    """``registry="clearml[:ROOT]"``: the current task's server, or its local journal in ClearML's offline mode."""
    journal = offline_journal()
    return journal if journal is not None else ClearMLRegistry(project_root=project_root, timeout=timeout)
