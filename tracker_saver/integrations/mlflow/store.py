"""The MLflow registry's entities: experiments (projects), runs, and reading LoggedModels back.

A record's project is an MLflow experiment of that name; its run is the MLflow run named so in
it (the active run when it matches, else one created with the ``tracker_saver.run`` tag). A
deleted experiment is an error naming the fix, never silently re-created.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tracker_saver.core.errors import ConfigError, RecordNotFoundError, RegistryError, UnreadableRecordError
from tracker_saver.core.records import Record
from tracker_saver.integrations.mlflow.codec import PREFIX, SCHEMA, quoted, read_record
from tracker_saver.integrations.mlflow.transport import MLflowTransport

__all__ = ["MLflowStore"]

#: The experiment tag that holds the random id of this registry for the experiment's streams.
REGISTRY_ID = PREFIX + "registry_id"

#: Logged models per ``search_logged_models`` page (the server has no cap; 1000 took 2.2 s for 2000
#: records where 100 took 7.3 s, benchmarks/bench_mlflow.py).
PAGE = 1000


class MLflowStore:
    """Find or create an experiment and a run; fetch and search LoggedModels as records.

    Args:
        transport: the registry's transport, through which every call goes.
        experiment_prefix: prepended to a project to name its experiment (``""``: the experiment is the project).
    """

    def __init__(self, transport: MLflowTransport, *, experiment_prefix: str = "") -> None:
        self._transport = transport
        self.experiment_prefix = experiment_prefix
        self._run_ids: dict[tuple[str, str], str] = {}  # (experiment id, run name) -> MLflow run id
        # project -> its experiment's id and its registry id, kept from any lookup: neither ever changes
        # (a deleted experiment is found again by recheck, after a write fails)
        self._experiment_ids: dict[str, str] = {}
        #: project -> the registry id on its experiment, noted by every lookup (:meth:`MLflowClaims.registry_id` reads it).
        self.registry_ids: dict[str, str] = {}

    def experiment(self, project: str, *, create: bool) -> Any:
        """The experiment of ``project`` (``None`` when absent and not ``create``)."""
        name = self.experiment_prefix + project
        exp = self._transport.call(
            self._transport.client.get_experiment_by_name, f"looking up experiment {name!r}", name
        )
        if exp is not None and exp.lifecycle_stage == "deleted":
            raise RegistryError(
                f"MLflow registry {self._transport.uri}: experiment {name!r} (id {exp.experiment_id}) is deleted: restore "
                f"it (`mlflow experiments restore --experiment-id {exp.experiment_id}`) or save under another project"
            )
        if exp is None and create:
            # Born with its registry id (tracker_saver.save.ownership), so no saver ever finds it without one.
            exp_id = self._transport.call(
                self._transport.client.create_experiment,
                f"creating experiment {name!r}",
                name,
                tags={REGISTRY_ID: uuid.uuid4().hex},
            )
            exp = self._transport.call(self._transport.client.get_experiment, f"reading experiment {name!r}", exp_id)
        if exp is not None:
            self._experiment_ids[project] = str(exp.experiment_id)
            if (exp.tags or {}).get(REGISTRY_ID):
                self.registry_ids.setdefault(project, str(exp.tags[REGISTRY_ID]))
        return exp

    def experiment_id(self, project: str) -> str:
        """The id of ``project``'s experiment, made if needed: looked up once per process (each save needs it)."""
        if project not in self._experiment_ids:
            self.experiment(project, create=True)
        return self._experiment_ids[project]

    def recheck(self, project: str) -> None:
        """Forget ``project``'s cached experiment id; raise the named fix if it was deleted since."""
        self._experiment_ids.pop(project, None)
        self.experiment(project, create=False)

    def run_id(self, experiment_id: str, run: str) -> str:
        """The id of the MLflow run called ``run`` in the experiment: the active run when it is that one
        (then tagged ``tracker_saver.run``), else the run with that tag (created if there is none)."""
        import mlflow

        active = mlflow.active_run()
        key = (experiment_id, run)
        if active is not None and (active.info.experiment_id, active.info.run_name) == key:
            if self._run_ids.get(key) != active.info.run_id:  # tagged, so a later process finds it
                self._transport.call(
                    self._transport.client.set_tag, f"tagging run {run!r}", active.info.run_id, PREFIX + "run", run
                )
                self._run_ids[key] = str(active.info.run_id)
            return str(active.info.run_id)
        if key not in self._run_ids:
            found = self._transport.call(
                self._transport.client.search_runs,
                f"looking up run {run!r}",
                [experiment_id],
                filter_string=f"tags.`{PREFIX}run` = {quoted(run)}",
                max_results=1,
            )
            if found:
                self._run_ids[key] = str(found[0].info.run_id)
            else:
                created = self._transport.call(
                    self._transport.client.create_run,
                    f"creating run {run!r}",
                    experiment_id,
                    run_name=run,
                    tags={PREFIX + "run": run},
                )
                self._run_ids[key] = str(created.info.run_id)
        return self._run_ids[key]

    def model(self, record_id: str) -> Any:
        return self._transport.call(
            self._transport.client.get_logged_model, f"reading logged model {record_id}", record_id, record_id=record_id
        )

    def read(self, record_id: str) -> tuple[Any, Record]:
        model = self.model(record_id)
        _refuse_newer(model)
        record = read_record(model)  # UnreadableRecordError: edited by hand into something we cannot read
        if record is None or str(getattr(model.status, "name", model.status)) == "DELETED":
            raise RecordNotFoundError(
                f"record {record_id} does not exist in {self._transport.uri} (the logged model is not one tracker_saver "
                "wrote): see `tracker-saver models list` for ids",
                record_id=record_id,
            )
        return model, record

    def experiments(self, project: str | None) -> list[Any]:
        if project is not None:
            exp = self.experiment(project, create=False)
            return [] if exp is None else [exp]
        found = self._transport.call(self._transport.client.search_experiments, "listing experiments")
        return [e for e in found if str(e.name).startswith(self.experiment_prefix)]

    def pages(
        self, experiments: list[Any], where: str, *, unreadable: Callable[[str, str], None], oldest_first: bool = False
    ) -> Iterator[list[Record]]:
        """The records in ``experiments`` that MLflow's filter ``where`` keeps, one page of the search at a time.

        ``oldest_first``: in the server's creation order (else MLflow's own, newest first). A model
        of ours whose tags cannot be read back is left out and passed to ``unreadable(id, why)``.
        """
        order = [{"field_name": "creation_time", "ascending": True}] if oldest_first else None
        ids = [str(e.experiment_id) for e in experiments]
        for start in range(0, len(ids), 100):
            token: str | None = None
            while True:
                page = self._transport.call(
                    self._transport.client.search_logged_models,
                    "searching logged models",
                    ids[start : start + 100],
                    filter_string=where or None,
                    max_results=PAGE,
                    order_by=order,
                    page_token=token,
                )
                out: list[Record] = []
                for model in page:
                    _refuse_newer(model)
                    try:
                        record = read_record(model)
                    except UnreadableRecordError as exc:
                        unreadable(str(exc.record_id), exc.why)
                        continue
                    if record is not None:
                        out.append(record)
                yield out
                token = page.token
                if not token:
                    break

    def search(
        self, experiments: list[Any], wheres: Iterable[str], *, unreadable: Callable[[str, str], None]
    ) -> list[Record]:
        """Every record in ``experiments`` that one of the filters ``wheres`` keeps (each record once)."""
        found: dict[str, Record] = {}
        for where in wheres:
            for page in self.pages(experiments, where, unreadable=unreadable):
                found.update((r.id, r) for r in page)
        return list(found.values())


def _refuse_newer(model: Any) -> None:
    """Refuse a record that a newer tracker_saver wrote (a tag schema above this one's).

    Skipping it, as a record edited into nonsense is skipped, would show its stream with holes,
    and a saver could then reuse a slot whose record it cannot see: the whole read is refused.

    Raises:
        ConfigError: the model's ``tracker_saver.schema`` tag is a number above :data:`SCHEMA`.
    """
    tags = model.tags or {}
    text = str(tags.get(PREFIX + "schema", "1"))
    if PREFIX + "state" in tags and text.isdigit() and int(text) > SCHEMA:
        raise ConfigError(
            f"MLflow LoggedModel {model.model_id} was written by a newer tracker_saver (tag schema {text}; this one "
            f"reads 1 and {SCHEMA}): upgrade tracker-saver (git pull in its clone, then pip install -e . there); if its "
            f"tag {PREFIX}schema was edited by hand, set it back to {SCHEMA}"
        )
