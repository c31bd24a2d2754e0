"""The ClearML registry: records as ClearML models, read and written over the API through one ``send``.

How records map to models (and claims to hidden models) is
:mod:`tracker_saver.integrations.clearml.codec`. :class:`ClearMLRegistry` holds its transport, the
one place ClearML errors become ``RegistryError`` (:mod:`~tracker_saver.integrations.clearml.transport`),
and one collaborator per job, each in its own module and given only the transport (and the tasks
where it creates or mirrors models): the record's model on its task and its state mirror
(:mod:`~tracker_saver.integrations.clearml.tasks`); state changes
(:mod:`~tracker_saver.integrations.clearml.states`); names, tags, aliases and pinned records
(:mod:`~tracker_saver.integrations.clearml.labels`); stream claims
(:mod:`~tracker_saver.integrations.clearml.claims`). The registry's seam methods delegate to them;
this module adds queries, derived aliases and what a ``TrackerSaver`` asks of a registry that
knows its run (``RunContext``).

Queries push down what ``models.get_all`` (the call behind ``Model.query_models``) can
answer exactly: project, run, stream, filename, output_uri, slot, states, and ``==``/``in`` conditions on
string values, all as ``metadata.<key>.value`` list filters (a value starting with ``-`` or
``__$`` is an operator to the server, so it is never pushed). Ranges, ``!=``, numbers and the
sort are done client-side by :func:`tracker_saver.registry.base.select`, the same function
that defines the SQLite semantics, so both backends answer the same. Models without
tracker_saver metadata (e.g. made by ignite's ``ClearMLSaver``) are never records.

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
        live = registry.query(Query(project="mnist", states=(RecordState.LIVE,)))
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from tracker_saver.core.claims import Holder
from tracker_saver.core.errors import UnreadableRecordError
from tracker_saver.core.outage import DEFAULT_TIMEOUT_S
from tracker_saver.core.records import DERIVED_ALIASES, LOADABLE, MetaValue, Record, RecordState, StreamId, UploadInfo
from tracker_saver.integrations.clearml.binding import skip_saves_while
from tracker_saver.integrations.clearml.claims import ClearMLClaims
from tracker_saver.integrations.clearml.codec import (
    ALIAS_TAG_PREFIX,
    CLAIM_TAG_PREFIX,
    STATE_TAGS,
    STREAM_TAG_PREFIX,
    is_record_model,
    metadata_filters,
    task_run,
)
from tracker_saver.integrations.clearml.codec import decode_value as decode_item
from tracker_saver.integrations.clearml.conf import with_clearml_credentials
from tracker_saver.integrations.clearml.journal import offline_journal
from tracker_saver.integrations.clearml.labels import ClearMLLabels
from tracker_saver.integrations.clearml.states import ClearMLStates
from tracker_saver.integrations.clearml.tasks import ClearMLTasks
from tracker_saver.integrations.clearml.transport import MODEL_FIELDS, ClearMLTransport
from tracker_saver.registry.base import Candidate, Query, Registry, derived_aliases, select, with_aliases
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
            registry.get("4f1c...").name   # 'best_model_17_val_acc=0.9312.pt'
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
        self._states = ClearMLStates(self.transport, self.tasks)
        self._labels = ClearMLLabels(self.transport, self.tasks)
        self._claims = ClearMLClaims(self.transport)
        self.transport.session()  # connect now: a bad configuration fails here, before any training
        self.uri = self.transport.uri  # its final form once logged in: clearml://HOST[:PORT][/ROOT]

    # -- RecordStore: state changes (tracker_saver.integrations.clearml.states) --------------------
    def create_pending(self, info: UploadInfo, *, uri: str) -> Record:
        return self._states.create_pending(info, uri=uri)

    def make_live(
        self,
        record_id: str,
        *,
        sha256: str,
        size: int,
        metadata: dict[str, MetaValue] | None = None,
        fingerprint: str | None = None,
    ) -> Record:
        return self._states.make_live(record_id, sha256=sha256, size=size, metadata=metadata, fingerprint=fingerprint)

    def supersede(self, record_id: str, *, sha256: str, size: int, replaces: str | None) -> None:
        self._states.supersede(record_id, sha256=sha256, size=size, replaces=replaces)

    def set_state(
        self, record_id: str, state: RecordState, *, expected: Sequence[RecordState], error: str | None = None
    ) -> Record:
        return self._states.set_state(record_id, state, expected=expected, error=error)

    # -- Labels: names, tags, aliases, pins (tracker_saver.integrations.clearml.labels) ------------
    def rename(self, record_id: str, name: str) -> Record:
        return self._labels.rename(record_id, name)

    def add_tags(self, record_id: str, tags: Iterable[str]) -> Record:
        return self._labels.add_tags(record_id, tags)

    def remove_tags(self, record_id: str, tags: Iterable[str]) -> Record:
        return self._labels.remove_tags(record_id, tags)

    def set_alias(self, record_id: str, alias: str) -> Record:
        self._labels.set_alias(record_id, alias)
        return self.get(record_id)

    def remove_alias(self, project: str, alias: str) -> None:
        self._labels.remove_alias(project, alias)

    def create_pinned(
        self, info: UploadInfo, *, uri: str, sha256: str, size: int, fingerprint: str | None = None, once: bool = False
    ) -> Record:
        # No transaction to check ``once`` in: two pins made at once are two models, each naming its own bytes
        # (a fresh key per pin, tracker_saver.lifecycle.pins), and keep_copy looked for an earlier pin before copying.
        return self._labels.create_pinned(info, uri=uri, sha256=sha256, size=size, fingerprint=fingerprint)

    def delete_pinned(self, record_id: str, *, unless_aliased: bool = False) -> bool:
        return self._labels.delete_pinned(record_id, unless_aliased=unless_aliased)

    # -- StreamClaims: one hidden model per claim (tracker_saver.integrations.clearml.claims) ------
    def claim(self, stream: StreamId, holder: Holder) -> None:
        self._claims.claim(stream, holder)

    def holder(self, stream: StreamId) -> Holder | None:
        return self._claims.holder(stream)

    def release(self, stream: StreamId, holder: Holder) -> None:
        self._claims.release(stream, holder)

    def registry_id(self, project: str) -> str:
        """The id clearml-server gave ``project`` (random, made by the server): this registry, for its streams."""
        found = self.transport.project_id(project, create=True)
        assert found is not None  # create=True makes it
        return found

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

    def _candidates(self, records: list[Record]) -> list[Candidate]:
        """The loadable records of the streams of ``records`` that may hold a derived alias: one query."""
        streams = {r.stream_id for r in records if r.state in LOADABLE}
        if not streams:
            return []
        projects = sorted({s.project for s in streams})
        ids = [pid for pid in (self.transport.project_id(p, create=False) for p in projects) if pid is not None]
        params: dict[str, Any] = {"metadata.state.value": [s.value for s in LOADABLE]}
        for key in ("run", "stream"):
            values = sorted({getattr(s, key) for s in streams})
            if all(isinstance(v, str) and v and not v.startswith(("-", "__$")) for v in values):
                params[f"metadata.{key}.value"] = values
        out: list[Candidate] = []
        for model in self.transport.all_models(
            {"project": ids, **params}, ["id", "project", "metadata"], "reading aliases"
        ):
            if not is_record_model(model):
                continue
            meta = {k: decode_item(v) for k, v in (model.get("metadata") or {}).items()}
            names = self.transport.project_names([model.get("project") or ""])
            stream = StreamId(
                str(meta.get("output_uri") or ""),
                self.transport.record_project(names.get(model.get("project") or "", "")),
                str(meta.get("run") or ""),
                str(meta.get("stream") or ""),
            )
            if stream in streams and meta.get("state") in ("live", "revived"):
                created, score = meta.get("created_at"), meta.get("score")
                out.append(
                    (
                        str(model["id"]),
                        stream,
                        float(created) if isinstance(created, (int, float)) else 0.0,
                        float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None,
                    )
                )
        return out

    def _aliased(self, records: list[Record], known: list[Record] | None = None) -> list[Record]:
        """``records`` with derived aliases; ``known``: every loadable record of their streams, if at hand."""
        if known is not None:
            candidates: list[Candidate] = [
                (r.id, r.stream_id, r.created_at, r.score) for r in known if r.state in LOADABLE
            ]
        else:
            candidates = self._candidates(records)
        return with_aliases(records, derived_aliases(candidates), {r.id: r.aliases for r in records})

    def get(self, record_id: str) -> Record:
        return self._aliased([self.transport.record(self.transport.fetch(record_id))])[0]

    def user_aliases(self, record: Record) -> tuple[str, ...]:
        # One request, not get's two: user aliases are the model's own alias: tags (no derived ones to add).
        return self.transport.record(self.transport.fetch(record.id)).aliases

    def query(self, query: Query) -> list[Record]:
        params: dict[str, Any] = {}
        if query.project is not None:
            pid = self.transport.project_id(query.project, create=False)
            if pid is None:
                return []
            params["project"] = [pid]
        elif root := self.transport.root:
            data = self.transport.send(
                self.transport.services().projects.GetAllRequest(
                    name=f"^{re.escape(root)}/", only_fields=["id", "name"]
                ),
                f"listing the projects under {root!r}",
            )
            ids = [p["id"] for p in data.get("projects") or []]
            if not ids:
                return []
            params["project"] = ids
        pushed = query
        if query.alias in DERIVED_ALIASES:  # only a live/revived record holds latest or best
            states = LOADABLE if query.states is None else tuple(s for s in query.states if s in LOADABLE)
            pushed = replace(query, states=states)
        elif query.alias is not None:
            params["tags"] = [ALIAS_TAG_PREFIX + query.alias]
        filters = metadata_filters(pushed)
        if filters is None:
            return []
        params.update(filters)
        models = self.transport.all_models(params, MODEL_FIELDS, "querying models")
        names = self.transport.project_names(m.get("project") or "" for m in models)
        records = []
        for model in models:
            try:
                records.append(self.transport.record(model, names))
            except UnreadableRecordError as exc:  # edited by hand in the web UI: skipped, fsck names it
                self._skip(str(exc.record_id), exc.why)
        # Without narrowing filters, the answer already holds every loadable record of its streams.
        whole = (
            not (query.where or query.filename or query.slot is not None or query.name or query.tag)
            and (pushed.states is None or set(LOADABLE) <= set(pushed.states))
            and query.alias in (None, *DERIVED_ALIASES)
        )
        return select(self._aliased(records, records if whole else None), query)


def from_spec(project_root: str | None, *, timeout: float) -> Registry:
    """``registry="clearml[:ROOT]"``: the current task's server, or its local journal in ClearML's offline mode."""
    journal = offline_journal()
    return journal if journal is not None else ClearMLRegistry(project_root=project_root, timeout=timeout)
