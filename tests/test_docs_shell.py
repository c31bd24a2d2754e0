"""Every shell block in README.md and docs/ runs, as written, in a test, or says why it cannot.

The convention is an HTML comment on the line right before the fence (neither mkdocs nor
GitHub shows it):

* ``<!-- run: NAME -->``: ``RUNS[NAME]`` says what comes before the block (the steps the page
  names first, such as the demo) and what it needs; the test runs the block as written.
* ``<!-- not-run: WHY -->``: the block cannot run in a test (it installs packages, is the suite
  itself, takes minutes, needs a server of yours); WHY says so, and where a test covers it.

A block runs in a folder set up like the clone's root: ``tmp_path`` is the current folder and
``HOME``, with ``examples/``, ``scripts/`` and ``benchmarks/`` linked from the checkout and a
``.venv/bin`` whose ``python`` and ``tracker-saver`` are this test's Python on this checkout's
code. Nothing is installed and nothing is written into the checkout. A ``bash`` block runs as
one script under ``set -e``. A ``console`` block runs its ``$`` commands in one shell; each must
exit with the status ``RUNS`` expects (0 unless it says otherwise), and each line of output the
page shows must match a line the command printed, numbers, quoted names and URIs aside.

Without running anything, every shell block calls ``.venv``'s scripts by their path (the venv
``scripts/dev.sh`` makes is never activated), every ``tracker-saver`` command shown anywhere
parses with the real parser, and every ``pip install`` shown installs from the clone.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.test_docs import ROOT, SOURCES, Block, fenced_blocks
from tracker_saver.cli.main import build_parser

SHELL = ("bash", "sh", "shell", "console")
MARKER = re.compile(r"<!-- (run|not-run):(.*?)-->")


@dataclass(frozen=True)
class Run:
    """How the test runs one ``<!-- run: NAME -->`` block."""

    before: str = ""  # shell run first, in the same shell: what the page says comes before the block
    needs: str | None = None  # "ceph", "clearml" or "mlflow": its marker (ceph: the gateway; mlflow: the server)
    exit_status: dict[int, int] = field(default_factory=dict)  # console: $-command index -> its status
    prints: tuple[str, ...] = ()  # text the block's output must contain
    buckets: tuple[str, ...] = ()  # S3 buckets the block creates, removed afterwards


#: What `bash scripts/dev.sh demo` runs once .venv is set up; it writes demo-output/.
DEMO = ".venv/bin/tracker-saver demo"

#: A training of mnist/r1 killed (SIGKILL, by a post-upload callback) once the bytes of its
#: second `checkpoint` save are committed and before its record is live: what fsck then finds.
KILLED_TRAINING = """.venv/bin/python - <<'EOF' || [ $? = 137 ]
import os, signal, torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint
from tracker_saver import TrackerSaver

def kill_after_commit(info):
    if info.filename == "checkpoint_8.pt":
        os.kill(os.getpid(), signal.SIGKILL)

model = torch.nn.Linear(4, 2)
trainer = Engine(lambda engine, batch: None)
saver = TrackerSaver("data/ckpt", project="mnist", run="r1", post_upload=[kill_after_commit])
best = Checkpoint({"model": model}, saver, filename_prefix="best", n_saved=2,
                  score_function=lambda engine: engine.state.epoch / 10, score_name="val_acc")
trainer.add_event_handler(Events.EPOCH_COMPLETED, best)
last = Checkpoint({"model": model, "trainer": trainer}, saver, n_saved=1)  # checkpoint_<iteration>.pt
trainer.add_event_handler(Events.EPOCH_COMPLETED, last)
trainer.run([0] * 4, max_epochs=3)
EOF"""

RUNS: dict[str, Run] = {
    "readme-command-line": Run(before=DEMO, prints=("written to best.pt", "written to prod.pt")),
    "quickstart-twice": Run(prints=("holds 6 records", "resumed from checkpoint_36.pt (epoch 3)", "holds 11 records")),
    "cli-find-and-ship": Run(before=DEMO),
    "cli-fsck-after-a-kill": Run(
        before=KILLED_TRAINING, exit_status={0: 1, 1: 1}
    ),  # fsck, repair --dry-run: 1 on a problem
    "logs-on-the-command-line": Run(prints=("train.log: ", "logs-back/train.log")),
    "clearml-first-look-with-the-stand-in": Run(
        needs="clearml", prints=("holds 1 object(s)", "model epoch_model_3.pt")
    ),
    "s3-example-on-the-scripts-gateway": Run(needs="ceph", prints=("holds 2 objects",), buckets=("ckpts",)),
    # MLFLOW_TRACKING_URI is the session's mlflow server (the page exports it after starting one)
    "mlflow-example-and-its-records": Run(needs="mlflow", prints=("3 live logged models", "checkpoint_48.pt")),
}


def shell_blocks(paths: list[Path]) -> list[Block]:
    return [block for path in paths for block in fenced_blocks(path) if block.lang in SHELL]


def marker(block: Block) -> tuple[str, str] | None:
    """``("run", NAME)`` or ``("not-run", WHY)`` from the line right before the block's fence."""
    lines = block.path.read_text().splitlines()
    match = MARKER.fullmatch(lines[block.line - 2].strip()) if block.line > 1 else None
    return (match[1], match[2].strip()) if match else None


