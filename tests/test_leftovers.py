"""A test run leaves nothing behind but pytest's own folder (issue 25: 12 ``/tmp/tmpXXXX`` folders
from doctests, ``/tmp/torchinductor_root`` from the demo, a ``/tmp/clearml-standin-*`` per start).

Each test points ``TMPDIR`` of a real run (a pytest session, the stand-in's command) at an empty
folder and looks at what is left in it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_DEBUG_TEMPROOT", "TORCHINDUCTOR_CACHE_DIR")}
    return {**env, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}


def test_doctests_and_the_demo_test_leave_only_pytests_folder(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # local.py's and logs.py's examples call tempfile.mkdtemp(); the demo imports torch._dynamo,
    # which makes torch's inductor cache folder in the temporary folder.
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tracker_saver/storage/local.py", "tracker_saver/logs/upload.py", "tests/test_demo.py"],
        cwd=ROOT, env={**_env(tmp), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    left = sorted(p.name for p in tmp.iterdir())
    assert len(left) == 1 and left[0].startswith("pytest-of-"), left


def test_the_clearml_standin_command_removes_its_folder_when_stopped(tmp_path: Path) -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.clearml_standin", "--port", "0"],
        cwd=ROOT, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert server.stdout is not None
    exports = server.stdout.readline()
    assert "CLEARML_CONFIG_FILE=" in exports, server.stderr.read() if server.stderr else ""
    assert [p.name for p in tmp_path.iterdir()][0].startswith("clearml-standin-")
    server.send_signal(signal.SIGTERM)
    assert server.wait(30) == 0
    assert list(tmp_path.iterdir()) == []
