"""Every script in ``examples/`` runs as a new user runs it: a new process in an empty folder.

Each is ``python examples/NAME.py`` forked from the tests' fork server (``tests.forkserver``: a
new process, with torch and ignite imported once for all of them, not once each; its own
environment, folder, argv and exit status). ``examples/ddp.py`` too, with ``--start-method fork``:
its two gloo ranks are forked from it by ``idist.Parallel``, not new interpreters that import
torch and the script again.

The list of examples is the folder listing, so a new example is run automatically; it must
also be given its key line in ``EXAMPLES`` below (the test says so). What each one leaves in its
folder must be exactly what the "writes" column of ``docs/examples.md`` says. Examples that need a
server get the same one the other tests use: the S3 one the Ceph RGW (``s3_env``), the ClearML
one the stand-in or a live server (``clearml_server``), the MLflow one a real ``mlflow server``
(``mlflow_server``, its URI in ``MLFLOW_TRACKING_URI``). In CI a missing server fails the test.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import forkserver

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "examples"
PAGE = ROOT / "docs" / "examples.md"


@dataclass(frozen=True)
class Example:
    """What one example must print, what it needs, and what runs before it in the same folder."""

    key_lines: tuple[str, ...]
    args: tuple[str, ...] = ()
    needs: str | None = None  # "ceph", "clearml" or "mlflow": the marker, and the fixture that starts the server
    before: tuple[tuple[str, ...], ...] = ()  # commands run first in the same folder (example name + args)


EXAMPLES: dict[str, Example] = {
    # run twice: the second run resumes and the footprint stays at n_saved (2 best + 1 last)
    "quickstart.py": Example(
        key_lines=("resumed from checkpoint_36.pt (epoch 3)", "holds 3 objects"), before=(("quickstart.py",),)
    ),
    "query_and_load.py": Example(key_lines=("loaded record",), before=(("quickstart.py",),)),
    "migrate_mmengine.py": Example(key_lines=("holds 4 objects",)),
    "log_upload.py": Example(key_lines=("train.log", "loss lines")),
    "ddp.py": Example(
        key_lines=(
            "rank 1: resumed from checkpoint_16.pt at epoch 2",
            "live: checkpoint_24.pt, checkpoint_32.pt; checkpoints/ holds 2 objects",
        ),
        # Ranks forked from the example's process, itself forked from the fork server: 2 gloo processes
        # as with spawn, without 4 new interpreters importing torch (11 s of CPU for the 2 runs).
        args=("--start-method", "fork"),
        before=(("ddp.py", "--start-method", "fork"),),
    ),
    "s3_ceph.py": Example(key_lines=("created bucket", "holds 2 objects", "loaded checkpoint_40.pt"), needs="ceph"),
    "clearml_dropin.py": Example(
        key_lines=("holds 1 object(s)", "model epoch_model_3.pt: live, global_step=3, slot 0"), needs="clearml"
    ),
    "clearml_offline.py": Example(
        key_lines=("holds 2 object(s)", "5 models created; again: 0 created, 5 there", "model model_10.pt: live"),
        needs="clearml",
    ),
    "webhook_receiver.py": Example(
        key_lines=(
            "verified and took event evt_example",
            "duplicate ignored: HTTP 200",
            "forged signature refused: HTTP 401",
            "non-ASCII signature refused: HTTP 400",
            "a 1 TiB body refused unread: HTTP 413",
        )
    ),
    "mlflow_run.py": Example(
        key_lines=("./mlflow-example/checkpoints holds 3 objects", "run 'small-cnn': 3 live logged models"),
        needs="mlflow",
    ),
}

MARKS = {"ceph": pytest.mark.ceph, "clearml": pytest.mark.clearml, "mlflow": pytest.mark.mlflow}


def _listed() -> list[object]:
    params: list[object] = []
    for path in sorted(FOLDER.glob("*.py")):
        example = EXAMPLES.get(path.name)
        marks = [MARKS[example.needs]] if example and example.needs else []
        params.append(pytest.param(path.name, marks=marks, id=path.stem))
    return params


#: Seconds an example may run before the test says where it hangs and fails.
TIMEOUT_S = 180


def _run(name: str, args: tuple[str, ...], cwd: Path, env: dict[str, str]) -> str:
    """Run ``examples/name``; one that hangs gets SIGABRT, so faulthandler prints every thread's stack."""
    env = {**env, "PYTHONFAULTHANDLER": "1"}
    with tempfile.TemporaryFile(mode="w+") as output:
        proc = forkserver.spawn(str(FOLDER / name), list(args), env=env, cwd=cwd, stdout=output, stderr=output)
        try:
            code = proc.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGABRT)
            proc.wait(30)
            output.seek(0)
            pytest.fail(f"python examples/{name} hung for {TIMEOUT_S} s; its stacks:\n{output.read()[-6000:]}")
        output.seek(0)
        text = output.read()
    assert code == 0, f"python examples/{name} {' '.join(args)} exited {code}:\n{text[-4000:]}"
    return text