def marking_problems(paths: list[Path]) -> list[str]:
    """What is wrong with the markers of the shell blocks in ``paths``."""
    problems, named = [], []
    for block in shell_blocks(paths):
        mark = marker(block)
        if mark is None:
            problems.append(
                f"{block.path.name}:{block.line}: mark the block <!-- run: NAME --> or <!-- not-run: WHY -->"
            )
        elif not mark[1]:
            problems.append(
                f"{block.path.name}:{block.line}: {mark[0]} needs a {'name' if mark[0] == 'run' else 'reason'}"
            )
        elif mark[0] == "run":
            named.append(mark[1])
            if mark[1] not in RUNS:
                problems.append(f"{block.path.name}:{block.line}: run: {mark[1]} is not in RUNS of {__file__}")
    problems += [f"run: {name} marks {named.count(name)} blocks" for name in set(named) if named.count(name) > 1]
    return problems


BLOCKS = shell_blocks(SOURCES)


def test_every_shell_block_is_run_or_says_why_not() -> None:
    problems = marking_problems(SOURCES)
    named = {m[1] for m in map(marker, BLOCKS) if m and m[0] == "run"}
    problems += [f"RUNS[{name!r}] marks no block (renamed?)" for name in sorted(set(RUNS) - named)]
    assert not problems, "\n".join(problems)


