"""Import an offline ClearML session and push its journal's records as ClearML models, once.

A saver under ClearML's offline mode records checkpoints in a local journal
(:mod:`tracker_saver.integrations.clearml.journal`) inside the session folder. :func:`import_offline_session`
(``tracker-saver sync SESSION``) then:

1. copies the session (a zip or a folder) to a temporary folder and marks its ``task.json``
   with the system tag ``tracker_saver-offline:<offline id>`` (:data:`SESSION_TAG`);
2. finds the task of an earlier sync by that tag, or runs ClearML's own
   ``Task.import_offline_session`` on the copy, which creates the task with the tag already
   set (its logs, metrics, artifacts);
3. pushes every journal record, oldest first, as the ClearML model an online save would have
   made (:func:`push_record`): name, tags, typed metadata, state, sha256, uri, and the task in
   its ``task`` field. Live ones are listed on the task's output models only while the task is
   ``created`` or ``in_progress``: clearml-server changes no finished task, and an imported
   session's task is ``completed`` (the task, its status and its list are then left alone).

Each model carries, from its ``models.create`` on, the system tags ``<SESSION_TAG><offline id>``
and ``<SESSION_TAG><offline id>/<record id>`` (hidden from the UI and from records). A second
sync finds them and writes only what is missing, so syncing twice is syncing once, and a sync
killed at any point finishes when run again, without duplicates. Metadata is written once
(a later change on the server is kept), and the model's state is then the server's.

Why not ClearML's import alone: it re-creates the ``OutputModel`` s listed in the session
(``offline_output_models``) with only a name, tags, comment, framework and uri: no metadata,
no states (an evicted checkpoint would look loadable) and nothing to find them again, so a
second import duplicates the task and every model. tracker_saver therefore lists nothing
there, and this function calls ClearML's import itself.

Examples:
    Needs a ClearML server (``tests/test_clearml_offline.py`` runs it against the stand-in)::

        report = import_offline_session("~/.clearml/cache/offline/offline-1f2e....zip")
        report.task_id, report.created   # ('4a7c...', 12)
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tracker_saver.core.errors import ConfigError, StorageError
from tracker_saver.core.outage import DEFAULT_TIMEOUT_S
from tracker_saver.core.records import DERIVED_ALIASES, MetaValue, Record, RecordState, StreamId
from tracker_saver.integrations.clearml.codec import (
    ALIAS_TAG_PREFIX,
    ARCHIVED_TAG,
    STATE_TAGS,
    STREAM_TAG_PREFIX,
    mirror,
    with_metadata,
)
from tracker_saver.integrations.clearml.conf import with_clearml_credentials
from tracker_saver.integrations.clearml.internals import OFFLINE_TASK_FILE
from tracker_saver.integrations.clearml.journal import JOURNAL
from tracker_saver.integrations.clearml.registry import ClearMLRegistry
from tracker_saver.registry.base import Query
from tracker_saver.registry.sqlite import SQLiteRegistry
from tracker_saver.save.ownership import read_owner, take_over
from tracker_saver.storage import is_remote, open_storage

__all__ = ["SESSION_TAG", "SyncReport", "import_offline_session", "push_record"]

#: System-tag prefix of an imported task (``<prefix><offline id>``) and of each model it pushed.
SESSION_TAG = "tracker_saver-offline:"
_TASK_FILE = OFFLINE_TASK_FILE  # clearml's Task._offline_filename
#: Task statuses in which clearml-server changes a task's model list.
_WRITABLE_STATUSES = ("created", "in_progress")


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SyncReport:
    """What one sync did: the task, and how many records it created, completed or found done.

    Examples:
        >>> SyncReport("4a7c", imported=True, created=3, completed=0, unchanged=0).records
        3
    """

    task_id: str
    imported: bool  # this call ran ClearML's import (False: an earlier sync or task_id= had)
    created: int  # models created by this call
    completed: int  # models an earlier, interrupted sync created and this call finished
    unchanged: int  # models already complete
    handed_over: int = 0  # streams at output_uri that passed from the journal to the server (save.ownership)

    @property
    def records(self) -> int:
        """How many journal records the session holds."""
        return self.created + self.completed + self.unchanged


def _open_session(session: str | Path, into: Path) -> dict[str, Any]:
    """Copy ``session`` (zip or folder) into ``into``; its ``task.json``. Checks come first."""
    path = Path(session).expanduser()
    fix = "pass the offline session zip or folder that Task.close() reported (Task.get_offline_mode_folder())"
    if path.is_file():
        if not zipfile.is_zipfile(path):
            raise ConfigError(f"offline session {str(path)!r} is not a zip file: {fix}")
        with zipfile.ZipFile(path) as archive:
            archive.extractall(into)
    elif path.is_dir():
        shutil.copytree(path, into, dirs_exist_ok=True)
    else:
        raise ConfigError(f"offline session {str(path)!r} does not exist: {fix}")
    try:
        task = json.loads((into / _TASK_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"offline session {str(path)!r} has no readable {_TASK_FILE} ({exc}): {fix}") from exc
    if not (into / JOURNAL).is_file():
        raise ConfigError(
            f"offline session {str(path)!r} has no tracker_saver journal ({JOURNAL}): no TrackerSaver saved "
            "in it; import it with clearml.Task.import_offline_session instead"
        )
    if not isinstance(task, dict) or not str(task.get("id") or ""):
        raise ConfigError(f"offline session {str(path)!r}: its {_TASK_FILE} names no task id: {fix}")
    return task


def _find_task(registry: ClearMLRegistry, offline_id: str) -> str | None:
    """The task an earlier sync imported this session into (the oldest, if several)."""
    transport = registry.transport
    data = transport.send(
        transport.services().tasks.GetAllRequest(
            system_tags=[SESSION_TAG + offline_id], only_fields=["id", "created"], order_by=["created"]
        ),
        f"looking up the task of offline session {offline_id}",
    )
    found = [str(t["id"]) for t in data.get("tasks") or []]
    return found[0] if found else None


def _import(folder: Path, task: dict[str, Any]) -> str:
    """ClearML's own import of ``folder``, the task created with our system tag already set."""
    from clearml import Task

    task["system_tags"] = sorted({*(task.get("system_tags") or []), SESSION_TAG + str(task["id"])})
    (folder / _TASK_FILE).write_text(json.dumps(task), encoding="utf-8")
    task_id = Task.import_offline_session(str(folder))
    if not task_id:
        raise ConfigError(f"ClearML could not import offline session {task['id']}: see ClearML's messages above")
    return str(task_id)