@pytest.mark.parametrize("name", _listed())
def test_the_example_runs_on_the_cpu_and_prints_what_it_did(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    example = EXAMPLES.get(name)
    assert example is not None, f"examples/{name} is new: give it its key line in EXAMPLES in {__file__}"
    args = example.args
    server_env: dict[str, str] = {}
    if example.needs == "ceph":
        request.getfixturevalue("s3_env")  # boto3's environment points at the gateway, and only at it
        ceph = request.getfixturevalue("ceph_s3")
        bucket = f"ts-example-{uuid.uuid4().hex[:10]}"  # a bucket that does not exist: the example creates it
        args = (f"s3://{bucket}/run", *args)
        request.addfinalizer(lambda: _remove_bucket(ceph, bucket))
    elif example.needs == "clearml":
        request.getfixturevalue("clearml_server")  # CLEARML_* point the SDK at the stand-in (or a live server)
    elif example.needs == "mlflow":
        server_env["MLFLOW_TRACKING_URI"] = request.getfixturevalue("mlflow_server")  # the session's own server
    # An earlier test's Task.init in this process leaves CLEARML_PROC_MASTER_ID behind; a script
    # started with it takes itself for that process's child and gets no task of its own.
    env = {k: v for k, v in os.environ.items() if not k.endswith("_PROC_MASTER_ID")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(server_env)
    before: set[str] = set()  # what other examples left here first is not this one's
    for command in example.before:
        _run(command[0], command[1:], tmp_path, env)
        if command[0] != name:
            before = {path.name for path in tmp_path.iterdir()}
    output = _run(name, args, tmp_path, env)
    for line in example.key_lines:
        assert line in output, f"examples/{name} did not print {line!r}:\n{output[-4000:]}"
    written = {path.name for path in tmp_path.iterdir()} - before
    assert written == documented_writes(name), (
        f"examples/{name} wrote {sorted(written)} in its folder; the writes column of docs/examples.md "
        f"says {sorted(documented_writes(name))}"
    )


def documented_writes(name: str) -> set[str]:
    """The top-level names that the example's row of docs/examples.md says it writes (`./x/...`)."""
    for row in PAGE.read_text().splitlines():
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        if cells[0] == f"`examples/{name}`":
            return {span[2:].split("/")[0] for span in re.findall(r"`(\./[^`]+)`", cells[2])}
    raise AssertionError(f"docs/examples.md has no row for examples/{name}")


def test_no_two_examples_write_the_same_folder() -> None:
    """Run from one folder, one after the other (the docs' order), an example must never count or
    change what another left: each writes its own names (query_and_load reads quickstart's registry)."""
    owners: dict[str, list[str]] = {}
    for path in sorted(FOLDER.glob("*.py")):
        for name in documented_writes(path.name):
            owners.setdefault(name, []).append(path.name)
    assert {name: by for name, by in owners.items() if len(by) > 1} == {}


def _remove_bucket(ceph: object, bucket: str) -> None:
    from tests.conftest_ceph import empty_and_remove

    client = ceph.client()  # type: ignore[attr-defined]
    if bucket in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
        empty_and_remove(client, bucket)


def test_every_example_is_listed_and_documented() -> None:
    names = {path.name for path in FOLDER.glob("*.py")}
    assert not set(EXAMPLES) - names, f"EXAMPLES names scripts that are gone: {sorted(set(EXAMPLES) - names)}"
    for path in sorted(FOLDER.glob("*.py")):
        text = path.read_text()
        assert text.startswith('"""'), f"examples/{path.name} must open with a docstring: what it shows, how to run it"
        assert f"examples/{path.name}" in text, f"examples/{path.name}'s docstring must say how to run it"
