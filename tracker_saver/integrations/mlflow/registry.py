"""The MLflow registry: one MLflow 3 LoggedModel per checkpoint, linked to the run that saved it.

See :mod:`tracker_saver.integrations.mlflow.codec` for the mapping (name, tags, status, metrics)
and docs/mlflow.md for what MLflow's UI shows. MLflow has no transaction and no
compare-and-set: each state change reads the record, checks its state, then writes the
``tracker_saver.state`` tag (the truth every reader uses) and MLflow's status, in the order that
never shows a record as more loadable than it is: a status that leaves ``READY`` goes first, one
that becomes ``READY`` last.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

from tracker_saver.core.errors import ConfigError, RecordNotFoundError, RegistryError, UnreadableRecordError
from tracker_saver.core.outage import DEFAULT_TIMEOUT_S
from tracker_saver.core.records import (
    LOADABLE,
    LOADABLE_OR_PINNED,
    MetaValue,
    Record,
    RecordState,
    UploadInfo,
    check_alias,
)
from tracker_saver.integrations.mlflow.claims import MLflowClaims
from tracker_saver.integrations.mlflow.codec import (
    LEGAL_KEY,
    NOTE,
    OWN_KEYS,
    PREFIX,
    SCHEMA,
    UNLOGGED,
    as_committed,
    encode,
    model_name,
    note,
    person_text,
    read_filename,
    read_record,
    record_tags,
    schema_of,
    status_of,
)
from tracker_saver.integrations.mlflow.internals import tag_writer
from tracker_saver.integrations.mlflow.pushdown import record_filters, stream_filter
from tracker_saver.integrations.mlflow.store import MLflowStore
from tracker_saver.integrations.mlflow.transport import MLflowTransport
from tracker_saver.registry.base import (
    Labels,
    Query,
    RecordStore,
    Registry,
    StreamClaims,
    check_transition,
    derived_aliases,
    select,
    with_aliases,
)

__all__ = ["MLflowModels", "MLflowRegistry", "from_spec", "tracking_uri"]

log = logging.getLogger(__name__)

_ALIAS = PREFIX + "alias."
#: Put before a pin's MLflow name (the table cuts long names at their end), so that its row never reads the same as the record it copies.
_PINNED = "pinned-"


def tracking_uri(uri: str | None = None) -> str:
    """The tracking server to use: ``uri``, else ``$MLFLOW_TRACKING_URI``; ``ConfigError`` if neither.

    Examples:
        >>> tracking_uri("http://127.0.0.1:5000")
        'http://127.0.0.1:5000'
    """
    found = uri or os.environ.get("MLFLOW_TRACKING_URI") or ""
    if not found.startswith(("http://", "https://")):
        raise ConfigError(
            f"registry 'mlflow' needs a tracking server URI, got {found or 'none'!r}: set MLFLOW_TRACKING_URI="
            "http://HOST:PORT or pass registry='mlflow:http://HOST:PORT' (start one with `mlflow server`)"
        )
    return found


@dataclass(frozen=True)
class _Written:
    """A pending record as this process made it: what its save's later writes need, without a read."""

    schema: int
    record: Record
    run_id: str
    person: str = ""  # the text a person typed into its description (none while this process writes it)