def _fields(record: Record) -> dict[str, MetaValue]:
    """The model metadata an online save leaves for ``record`` (its typed metadata and own fields)."""
    fields: dict[str, MetaValue] = {
        **record.metadata,
        "slot": record.slot,
        "created_at": record.created_at,
        "stream": record.stream,
        "filename": record.filename,
        "run": record.run,
        "slot_key": record.key,
        "uri": record.uri or "",
        "output_uri": record.output_uri,
        "sha256": record.sha256,
        "size": record.size,
        "error": record.error,
        "state": record.state.value,
    }
    return {k: v for k, v in fields.items() if v is not None or k in record.metadata}


def push_record(
    registry: ClearMLRegistry, record: Record, model: dict[str, Any] | None, *, task_id: str, session: str
) -> tuple[dict[str, Any], bool]:
    """Make ``record``'s model complete: created if ``model`` is None, metadata once, state mirrored.

    Each step is safe to repeat, so a sync killed anywhere in it finishes on the next run.
    Returns the model as it is now, and whether this call wrote anything.
    """
    transport, wrote = registry.transport, False
    services = transport.services()
    what = f"model of offline record {record.id} ({record.filename!r})"
    if model is None:
        project_id = transport.project_id(record.project, create=True)
        fields = {
            "name": record.name,
            "uri": "",
            "tags": sorted(
                {
                    *record.tags,
                    *(ALIAS_TAG_PREFIX + a for a in record.aliases if a not in DERIVED_ALIASES),
                    STREAM_TAG_PREFIX + record.stream,
                    STATE_TAGS[RecordState.PENDING],
                }
            ),
            "system_tags": [ARCHIVED_TAG, SESSION_TAG + session, f"{SESSION_TAG}{session}/{record.id}"],
            "comment": f"tracker_saver checkpoint {record.filename} of run {record.run} (saved offline)",
        }
        data = transport.send(
            services.models.CreateRequest(
                **fields, project=project_id, task=task_id, framework=registry.tasks.framework, ready=False
            ),
            f"creating the {what}",
        )
        model, wrote = {**fields, "id": str(data["id"]), "project": project_id, "task": task_id, "metadata": {}}, True
    if "state" not in (model.get("metadata") or {}):  # the commit point: the model is a record from here
        items = _fields(record)
        transport.write_metadata(model["id"], items, f"writing the metadata of the {what}")
        model, wrote = with_metadata(model, items), True
    state = transport.record(model).state  # the server's, once it has one
    shown = mirror(model, state, record.stream)
    if (
        any(sorted(model.get(k) or []) != shown[k] for k in ("tags", "system_tags"))
        or (model.get("uri") or "") != shown["uri"]
    ):
        transport.send(
            services.models.EditRequest(model=model["id"], **shown), f"updating the {what}", record_id=model["id"]
        )
        model, wrote = {**model, **shown}, True
    return model, wrote


def _task_outputs(registry: ClearMLRegistry, task_id: str) -> dict[str, str] | None:
    """The task's output models (entry name -> model id); ``None`` when the task has finished.

    clearml-server lists a model on a task only while the task is ``created`` or ``in_progress``;
    an imported offline session's task is ``completed``: its models are linked by their ``task``
    field only, and the task is left as it is.
    """
    transport = registry.transport
    data = transport.send(
        transport.services().tasks.GetAllRequest(id=[task_id], only_fields=["id", "status", "models.output"]),
        f"reading the models of task {task_id}",
    )
    tasks = data.get("tasks") or []
    if any(t.get("status") not in _WRITABLE_STATUSES for t in tasks):
        return None
    entries = [e for t in tasks for e in ((t.get("models") or {}).get("output") or [])]
    return {str(e.get("name")): str(e.get("model")) for e in entries}


