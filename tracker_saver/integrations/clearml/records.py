"""The ClearML registry's records: reads with derived aliases, and state changes, each checked first.

State changes: ClearML has no compare-and-set, so each change reads the model, checks the
state it leaves, then writes. Toward a loadable state (``pending → live``, ``evicted →
live/revived``) metadata ``state`` is written first (the commit point) and the mirror after;
away from one (``live/revived → evicted``, ``pending → failed``) the mirror changes first
(archive, tags, uri cleared, off the task) and metadata ``state`` last. A failed follow-up
therefore never leaves a model that looks more loadable in ClearML than it is.
``supersede`` reads both models in one request, checks both, writes the staged sha256/size, then
evicts the replaced record that way; a replaced record someone deleted (ClearML's web UI) is
logged as a warning, and its slot reused.

Queries push down what ``models.get_all`` (the call behind ``Model.query_models``) can
answer exactly: project, run, stream, filename, output_uri, slot, states, and ``==``/``in`` conditions on
string values, all as ``metadata.<key>.value`` list filters (a value starting with ``-`` or
``__$`` is an operator to the server, so it is never pushed). Ranges, ``!=``, numbers and the
sort are done client-side by :func:`tracker_saver.registry.base.select`, the same function
that defines the SQLite semantics, so both backends answer the same. Models without
tracker_saver metadata (e.g. made by ignite's ``ClearMLSaver``) are never records.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from tracker_saver.core.errors import ConfigError, RegistryError, UnreadableRecordError
from tracker_saver.core.records import DERIVED_ALIASES, LOADABLE, MetaValue, Record, RecordState, StreamId, UploadInfo
from tracker_saver.integrations.clearml.codec import (
    ALIAS_TAG_PREFIX,
    MIN_NAME,
    check_metadata,
    check_tags,
    is_record_model,
    metadata_filters,
    with_metadata,
)
from tracker_saver.integrations.clearml.codec import decode_value as decode_item
from tracker_saver.integrations.clearml.tasks import ClearMLTasks
from tracker_saver.integrations.clearml.transport import MODEL_FIELDS, ClearMLTransport
from tracker_saver.registry.base import (
    Candidate,
    Query,
    RecordStore,
    check_transition,
    derived_aliases,
    select,
    with_aliases,
)

__all__ = ["ClearMLRecords"]

log = logging.getLogger(__name__)


class ClearMLRecords(RecordStore):
    """A ClearML registry's records: metadata ``state`` is the truth, the rest mirrors it.

    Args:
        transport: the registry's transport, through which every request goes.
        tasks: the registry's tasks, which create models, list them on their task and mirror states.
        unreadable: called with a model's id and why, for each model a query cannot read back
            (edited by hand in the web UI): the registry's ``skipped`` list.

    Examples:
        Needs a ClearML server (``tests/test_clearml_*.py`` run these against the stand-in)::

            transport = ClearMLTransport()
            records = ClearMLRecords(transport, ClearMLTasks(transport, None, framework="PyTorch"), print)
            records.set_state("4f1c...", RecordState.EVICTED, expected=LOADABLE).state   # RecordState.EVICTED
    """

    def __init__(
        self, transport: ClearMLTransport, tasks: ClearMLTasks, unreadable: Callable[[str, str], None]
    ) -> None:
        self._transport = transport
        self._tasks = tasks
        self._unreadable = unreadable

    def create_pending(self, info: UploadInfo, *, uri: str) -> Record:
        metadata = check_metadata(info.metadata, f"record {info.filename!r}")
        tags = check_tags(info.tags, f"record {info.filename!r}")
        if not isinstance(info.name, str) or len(info.name.strip()) < MIN_NAME:
            raise ConfigError(
                f"record name {info.name!r} is too short for a ClearML model (at least {MIN_NAME} characters): "
                "use a longer filename_prefix or name"
            )
        return self._transport.record(
            self._tasks.create_model(info, uri=uri, metadata=metadata, tags=tags, extra={}, kind="model")
        )

    def make_live(
        self,
        record_id: str,
        *,
        sha256: str,
        size: int,
        metadata: dict[str, MetaValue] | None = None,
        fingerprint: str | None = None,
    ) -> Record:
        model = self._transport.fetch(record_id)
        record = self._transport.record(model)
        if record.state is not RecordState.PENDING:
            raise RegistryError(
                f"record {record_id} is {record.state.value}, not pending: it cannot become live", record_id=record_id
            )
        extra = check_metadata(metadata or {}, f"record {record_id}")
        uri = record.uri or ""
        items = {**extra, "sha256": sha256, "size": int(size), "uri": uri, "state": RecordState.LIVE.value}
        if fingerprint is not None:
            items["fingerprint"] = fingerprint
        # The commit point: from here the record is live, whatever the mirror says.
        self._transport.write_metadata(record_id, items, f"committing model {record_id} ({record.filename!r})")
        model = self._tasks.show(with_metadata(model, items), RecordState.LIVE, record.stream)
        self._tasks.attach(model, record.filename)
        return self._transport.record(model)

    def _move(self, model: dict[str, Any], record: Record, state: RecordState, error: str | None = None) -> Record:
        """Change a checked record's state: metadata ``state`` is the truth, the rest mirrors it.

        Toward loadable the truth is written first; away from it, what ClearML's UI and
        ``Model.query_models`` see (archive, tags, uri, the task's list) changes first and the truth
        last. Either way a failed follow-up leaves the model looking no more loadable than it is.
        """
        items: dict[str, MetaValue] = {"state": state.value}
        if error is not None:
            items["error"] = str(error)
        what = f"marking model {record.id} ({record.filename!r}) {state.value}"
        if state.loadable:
            self._transport.write_metadata(record.id, items, what)
            model = self._tasks.show(with_metadata(model, items), state, record.stream)
            if not record.state.loadable:
                self._tasks.attach(model, record.filename)
        else:
            model = self._tasks.show(model, state, record.stream)
            if record.state.loadable:
                self._tasks.detach(model, record.filename)
            self._transport.write_metadata(record.id, items, what)
            model = with_metadata(model, items)
        return self._transport.record(model)

    def set_state(
        self, record_id: str, state: RecordState, *, expected: Sequence[RecordState], error: str | None = None
    ) -> Record:
        state = RecordState(state)
        model = self._transport.fetch(record_id)
        record = self._transport.record(model)
        check_transition(record, state, expected)
        return self._move(model, record, state, error)

    def supersede(self, record_id: str, *, sha256: str, size: int, replaces: str | None) -> None:
        """Note the staged digest on the pending record, then evict ``replaces``; both are checked first.

        ClearML has no transaction: both models are read (one request) and checked before anything
        is written, then the digest is written, then the eviction (see :meth:`_move`).
        """
        replaced = [] if replaces is None else [replaces]
        models = self._transport.fetch_many([record_id, *replaced], missing_ok=replaced)
        record = self._transport.record(models[record_id])
        if record.state is not RecordState.PENDING:
            raise RegistryError(
                f"record {record_id} is {record.state.value}, no longer pending: its save cannot commit",
                record_id=record_id,
            )
        old = self._transport.record(models[replaces]) if replaces in models else None
        if replaces is not None and old is None:
            # Deleted by another client (the web UI's delete): nothing to evict, the slot is reused.
            log.warning(
                "ClearML registry %s: record %s, which record %s replaces in its slot, no longer exists "
                "(deleted in ClearML's web UI?): the slot is reused",
                self._transport.uri,
                replaces,
                record_id,
            )
        if old is not None and old.state not in LOADABLE:
            raise RegistryError(
                f"record {old.id}, which record {record_id} replaces in its slot, is {old.state.value}, no longer "
                "live: another writer changed the slot",
                record_id=old.id,
            )
        self._transport.write_metadata(
            record_id, {"sha256": sha256, "size": int(size)}, f"noting the staged digest of model {record_id}"
        )
        if old is not None:
            self._move(models[old.id], old, RecordState.EVICTED)

    def _candidates(self, records: list[Record]) -> list[Candidate]:
        """The loadable records of the streams of ``records`` that may hold a derived alias: one query."""
        streams = {r.stream_id for r in records if r.state in LOADABLE}
        if not streams:
            return []
        projects = sorted({s.project for s in streams})
        ids = [pid for pid in (self._transport.project_id(p, create=False) for p in projects) if pid is not None]
        params: dict[str, Any] = {"metadata.state.value": [s.value for s in LOADABLE]}
        for key in ("run", "stream"):
            values = sorted({getattr(s, key) for s in streams})
            if all(isinstance(v, str) and v and not v.startswith(("-", "__$")) for v in values):
                params[f"metadata.{key}.value"] = values
        out: list[Candidate] = []
        for model in self._transport.all_models(
            {"project": ids, **params}, ["id", "project", "metadata"], "reading aliases"
        ):
            if not is_record_model(model):
                continue
            meta = {k: decode_item(v) for k, v in (model.get("metadata") or {}).items()}
            names = self._transport.project_names([model.get("project") or ""])
            stream = StreamId(
                str(meta.get("output_uri") or ""),
                self._transport.record_project(names.get(model.get("project") or "", "")),
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
        return self._aliased([self._transport.record(self._transport.fetch(record_id))])[0]

    def query(self, query: Query) -> list[Record]:
        params: dict[str, Any] = {}
        if query.project is not None:
            pid = self._transport.project_id(query.project, create=False)
            if pid is None:
                return []
            params["project"] = [pid]
        elif root := self._transport.root:
            data = self._transport.send(
                self._transport.services().projects.GetAllRequest(
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
        models = self._transport.all_models(params, MODEL_FIELDS, "querying models")
        names = self._transport.project_names(m.get("project") or "" for m in models)
        records = []
        for model in models:
            try:
                records.append(self._transport.record(model, names))
            except UnreadableRecordError as exc:  # edited by hand in the web UI: skipped, fsck names it
                self._unreadable(str(exc.record_id), exc.why)
        # Without narrowing filters, the answer already holds every loadable record of its streams.
        whole = (
            not (query.where or query.filename or query.slot is not None or query.name or query.tag)
            and (pushed.states is None or set(LOADABLE) <= set(pushed.states))
            and query.alias in (None, *DERIVED_ALIASES)
        )
        return select(self._aliased(records, records if whole else None), query)