class MLflowRegistry(Registry):
    """Records as MLflow LoggedModels on the tracking server at ``uri`` (default ``$MLFLOW_TRACKING_URI``).

    Its ``records`` and ``labels`` are one :class:`MLflowModels`; its ``claims``,
    :class:`~tracker_saver.integrations.mlflow.claims.MLflowClaims`.

    Examples:
        >>> MLflowRegistry("http://127.0.0.1:1").uri  # connects on the first call only
        'mlflow:http://127.0.0.1:1'
    """

    def __init__(
        self, uri: str | None = None, *, timeout: float = DEFAULT_TIMEOUT_S, experiment_prefix: str = ""
    ) -> None:
        self._transport = MLflowTransport(tracking_uri(uri), timeout=timeout)
        self._store = MLflowStore(self._transport, experiment_prefix=experiment_prefix)
        self.uri = self._transport.uri
        models = MLflowModels(self._transport, self._store, self._skip)
        self.records: RecordStore = models
        self.labels: Labels = models
        self.claims: StreamClaims = MLflowClaims(self._transport, self._store)
        #: The tracking server, the experiments' name prefix, and the bound on one call's wait (seconds).
        self.tracking_uri, self.experiment_prefix, self.timeout = (
            self._transport.tracking_uri,
            experiment_prefix,
            timeout,
        )

    # --- RunContext: what the active MLflow run knows -------------------------------------
    def run_defaults(self) -> dict[str, str]:
        """``project`` (the active run's experiment) and ``run`` (its name); ``ConfigError`` without an active run."""
        import mlflow

        active = mlflow.active_run()
        if active is None:
            raise ConfigError(
                f"registry {self.uri} has no active MLflow run to save under: save inside `with mlflow.start_run():` "
                "or pass project= and run= to TrackerSaver"
            )
        exp = self._transport.call(
            self._transport.client.get_experiment, "reading the active run's experiment", active.info.experiment_id
        )
        return {"project": str(exp.name).removeprefix(self.experiment_prefix), "run": str(active.info.run_name)}

    def storage_options_for(self, output_uri: str, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` unchanged: MLflow holds no storage credentials for tracker_saver."""
        return dict(options)

    def artifact_task(self) -> None:
        """``None``: a run's logs go to its output_uri only, never into MLflow's artifact store."""
        return None

    def guard_writes(self, is_writing: Callable[[], bool]) -> None:
        """Nothing to guard: MLflow does not hook ``torch.save``."""


class MLflowModels(RecordStore, Labels):
    """An MLflow registry's records and labels: both are LoggedModels' tags (and their experiments' for
    user aliases), written through one cache of the pending records this process made.

    One object is both parts: a label's change rewrites the same model description that a state
    change does (:meth:`_write`), and both read records with the same derived aliases.

    Args:
        transport: the registry's transport, through which every call goes.
        store: the registry's experiments, runs and model reads.
        unreadable: called with a model's id and why, for each model a query cannot read back
            (edited by a person): the registry's ``skipped`` list.

    Examples:
        Needs a tracking server (``tests/test_mlflow_*.py`` start one)::

            models = MLflowRegistry("http://127.0.0.1:5000").records
            models.get("m-4f1c...").name   # 'best_model_17_val_acc=0.9312.pt'
    """

    def __init__(self, transport: MLflowTransport, store: MLflowStore, unreadable: Callable[[str, str], None]) -> None:
        self._transport = transport
        self._store = store
        self._unreadable = unreadable
        # Pending records this process made, until they go live: a save's later steps write them
        # without reading them back. Any other record is read first: someone may have edited it.
        self._written: dict[str, _Written] = {}
        self._write_tags = tag_writer(transport.client)

    # --- writes ---------------------------------------------------------------------------
    def _create(self, info: UploadInfo, *, uri: str, state: RecordState, extra: dict[str, Any]) -> Record:
        exp_id = self._store.experiment_id(info.project)
        run_id = self._store.run_id(exp_id, info.run)
        pin = _PINNED if state is RecordState.PINNED else ""
        name = pin + model_name(info.filename)
        same = self._transport.call(
            self._transport.client.search_logged_models,
            "checking the model name",
            [exp_id],
            filter_string=f"name = '{name}'",
        )
        taken = any(read_filename(m) != info.filename for m in same)
        tags = record_tags(info, uri=uri, created_at=time.time())
        tags.update({PREFIX + k: encode(k, v) for k, v in {**extra, "state": state.value}.items() if v is not None})
        tags[NOTE] = note(_as_read(tags))
        params = {k: str(v) for k, v in info.metadata.items() if v is not None and LEGAL_KEY.match(k)}
        try:
            model = self._transport.call(
                self._transport.client.create_logged_model,
                f"creating the logged model of {info.filename}",
                exp_id,
                name=pin + model_name(info.filename, taken=taken),
                source_run_id=run_id,
                tags=tags,
                params=params,
            )
        except RegistryError:
            self._store.recheck(info.project)  # deleted since it was cached: that error names the restore command
            raise
        self._link(str(model.model_id), run_id, info.metadata.get("global_step"))
        if state is not RecordState.PENDING:
            self._metrics(str(model.model_id), run_id, info.metadata)
            self._transport.call(
                self._transport.client.finalize_logged_model, "finalizing a model", model.model_id, status_of(state)
            )
            return self.get(str(model.model_id))
        created = read_record(model)  # as just written: a pending record has no alias, so no read-back
        if created is None:
            return self.get(str(model.model_id))
        self._written[created.id] = _Written(SCHEMA, created, run_id)
        return created

    def _metrics(self, model_id: str, run_id: str, metadata: Mapping[str, MetaValue]) -> None:
        """The metadata's numbers as the model's metrics, but :data:`UNLOGGED`'s: MLflow's UI makes each
        metric a column (in no fixed order), so the step and the score are no longer behind five save timings."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        numbers = [
            (k, v)
            for k, v in metadata.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and LEGAL_KEY.match(k) and k not in UNLOGGED
        ]
        metrics = [Metric(k, float(v), now, 0, model_id=model_id) for k, v in numbers]
        if metrics:
            self._transport.call(
                self._transport.client.log_batch, f"logging the metrics of model {model_id}", run_id, metrics=metrics
            )

    def _link(self, model_id: str, run_id: str, step: MetaValue) -> None:
        """The model among the run's outputs, so the run's page in MLflow's UI lists it."""
        from mlflow.entities import LoggedModelOutput

        output = LoggedModelOutput(model_id, step if isinstance(step, int) and not isinstance(step, bool) else 0)
        self._transport.call(
            self._transport.client.log_outputs, f"linking model {model_id} to its run", run_id, [output]
        )

    def create_pending(self, info: UploadInfo, *, uri: str) -> Record:
        return self._create(info, uri=uri, state=RecordState.PENDING, extra={})

    def create_pinned(
        self, info: UploadInfo, *, uri: str, sha256: str, size: int, fingerprint: str | None = None, once: bool = False
    ) -> Record:
        # No transaction to check ``once`` in: two pins made at once are two models, each naming its own bytes
        # (a fresh key per pin, tracker_saver.lifecycle.pins), and keep_copy looked for an earlier pin before copying.
        extra = {"sha256": sha256, "size": int(size), "fingerprint": fingerprint}
        return self._create(info, uri=uri, state=RecordState.PINNED, extra=extra)

    def _mine(self, record_id: str) -> _Written:
        """The pending record as this process made it, else as the server has it (one read)."""
        found = self._written.get(record_id)
        if found is not None:
            return found
        model, record = self._store.read(record_id)
        return _Written(schema_of(model), record, str(model.source_run_id), person_text(model))

    def _write(
        self,
        schema: int,
        record: Record,
        fields: Mapping[str, Any],
        state: RecordState | None = None,
        *,
        person: str | None = None,
        aliases: tuple[str, ...] = (),
    ) -> None:
        """Write ``fields`` and the state tag in one request (in the record's ``schema``), and MLflow's
        status when it changes: after the tag when it becomes ``READY``, before it otherwise.

        With ``person`` (the text a person typed into the description), the description is
        rewritten in the same request: the record's new name and state, ``aliases``, its bytes.
        """
        tags = {PREFIX + k: encode(k, v, schema) for k, v in fields.items() if v is not None}
        if person is not None:
            now = replace(record, name=fields.get("name", record.name), state=state or record.state)
            tags[NOTE] = note(now, aliases, person)
        status = status_of(state) if state is not None and status_of(state) != status_of(record.state) else None
        if status is not None and status != "READY":  # MLflow stops offering it before the tag says so
            self._status(record.id, status)
        if state is not None:
            tags[PREFIX + "state"] = encode("state", state.value, schema)
        if tags:
            what = f"moving model {record.id} to {state.value}" if state is not None else f"updating model {record.id}"
            self._transport.call(self._write_tags, what, record.id, tags, record_id=record.id)
        if status == "READY":
            self._status(record.id, status)

    def _status(self, record_id: str, status: str) -> None:
        self._transport.call(
            self._transport.client.finalize_logged_model,
            f"setting the status of model {record_id} to {status}",
            record_id,
            status,
            record_id=record_id,
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
        mine = self._mine(record_id)
        record = mine.record
        if record.state is not RecordState.PENDING:
            raise RegistryError(
                f"record {record_id} is {record.state.value}, not pending: it cannot become live", record_id=record_id
            )
        meta = {k: v for k, v in record.metadata.items() if k not in OWN_KEYS} | dict(metadata or {})
        fields = {"sha256": sha256, "size": int(size), "metadata": meta, "fingerprint": fingerprint}
        self._write(mine.schema, record, fields, RecordState.LIVE, person=mine.person)
        self._metrics(record_id, mine.run_id, meta)  # every number of the checkpoint, logged once: now
        self._written.pop(record_id, None)  # live: others may edit it from now on
        return as_committed(
            record, RecordState.LIVE, sha256=sha256, size=int(size), metadata=meta, fingerprint=fingerprint
        )

    def set_state(
        self, record_id: str, state: RecordState, *, expected: Sequence[RecordState], error: str | None = None
    ) -> Record:
        state = RecordState(state)
        mine = self._mine(record_id)
        check_transition(mine.record, state, expected)
        aliases = self.user_aliases(mine.record) if state.loadable and record_id not in self._written else ()
        fields = {"error": error} if error is not None else {}
        self._write(mine.schema, mine.record, fields, state, person=mine.person, aliases=aliases)
        self._written.pop(record_id, None)
        return self.get(record_id)

    def supersede(self, record_id: str, *, sha256: str, size: int, replaces: str | None) -> None:
        """Check both records, note the staged digest, then evict ``replaces`` (no transaction in MLflow)."""
        mine = self._mine(record_id)
        record = mine.record
        if record.state is not RecordState.PENDING:
            raise RegistryError(
                f"record {record_id} is {record.state.value}, no longer pending: its save cannot commit",
                record_id=record_id,
            )
        # The replaced record is read: live for a while, anyone may have edited it since.
        old = self._replaced(replaces, record_id) if replaces is not None else None
        if old is not None and old[1].state not in LOADABLE:
            raise RegistryError(
                f"record {old[1].id}, which record {record_id} replaces in its slot, is "
                f"{old[1].state.value}, no longer live: another writer changed the slot",
                record_id=old[1].id,
            )
        self._write(mine.schema, record, {"sha256": sha256, "size": int(size)})
        self._written[record_id] = _Written(mine.schema, replace(record, sha256=sha256, size=int(size)), mine.run_id)
        if old is not None:
            self._write(schema_of(old[0]), old[1], {}, RecordState.EVICTED, person=person_text(old[0]))

    def _replaced(self, replaces: str, record_id: str) -> tuple[Any, Record] | None:
        """The record a save evicts; ``None``, with a warning, when a person deleted it (MLflow's page has Delete)."""
        try:
            return self._store.read(replaces)
        except RecordNotFoundError:  # "Others write too": a delete is read back, never fatal; the slot is reused
            log.warning(
                "MLflow registry %s: record %s, which record %s replaces in its slot, no longer exists "
                "(deleted in MLflow's UI?): the slot is reused",
                self._transport.uri,
                replaces,
                record_id,
            )
            return None

    def rename(self, record_id: str, name: str) -> Record:
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"a record's name must be a non-empty string, got {name!r}: e.g. 'baseline'")
        model, record = self._store.read(record_id)
        aliases = self.user_aliases(record)
        self._write(schema_of(model), record, {"name": name}, person=person_text(model), aliases=aliases)
        self._written.pop(record_id, None)
        return self.get(record_id)

    def _retag(self, record_id: str, change: Callable[[set[str]], set[str]]) -> Record:
        model, record = self._store.read(record_id)
        self._write(schema_of(model), record, {"tags": sorted(change(set(record.tags)))})
        self._written.pop(record_id, None)
        return self.get(record_id)

    def add_tags(self, record_id: str, tags: Iterable[str]) -> Record:
        new = set(tags)
        return self._retag(record_id, lambda have: have | new)

    def remove_tags(self, record_id: str, tags: Iterable[str]) -> Record:
        gone = set(tags)
        return self._retag(record_id, lambda have: have - gone)

    def set_alias(self, record_id: str, alias: str) -> Record:
        check_alias(alias)
        model, record = self._store.read(record_id)
        if not record.state.loadable:
            raise RegistryError(
                f"record {record_id} is {record.state.value}: an alias names a loadable record (live, revived or "
                "pinned); pick a live record (tracker-saver models list --live)",
                record_id=record_id,
            )
        exp = self._store.experiment(record.project, create=True)
        before = (exp.tags or {}).get(_ALIAS + alias)
        self._transport.call(
            self._transport.client.set_experiment_tag,
            f"setting alias {alias!r}",
            exp.experiment_id,
            _ALIAS + alias,
            record_id,
        )
        self._write(schema_of(model), record, {}, person=person_text(model), aliases=self.user_aliases(record))
        if before is not None and before != record_id:
            self._renote(before)
        return self.get(record_id)

    def _renote(self, record_id: str) -> None:
        """Rewrite the description of a record whose aliases changed; one that is gone or unreadable has none to fix."""
        try:
            model, record = self._store.read(record_id)
        except (RecordNotFoundError, UnreadableRecordError):
            return
        self._write(schema_of(model), record, {}, person=person_text(model), aliases=self.user_aliases(record))

    def remove_alias(self, project: str, alias: str) -> None:
        exp = self._store.experiment(project, create=False)
        if exp is None or _ALIAS + alias not in (exp.tags or {}):
            raise RecordNotFoundError(
                f"project {project!r} has no alias {alias!r} in {self._transport.uri}: see `tracker-saver models list`"
            )
        self._transport.call(
            self._transport.client.delete_experiment_tag, f"removing alias {alias!r}", exp.experiment_id, _ALIAS + alias
        )
        self._renote(str(exp.tags[_ALIAS + alias]))

    def user_aliases(self, record: Record) -> tuple[str, ...]:
        # One request, not get's three: user aliases are tags of the project's experiment (read afresh).
        exp = self._store.experiment(record.project, create=False)
        tags = (exp.tags or {}) if exp is not None else {}
        return tuple(sorted(k[len(_ALIAS) :] for k, v in tags.items() if k.startswith(_ALIAS) and v == record.id))

    def delete_pinned(self, record_id: str, *, unless_aliased: bool = False) -> bool:
        _, record = self._store.read(record_id)
        if record.state is not RecordState.PINNED:
            raise RegistryError(
                f"record {record_id} is {record.state.value}, not pinned: only pinned records can be deleted",
                record_id=record_id,
            )
        exp = self._store.experiment(record.project, create=False)
        tags = (exp.tags or {}) if exp is not None else {}
        aliases = [key for key, value in tags.items() if key.startswith(_ALIAS) and value == record_id]
        if unless_aliased and aliases:  # no transaction: an alias set after this read goes with the model
            return False
        for key in aliases:
            assert exp is not None
            self._transport.call(
                self._transport.client.delete_experiment_tag, "removing an alias", exp.experiment_id, key
            )
        self._transport.call(
            self._transport.client.delete_logged_model, f"deleting model {record_id}", record_id, record_id=record_id
        )
        return True

    # --- reads ----------------------------------------------------------------------------
    def get(self, record_id: str) -> Record:
        _, record = self._store.read(record_id)
        stream = Query(project=record.project, run=record.run, stream=record.stream, output_uri=record.output_uri)
        found = [r for r in self.query(stream) if r.id == record_id]
        return found[0] if found else replace(record, aliases=())

    def query(self, query: Query) -> list[Record]:
        experiments = self._store.experiments(query.project)
        wheres, whole = _searches(query)
        records = self._store.search(experiments, wheres, unreadable=self._unreadable) if wheres else []
        derived, user = self._aliases(experiments, query, records if whole else None)
        return select(with_aliases(records, derived, user), query)  # the whole query: the search only narrowed

    def pages(self, query: Query) -> Iterator[list[Record]]:
        """The records a page of MLflow's search at a time, in the server's creation order, each page
        sorted as :meth:`query` sorts; one page when the query sorts (a sort needs every record first)
        or when its filters need two searches."""
        wheres = record_filters(query)
        if query.order_by or len(wheres) != 1:
            yield self.query(query)
            return
        experiments = self._store.experiments(query.project)
        derived, user = self._aliases(experiments, query, None)
        skip, left = query.offset, query.limit
        each = replace(query, offset=0, limit=None)
        for page in self._store.pages(experiments, wheres[0], unreadable=self._unreadable, oldest_first=True):
            found = select(with_aliases(page, derived, user), each)
            found, skip = found[skip:], max(0, skip - len(found))
            if left is not None:
                found = found[:left]
                left -= len(found)
            if found:
                yield found
            if left == 0:
                return

    def _aliases(
        self, experiments: list[Any], query: Query, loadable: list[Record] | None
    ) -> tuple[dict[str, tuple[str, ...]], dict[str, list[str]]]:
        """The derived aliases of ``query``'s streams, from ``loadable`` (their loadable records, among
        others; searched when ``None``), and the user's aliases in the experiments' tags."""
        if loadable is None:
            loadable = self._store.search(experiments, [stream_filter(query, LOADABLE)], unreadable=self._unreadable)
        derived = derived_aliases((r.id, r.stream_id, r.created_at, r.score) for r in loadable if r.state in LOADABLE)
        user: dict[str, list[str]] = {}
        for exp in experiments:
            for key, value in (exp.tags or {}).items():
                if key.startswith(_ALIAS):
                    user.setdefault(value, []).append(key[len(_ALIAS) :])
        return derived, user


def _as_read(tags: Mapping[str, str]) -> Record:
    """The record that a new model's ``tags`` will read back as (for its first description)."""
    record = read_record(SimpleNamespace(model_id="new", tags=tags))
    assert record is not None  # the tags hold a state: read_record reads them
    return record


def _searches(query: Query) -> tuple[list[str], bool]:
    """The MLflow filters to search for ``query``, and whether they find every loadable record of
    the streams they find (then ``best`` and ``latest`` need no search of their own).

    A query narrowed by state at most is searched with every loadable state as well: one search.
    """
    wheres = record_filters(query)
    if not wheres or record_filters(replace(query, states=None, alias=None)) != [stream_filter(query)]:
        return wheres, False
    states = set(query.states if query.states is not None else RecordState)
    if query.alias is not None:
        states &= set(LOADABLE_OR_PINNED)
    states |= set(LOADABLE)
    if len(states) == len(RecordState):
        return [stream_filter(query)], True
    return [stream_filter(query, [s for s in RecordState if s in states])], True


def from_spec(uri: str | None, *, timeout: float) -> MLflowRegistry:
    """``registry="mlflow[:URI]"``: the tracking server at ``URI`` (default ``$MLFLOW_TRACKING_URI``)."""
    return MLflowRegistry(uri, timeout=timeout)