def import_offline_session(
    session: str | Path,
    *,
    task_id: str | None = None,
    project_root: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    progress: Callable[[Record], None] | None = None,
) -> SyncReport:
    """Import an offline ClearML session (once) and push its checkpoints' records as models (once).

    Args:
        session: the offline session zip or folder (``Task.get_offline_mode_folder()``).
        task_id: push into this task instead (e.g. one ``Task.import_offline_session`` made
            already); nothing is imported then.
        project_root: as ``ClearMLRegistry(project_root=...)``: models under ``ROOT/<project>``.
        timeout: seconds one call may wait on a server that stopped answering.
        progress: called with each record once its model is complete.

    Raises:
        ConfigError: the session is not one (nothing is imported), or ClearML is still offline.
        RegistryError: the server failed; running it again goes on where it stopped.

    Examples:
        Needs a ClearML server::

            import_offline_session("offline-1f2e.zip").task_id   # '4a7c...'
    """
    from clearml import Task

    if Task.is_offline():
        raise ConfigError(
            "ClearML is in offline mode here, so the session cannot be imported: unset CLEARML_OFFLINE_MODE "
            "(or call Task.set_offline(False)) on a machine that reaches the ClearML server"
        )
    with tempfile.TemporaryDirectory(prefix="tracker-saver-sync-") as tmp:
        folder = Path(tmp) / "session"
        task = _open_session(session, folder)
        offline_id = str(task["id"])
        registry = ClearMLRegistry(project_root=project_root, timeout=timeout)  # connects: fails before any import
        found = task_id or _find_task(registry, offline_id)
        imported = found is None
        target = found or _import(folder, task)
        journal = SQLiteRegistry(folder / JOURNAL)
        try:
            records = sorted(journal.records.query(Query()), key=lambda r: (r.created_at, int(r.id)))
            journal_id = journal.claims.registry_id("")
        finally:
            journal.close()
        existing: dict[str, dict[str, Any]] = {}
        for model in registry.transport.all_models(
            {"system_tags": [SESSION_TAG + offline_id]},
            ["id", "name", "project", "task", "uri", "tags", "system_tags", "metadata", "created"],
            f"reading the models of offline session {offline_id}",
        ):
            for tag in model.get("system_tags") or []:
                existing.setdefault(tag, model)  # the oldest, if ever two
        # The task lists, per filename, the latest loadable record (as the last online save would).
        listed = {r.filename: r.id for r in records if r.state in (RecordState.LIVE, RecordState.REVIVED)}
        outputs = _task_outputs(registry, target)
        counts = {"created": 0, "completed": 0, "unchanged": 0}
        model_ids: dict[str, str] = {}  # journal record id -> its model's id; a pin comes after its source
        for record in records:
            before = existing.get(f"{SESSION_TAG}{offline_id}/{record.id}")
            source = str(record.metadata.get("pinned_from"))
            if source in model_ids:  # a pin names its source by id: the model's, not the journal's
                record = replace(record, metadata={**record.metadata, "pinned_from": model_ids[source]})
            model, wrote = push_record(registry, record, before, task_id=target, session=offline_id)
            model_ids[record.id] = str(model["id"])
            if (
                outputs is not None
                and listed.get(record.filename) == record.id
                and outputs.get(record.filename) != model["id"]
            ):
                wrote = registry.tasks.attach(model, record.filename) or wrote
            counts["created" if before is None else "completed" if wrote else "unchanged"] += 1
            if progress is not None:
                progress(record)
        handed = _hand_over(registry, journal_id, {r.stream_id for r in records if r.output_uri}, timeout)
    return SyncReport(target, imported=imported, **counts, handed_over=handed)


def _hand_over(registry: ClearMLRegistry, journal_id: str, streams: set[StreamId], timeout: float) -> int:
    """Hand each stream the journal owns at its output_uri to the server's registry; how many were.

    The journal stood in for the server while offline: its records now live on the server, so
    online saves into these streams (``continue_last_task``) must find the server the owner. A
    stream another registry owns, or an output_uri this machine cannot reach, is left as it is
    with a warning that says how to hand it over by hand: the sync itself never fails for it.
    """
    handed = 0
    for stream in sorted(streams, key=lambda s: s.label):
        try:
            options: dict[str, Any] = {"timeout": timeout} if is_remote(stream.output_uri) else {}
            storage = open_storage(stream.output_uri, **with_clearml_credentials(stream.output_uri, options))
            owner = read_owner(storage, stream)
            if owner is not None and owner.registry_id == journal_id:
                take_over(storage, registry, stream, from_id=journal_id)
                handed += 1
        except (ConfigError, StorageError, ModuleNotFoundError) as exc:
            log.warning(
                "stream %s stays owned by the offline journal (%s): on a machine that reaches it, run "
                "`tracker-saver streams take-over %s --project ... --run ... --stream ... --from %s` with this registry",
                stream.label,
                exc,
                stream.output_uri,
                journal_id,
            )
    return handed
