"""Where and sort keys, one grammar everywhere: the library, the CLI and the API parse a where-text
alike (conditions joined by ``and``) and refuse a key no record has, naming the known keys.

Known keys are the record fields, the keys every saved record carries, and the metadata keys
the registry's records hold (a callback's ``val_loss`` included): a typo such as ``scor>0.5``
is an error, not an empty table.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.helpers import SCORES, Target, attach, model, trainer_engine
from tracker_saver.cli.main import main
from tracker_saver.core.errors import ConfigError
from tracker_saver.core.records import UploadInfo
from tracker_saver.models import count_models, find_models

UNKNOWN = (
    r"unknown where key 'scor' \(did you mean 'score'\?\): it is not a record field, and no record in the registry"
)


def _with_val_loss(info: UploadInfo) -> UploadInfo:
    step = info.metadata["global_step"]
    assert isinstance(step, int)
    info.metadata["val_loss"] = 1.0 / step  # a callback's own metadata key
    return info


@pytest.fixture
def trained(local_target: Target) -> str:
    """6 epochs of a scored stream (n_saved=2), each record with a callback's ``val_loss``."""
    saver = local_target.saver(pre_upload=[_with_val_loss])
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=2, prefix="best", scores=SCORES)
    trainer.run([0], max_epochs=6)
    saver.close()
    return str(local_target.registry)


def test_find_and_count_refuse_a_where_key_no_record_has(trained: str) -> None:
    calls: list[Callable[..., object]] = [find_models, count_models]
    for call in calls:
        with pytest.raises(ConfigError, match=UNKNOWN + r".*; known keys: .*\bscore\b.*\bval_loss\b"):
            call(where="scor>0.5", registry=trained)
        with pytest.raises(ConfigError, match=r"unknown where key 'nosuchkey'"):
            call(where={"nosuchkey": (">", 1)}, registry=trained)


def test_a_sort_key_no_record_has_is_refused(trained: str) -> None:
    with pytest.raises(ConfigError, match=r"^unknown sort key 'nosuchkey': .*known keys: "):
        find_models(order_by="-nosuchkey", registry=trained)
    # nothing matched, so the sort key is looked up in the registry: still refused
    with pytest.raises(ConfigError, match=r"unknown sort key 'nosuchkey'"):
        find_models(project="nothing", order_by="nosuchkey", registry=trained)
    assert [r.global_step for r in find_models(order_by="-val_loss", limit=2, registry=trained)] == [1, 2]


def test_a_callbacks_key_and_the_saved_keys_are_known_when_nothing_matches(trained: str) -> None:
    assert find_models(where="val_loss<-1", registry=trained) == []
    assert find_models(where="score>2 and host=nowhere", registry=trained) == []  # lineage keys too
    # an empty registry knows the keys every saved record carries, and no other
    assert find_models(where="score>0.9", order_by="-global_step", registry=":memory:") == []
    with pytest.raises(ConfigError, match=r"unknown where key 'val_loss'"):
        find_models(where="val_loss<1", registry=":memory:")


def test_the_cli_names_an_unknown_key_in_one_line_with_exit_status_2(
    trained: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv, expected in (
        (["--where", "scor>0.5"], "tracker-saver: error: " + UNKNOWN.replace("\\", "")),
        (["--where", "nosuchkey>1"], "tracker-saver: error: unknown where key 'nosuchkey'"),
        (["--sort", "-nosuchkey"], "tracker-saver: error: unknown sort key 'nosuchkey'"),
        (["--where", "score>0.1 and"], "has an empty condition next to 'and'"),
    ):
        assert main(["models", "list", "--registry", trained, *argv]) == 2, argv
        captured = capsys.readouterr()
        assert captured.out == "" and len(captured.err.splitlines()) == 1, captured
        assert expected in captured.err and ("known keys: " in captured.err or "and" in argv[1]), captured.err


def test_the_cli_library_and_api_read_one_where_text_alike(trained: str, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip(
        "fastapi", reason="the API needs fastapi: pip install 'fastapi>=0.110.1' 'uvicorn>=0.30' (the ui extra)"
    )
    from fastapi.testclient import TestClient

    from tracker_saver.ui.app import create_app

    text = "score<0.75 and prefix=best"
    expected = [r.id for r in find_models(where=["score<0.75", "prefix=best"], order_by="id", registry=trained)]
    assert expected and [r.id for r in find_models(where=text, order_by="id", registry=trained)] == expected
    assert main(["models", "list", "--registry", trained, "--where", text, "--sort", "id", "--json"]) == 0
    assert [str(r["id"]) for r in json.loads(capsys.readouterr().out)] == expected
    client = TestClient(create_app(trained), raise_server_exceptions=False)
    page = client.get("/api/models", params={"where": text, "order_by": "id"})
    assert page.status_code == 200 and [item["id"] for item in page.json()["items"]] == expected
    for path, params in (
        ("/api/models", {"where": "scor>0.5"}),
        ("/api/chart", {"where": "scor>0.5"}),
    ):
        answer = client.get(path, params=params)
        assert answer.status_code == 422, answer.text
        assert answer.json()["detail"].startswith(UNKNOWN.replace("\\", "")), answer.text
    answer = client.get("/api/models", params={"order_by": "-nosuchkey"})
    assert answer.status_code == 422 and "unknown sort key 'nosuchkey'" in answer.json()["detail"]