def test_a_shell_block_without_a_marker_is_named(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# a page\n\n```bash\necho hi\n```\n\n<!-- not-run: -->\n```console\n$ true\n```\n")
    assert marking_problems([page]) == [
        "page.md:3: mark the block <!-- run: NAME --> or <!-- not-run: WHY -->",
        "page.md:8: not-run needs a reason",
    ]


# ------------------------------------------------------------------ what the blocks call


def commands(block: Block) -> list[str]:
    """The command lines of a block: a console block's ``$`` lines, a bash block's lines."""
    lines = block.text.splitlines()
    if block.lang == "console":
        return [line[2:] for line in lines if line.startswith("$ ")]
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


BARE = re.compile(r"(?:^|[;&|(]|\$\()\s*(?:\w+=\S*\s+)*(python3?|tracker-saver|pip3?|pytest|mkdocs|sudo)(?=\s|$)")


def test_every_shell_block_calls_the_venvs_scripts_by_their_path() -> None:
    bare = [
        f"{block.where}: {line.strip()}"
        for block in BLOCKS
        for line in commands(block)
        if BARE.search(line.split(" #")[0])
    ]
    assert not bare, (
        "dev.sh never activates .venv, and Debian has no `python` nor sudo as root: call "
        ".venv/bin/python, .venv/bin/tracker-saver (from the clone's root):\n" + "\n".join(bare)
    )


#: A command in the prose (an inline code span) that runs an example or a benchmark with a bare python.
BARE_PROSE = re.compile(r"`(python3? (?:examples|benchmarks)/[^`]*)`")


def test_every_example_or_benchmark_the_prose_shows_runs_with_the_venvs_python() -> None:
    """``python examples/quickstart.py`` fails with Debian's own python (no torch): say which one."""
    bare = [f"{path.name}: {m[1]}" for path in SOURCES for m in BARE_PROSE.finditer(path.read_text())]
    assert not bare, "use .venv/bin/python (scripts/dev.sh makes .venv and never activates it):\n" + "\n".join(bare)


def test_no_block_leaves_a_registry_exported_for_the_pages_after_it() -> None:
    """A reader goes on to the next page in the same shell: a block that exports TRACKER_SAVER_REGISTRY
    (the demo's registry, say) unsets it before it ends, or every later command writes there."""
    left = [
        f"{block.where}: exports TRACKER_SAVER_REGISTRY and leaves it set"
        for block in BLOCKS
        if "export TRACKER_SAVER_REGISTRY" in block.text
        and "unset TRACKER_SAVER_REGISTRY" not in block.text.split("export TRACKER_SAVER_REGISTRY", 1)[1]
    ]
    assert not left, "\n".join(left)


def test_the_test_commands_cost_is_the_measured_one_never_a_promise() -> None:
    """README and docs/index.md say where the run prints what it cost, and give the last measured
    figure with its date; no "about N minutes"."""
    for path in (ROOT / "README.md", ROOT / "docs" / "index.md"):
        text = " ".join(path.read_text().split())
        assert not re.search(r"about \d+ minutes", text), f"{path.name}: a promise; say where the run prints its cost"
        assert "`cpu_time: …`" in text and "15 CPU-minutes" in text, f"{path.name}: where to read the measured cost"
        assert re.search(r"Last measured .*?\d{4}-\d\d-\d\d", text), f"{path.name}: the last measured figure, dated"


def test_a_block_sources_only_files_it_writes_itself() -> None:
    bad = []
    for block in BLOCKS:
        earlier = ""
        for line in commands(block):
            for sourced in re.findall(r"(?:^|[;&]|&&)\s*(?:source|\.)\s+(\S+)", line):
                made_here = re.search(rf">\s*{re.escape(sourced)}(\s|$)", earlier)
                if not made_here and sourced != ".venv/bin/activate":  # dev.sh makes that one
                    bad.append(f"{block.where}: source {sourced}")
            earlier += line + "\n"
    assert not bad, (
        "these blocks source a file that nothing on the page creates; print the environment instead, "
        'e.g. eval "$(bash scripts/ceph-s3.sh start)":\n' + "\n".join(bad)
    )


def _code_texts() -> list[tuple[str, str]]:
    """(where, text) of every shell command line and inline code span of the pages."""
    texts = [(block.where, line) for block in BLOCKS for line in commands(block)]
    for path in SOURCES:
        if path.name == "cli-reference.md":  # generated from the parser itself
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            texts += [(f"{path.relative_to(ROOT)}:{number}", span) for span in re.findall(r"`([^`\n]+)`", line)]
    return texts


def cli_invocations() -> list[tuple[str, list[str]]]:
    """(where, argv) of every ``tracker-saver ...`` the pages show, up to ``;``, ``&&``, ``|`` or a comment."""
    found = []
    for where, text in _code_texts():
        for match in re.finditer(r"(?:^|(?<=[\s(]))(?:\.venv/bin/)?tracker-saver\s+(?=-|[a-z])", text):
            rest = text[match.end() :]
            if text[: match.start()].endswith("("):  # "(see tracker-saver models list --live)"
                rest = rest.split(")")[0]
            lexer = shlex.shlex(rest, posix=True, punctuation_chars=";&|")
            lexer.whitespace_split = True
            argv = []
            for token in lexer:
                if token and token[0] in ";&|":
                    break
                argv.append(token)
            found.append((where, as_main_reads_it(argv)))
    return found


def as_main_reads_it(argv: list[str]) -> list[str]:
    """``argv`` as ``tracker_saver.cli.main.main`` hands it to the parser: ``--sort -score`` glued."""
    glued: list[str] = []
    for arg in argv:
        if glued and glued[-1] == "--sort" and arg.startswith("-"):
            glued[-1] = f"--sort={arg}"
        else:
            glued.append(arg)
    return glued


def test_every_tracker_saver_command_the_docs_show_parses() -> None:
    assert len(cli_invocations()) > 20
    problems = []
    for where, argv in cli_invocations():
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                build_parser().parse_args(argv)
        except SystemExit as exc:
            if exc.code:
                problems.append(f"{where}: tracker-saver {shlex.join(argv)}: {err.getvalue().strip()}")
    assert not problems, "\n".join(problems)


def test_every_install_shown_installs_from_the_clone_with_the_constraints() -> None:
    shown = [(where, text) for where, text in _code_texts() if re.match(r"\s*(\S*/)?pip3? install ", text)]
    assert shown, "no page says how to install tracker_saver"
    bad = [
        f"{where}: {text}"
        for where, text in shown
        if "-c constraints.txt" not in text or not re.search(r"\s['\"]?\.(\[[\w,]+\])?['\"]?(\s|$)", text)
    ]
    assert not bad, (
        "tracker-saver is on no package index: install from the clone's root, with the constraints "
        "that pin torch to the CPU wheel, e.g. pip install -c constraints.txt -e '.[ui]':\n" + "\n".join(bad)
    )


# ------------------------------------------------------------------ running the blocks


def _runnable() -> list[object]:
    params: list[object] = []
    for block in BLOCKS:
        mark = marker(block)
        if mark and mark[0] == "run" and mark[1] in RUNS:
            needs = RUNS[mark[1]].needs
            marks = [getattr(pytest.mark, needs)] if needs else []
            params.append(pytest.param(block, mark[1], marks=marks, id=mark[1]))
    return params


def sandbox(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A folder like the clone's root, and the environment of a fresh shell of the user's."""
    home = tmp_path / "clone"
    (home / ".venv" / "bin").mkdir(parents=True)
    (home / "tmp").mkdir()
    for name in ("examples", "scripts", "benchmarks"):
        (home / name).symlink_to(ROOT / name, target_is_directory=True)
    python = shlex.quote(sys.executable)
    for script, line in (("python", f'exec {python} "$@"'), ("tracker-saver", f'exec {python} -m tracker_saver "$@"')):
        (home / ".venv" / "bin" / script).write_text(f"#!/bin/sh\n{line}\n")
        (home / ".venv" / "bin" / script).chmod(0o755)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AWS_", "CLEARML_", "TRACKER_SAVER_", "VIRTUAL_ENV"))
        and not key.endswith("_PROC_MASTER_ID")
    }
    env.update(
        HOME=str(home), TMPDIR=str(home / "tmp"), PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1", COLUMNS="200",
    )  # fmt: skip
    return home, env


def _shape(line: str) -> re.Pattern[str]:
    """A line the page shows as a pattern: its numbers, 'quoted names' and URIs match any."""
    parts = re.split(r"('[^']*'|\w+://\S+|\d+(?:\.\d+)?)", line.strip())
    wild = {"'": "'[^']*'"}
    return re.compile(
        "".join(
            re.escape(part) if i % 2 == 0 else wild.get(part[0], r"\S+" if "://" in part else r"\d+(?:\.\d+)?")
            for i, part in enumerate(parts)
        )
    )


def _script(block: Block, run: Run) -> str:
    head = "exec 2>&1\nset -eo pipefail\ntrap 'echo \"@@@ failed ($?): $BASH_COMMAND\"' ERR\n" + run.before + "\n"
    if block.lang != "console":
        return head + block.text + "\n"
    body = ["set +e", "trap - ERR"]
    for i, command in enumerate(commands(block)):
        body += [f"echo '@@@ {i}'", command, f'echo "@@@ {i} exit $?"']
    return head + "\n".join(body) + "\n"


def _console_problems(block: Block, run: Run, output: str) -> list[str]:
    shown: list[list[str]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            shown.append([])
        elif shown and line.strip():
            shown[-1].append(line)
    problems = []
    for i, (command, lines) in enumerate(zip(commands(block), shown, strict=True)):
        got = re.search(rf"^@@@ {i}\n(.*?)^@@@ {i} exit (\d+)$", output, re.S | re.M)
        if got is None:
            problems.append(f"$ {command}: did not finish")
            continue
        printed = [line.strip() for line in got[1].splitlines()]
        if int(got[2]) != run.exit_status.get(i, 0):
            problems.append(f"$ {command}: exit status {got[2]}, expected {run.exit_status.get(i, 0)}")
        problems += [
            f"$ {command}: printed no line like {line!r}"
            for line in lines
            if not any(_shape(line).fullmatch(p) for p in printed)
        ]
    return problems


@pytest.mark.parametrize(("block", "name"), _runnable())
def test_the_shell_block_runs_as_written(
    block: Block, name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    run = RUNS[name]
    if run.needs == "clearml":
        pytest.importorskip("clearml", reason="the ClearML blocks need clearml (the clearml extra)")
    if run.needs == "ceph":
        ceph = request.getfixturevalue("ceph_s3")
        if (
            "ceph-s3.sh start" in block.text
            and subprocess.run(
                ["bash", str(ROOT / "scripts" / "ceph-s3.sh"), "running"], capture_output=True
            ).returncode
        ):
            pytest.skip("the gateway of the ceph tests is not scripts/ceph-s3.sh's own: `start` would start another")
        for bucket in run.buckets:
            request.addfinalizer(functools.partial(_remove_bucket, ceph, bucket))
    home, env = sandbox(tmp_path)
    if run.needs == "mlflow":
        env["MLFLOW_TRACKING_URI"] = request.getfixturevalue("mlflow_server")
    script, out = tmp_path / "block.sh", tmp_path / "output.txt"
    script.write_text(_script(block, run))
    with open(out, "w") as sink:  # a file, not a pipe: a server the block leaves running keeps no pipe open
        proc = subprocess.Popen(
            ["bash", str(script)], cwd=home, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            status = proc.wait(timeout=300)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # whatever the block started and left behind
    output = out.read_text()
    where = f"{block.where} (run: {name}), output:\n{output[-6000:]}"
    assert status == 0, f"the block failed at {where}"
    if block.lang == "console":
        problems = _console_problems(block, run, output)
        assert not problems, "\n".join(problems) + f"\nin {where}"
    missing = [text for text in run.prints if text not in output]
    assert not missing, f"the block did not print {missing}: {where}"


def _remove_bucket(ceph: object, bucket: str) -> None:
    from tests.conftest_ceph import empty_and_remove

    client = ceph.client()  # type: ignore[attr-defined]
    if bucket in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
        empty_and_remove(client, bucket)
