"""Queries pushed down to MLflow's search find exactly what the query finds without them, and
``models list`` streams MLflow's pages: against the session's real ``mlflow server``."""

from __future__ import annotations

import json
import uuid

import pytest

pytest.importorskip("mlflow", reason="MLflow tests need mlflow: pip install -e '.[mlflow]' -c constraints.txt")

from tests.contracts.records import SHA  # noqa: E402
from tracker_saver.cli.main import main  # noqa: E402
from tracker_saver.core.query import parse_order, parse_where  # noqa: E402
from tracker_saver.core.records import Record, RecordState, UploadInfo  # noqa: E402
from tracker_saver.find import find_model_pages  # noqa: E402
from tracker_saver.integrations.mlflow import store  # noqa: E402
from tracker_saver.integrations.mlflow.pushdown import record_filters  # noqa: E402
from tracker_saver.integrations.mlflow.registry import MLflowRegistry  # noqa: E402
from tracker_saver.registry.base import Query, select  # noqa: E402

pytestmark = pytest.mark.mlflow


def _save(reg: MLflowRegistry, project: str, run: str, step: int, score: float, *, state: str = "live",
          stream: str = "best_model", tags: tuple[str, ...] = ()) -> Record:  # fmt: skip
    """A record of ``stream``'s step ``step`` with ``score``, left ``state`` (live, evicted, pending or failed)."""
    filename = f"{stream}_{step}_acc={score}.pt"
    meta = {"basename": stream, "prefix": stream.split("_")[0], "global_step": step, "score": score}
    info = UploadInfo(project, run, stream, filename, metadata=meta, slot=step % 2, tags=tags,
                      key=f"{project}/{run}/{stream}.slot{step % 2}.pt")  # fmt: skip
    record = reg.records.create_pending(info, uri=f"file:///out/{info.key}")
    if state == "failed":
        return reg.records.fail(record.id, "disk full")
    if state != "pending":
        record = reg.records.make_live(record.id, sha256=SHA, size=10, metadata={"write_s": 0.5})
    return reg.records.evict(record.id) if state == "evicted" else record


@pytest.fixture(scope="module")
def records(mlflow_server: str) -> tuple[MLflowRegistry, str, list[Record]]:
    """Ten records of one project, in every state, two runs, two streams, tags, a rename and a pin."""
    reg = MLflowRegistry(mlflow_server, timeout=10)
    project = f"push-{uuid.uuid4().hex[:10]}"
    made = [
        _save(reg, project, "r1", 1, 0.5, state="evicted"),
        _save(reg, project, "r1", 2, 0.9, tags=("keep", "it's")),
        _save(reg, project, "r1", 3, 0.7),
        _save(reg, project, "r1", 4, 0.95, state="pending"),
        _save(reg, project, "r1", 5, 0.8, state="failed"),
        _save(reg, project, "r2", 1, 0.6, stream="checkpoint"),
        _save(reg, project, "r2", 2, 0.99, stream="checkpoint", state="evicted"),
        _save(reg, project, "r2", 3, 1.0, stream="checkpoint"),
    ]
    made[2] = reg.labels.rename(made[2].id, "it's baseline")
    pin = UploadInfo(project, "r1", "best_model", made[1].filename, metadata={"score": 0.9}, slot=None,
                     key=f"{project}/r1/pinned/{made[1].filename}")  # fmt: skip
    made.append(reg.labels.create_pinned(pin, uri=f"file:///out/{pin.key}", sha256=SHA, size=10))
    return reg, project, made


QUERIES = [
    {"where": "score>0.85"},
    {"where": "score>=0.9 and prefix=best"},
    {"where": "score<0.75", "states": (RecordState.EVICTED, RecordState.LIVE)},
    {"where": "global_step in 2,3 and run=r1"},
    {"where": 'name="it\'s baseline"'},
    {"name": "it's baseline"},
    {"where": "state in live,pending and score>0.5"},
    {"where": "score=1.0", "alias": "best"},
    {"tag": "it's"},
    {"tag": "keep", "states": (RecordState.LIVE,)},
    {"stream": "checkpoint", "where": "write_s>0.4", "order_by": parse_order("-score")},
    {"filename": "best_model_3_acc=0.7.pt"},
    {"run": "r2", "alias": "latest"},
]


@pytest.mark.parametrize("fields", QUERIES, ids=[str(q) for q in QUERIES])
def test_a_query_pushed_down_finds_what_the_whole_query_finds_without_it(records, fields) -> None:
    reg, project, _ = records
    fields = {**fields, "where": parse_where(fields.get("where"))}
    query = Query(project=project, **fields)
    everything = reg.records.query(Query(project=project))  # nothing pushed down but the project: every record, aliased
    assert len(everything) == 9
    expected = select(everything, query)
    assert reg.records.query(query) == expected
    assert [r for page in reg.records.pages(query) for r in page] == expected


def test_pushed_down_filters_make_mlflow_send_fewer_models(records) -> None:
    reg, project, _ = records
    query = Query(project=project, where=parse_where("score>0.85 and run=r1"))
    experiments = reg._store.experiments(project)
    sent = reg._store.search(experiments, record_filters(query), unreadable=reg._skip)
    # 0.9 (live) and its pin, then the two records without metrics: 0.95 (pending), 0.8 (failed)
    assert sorted(r.score or 0 for r in sent) == [0.8, 0.9, 0.9, 0.95]
    assert sorted(r.score or 0 for r in reg.records.query(query)) == [0.9, 0.9, 0.95]


def test_models_list_prints_each_of_mlflows_pages_as_it_comes(records, monkeypatch, capsys) -> None:
    reg, project, made = records
    monkeypatch.setattr(store, "PAGE", 3)
    pages = list(find_model_pages(project=project, registry=reg))
    assert [len(p) for p in pages] == [3, 3, 3]
    assert [r.id for p in pages for r in p] == [r.id for r in reg.records.query(Query(project=project))]
    assert [len(p) for p in find_model_pages(project=project, offset=4, limit=4, registry=reg)] == [2, 2]
    argv = ["--registry", reg.uri, "models", "list", "--project", project, "--where", "score>0.5"]
    assert main([*argv, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in listed] == [r.id for r in made if r.score is not None and r.score > 0.5]
    assert main(["--registry", reg.uri, "models", "list", "--project", project, "--run", "r1"]) == 0
    assert capsys.readouterr().out.count("┌") == 2  # six records: a table per page of three


def test_a_query_narrowed_by_state_alone_is_one_search_that_also_finds_the_aliases() -> None:
    from tracker_saver.integrations.mlflow.registry import _searches

    wheres, whole = _searches(Query(project="p", states=(RecordState.PENDING,)))
    assert whole and len(wheres) == 1 and "'pending'" in wheres[0] and "'live'" in wheres[0]
    wheres, whole = _searches(Query(project="p", where=parse_where("score>0.5")))
    assert not whole and len(wheres) == 2  # the states with metrics, then pending and failed
