"""One run at two output_uris in one registry: two sets of streams, kept apart by every reader.

The S3 example run twice with two buckets loaded the newest checkpoint of the *other* bucket:
``find_models`` could not say which output_uri, ``models list`` did not show it and ``runs
list`` merged the two. Here two real folders, one SQLite registry, real Ignite ``Checkpoint``s.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Target, attach, model, trainer_engine
from tracker_saver.cli.main import main
from tracker_saver.core.errors import RecordNotFoundError
from tracker_saver.models import count_models, find_models, resolve_model


@pytest.fixture
def two_places(tmp_path: Path) -> tuple[Target, Target]:
    """Project p, run r, stream ``model`` (n_saved=2) trained at bucket-a for 3 epochs, then at bucket-b for 2."""
    registry = str(tmp_path / "registry.db")
    places = (
        Target(output_uri=str(tmp_path / "bucket-a"), registry=registry),
        Target(output_uri=str(tmp_path / "bucket-b"), registry=registry),
    )
    for place, epochs in zip(places, (3, 2), strict=True):
        saver = place.saver()
        net = model()
        trainer = trainer_engine(net)
        attach(trainer, saver, {"model": net}, n_saved=2)
        trainer.run([0], max_epochs=epochs)
        saver.close()
    return places


def _uri(place: Target) -> str:
    return Path(place.output_uri).as_uri()


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_find_models_keeps_the_output_uris_of_one_run_apart(two_places: tuple[Target, Target]) -> None:
    a, b = two_places
    every = find_models(project="p", run="r", registry=a.registry)
    assert sorted({str(r.output_uri) for r in every}) == [_uri(a), _uri(b)]
    for place, steps in ((a, [1, 2, 3]), (b, [1, 2])):
        # the folder as TrackerSaver was given it, and its file:// URI, name the same place
        for spelled in (place.output_uri, _uri(place), place.output_uri + "/"):
            found = find_models(output_uri=spelled, project="p", run="r", order_by="global_step", registry=a.registry)
            assert [r.global_step for r in found] == steps, spelled
            assert {r.output_uri for r in found} == {_uri(place)}
            assert count_models(output_uri=spelled, project="p", registry=a.registry) == len(steps)
    # what the S3 example does: the newest live checkpoint of *this* output_uri, not the other's
    top = find_models(output_uri=b.output_uri, project="p", live=True, order_by="-global_step", registry=a.registry)
    assert top[0].global_step == 2 and top[0].output_uri == _uri(b)
    assert find_models(output_uri=str(Path(a.output_uri).parent / "elsewhere"), registry=a.registry) == []


def test_models_list_shows_the_output_uri_and_filters_by_it(
    two_places: tuple[Target, Target], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = two_places
    assert main(["models", "list", "--registry", a.registry]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = [cell.strip() for cell in lines[1].split("│")]
    assert header[-2] == "output_uri"
    shown = {[cell.strip() for cell in line.split("│")][-2] for line in lines[3:-1]}
    assert shown == {_uri(a), _uri(b)}
    rows = _json(capsys, "models", "list", "--registry", a.registry, "--output-uri", a.output_uri)
    assert len(rows) == 3 and {r["output_uri"] for r in rows} == {_uri(a)}


def test_runs_list_has_one_row_per_output_uri_of_a_run(
    two_places: tuple[Target, Target], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = two_places
    rows = _json(capsys, "runs", "list", "--registry", a.registry)
    assert [(r["output_uri"], r["project"], r["run"], r["records"], r["live"]) for r in rows] == [
        (_uri(a), "p", "r", 3, 2),
        (_uri(b), "p", "r", 2, 2),
    ]
    only_b = _json(capsys, "runs", "list", "--registry", a.registry, "--output-uri", b.output_uri)
    assert [(r["output_uri"], r["records"]) for r in only_b] == [(_uri(b), 2)]
    assert main(["runs", "list", "--registry", a.registry]) == 0
    out = capsys.readouterr().out
    assert "output_uri" in out.splitlines()[1] and _uri(a) in out and _uri(b) in out


def test_a_reference_names_the_record_at_the_output_uri_it_is_given(
    two_places: tuple[Target, Target], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = two_places
    # Without an output_uri the newest match wins (bucket-b trained last); with one, that place's.
    assert resolve_model("p/r/model@latest", registry=a.registry).output_uri == _uri(b)
    latest_a = resolve_model("p/r/model@latest", output_uri=a.output_uri, registry=a.registry)
    assert latest_a.output_uri == _uri(a) and latest_a.global_step == 3
    out = _json(
        capsys, "models", "get", "p/r/model@latest", str(tmp_path / "dl") + "/", "--output-uri", a.output_uri,
        "--registry", a.registry,
    )  # fmt: skip
    assert out["record"]["id"] == latest_a.id
    assert hashlib.sha256(Path(out["path"]).read_bytes()).hexdigest() == latest_a.sha256
    shown = _json(capsys, "models", "show", "p/r/model", "--output-uri", _uri(a), "--registry", a.registry)
    assert shown["id"] == latest_a.id
    with pytest.raises(RecordNotFoundError, match=rf"record {latest_a.id} \('model_3.pt'\) is stored at .*bucket-a"):
        resolve_model(latest_a.id, output_uri=b.output_uri, registry=a.registry)
    with pytest.raises(RecordNotFoundError, match=r"no record is p/r/nothing@latest at file://"):
        resolve_model("p/r/nothing@latest", output_uri=a.output_uri, registry=a.registry)
