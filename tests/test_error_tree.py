"""The exception tree: what the package raises is a TrackerSaverError, and still the builtin callers catch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tracker_saver.core.errors import ClosedError, ConfigError, ConfigTypeError, TrackerSaverError
from tracker_saver.logs.upload import LogUploader
from tracker_saver.save.background import Background
from tracker_saver.save.callbacks import CallbackChain

PACKAGE = Path(__file__).resolve().parents[1] / "tracker_saver"
BUILTINS = {"RuntimeError", "ValueError", "TypeError"}
#: Builtins raised on purpose, each caught a few lines below where it is raised (never escapes).
CAUGHT_INSIDE = {"masking.py"}


def test_a_closed_background_raises_closed_error_and_runtime_error() -> None:
    bg = Background()
    bg.close()
    with pytest.raises(ClosedError, match="closed") as raised:
        bg.submit(lambda: None, what="late")
    assert isinstance(raised.value, RuntimeError) and isinstance(raised.value, TrackerSaverError)


def test_a_bad_max_pending_is_a_config_error_and_a_value_error() -> None:
    with pytest.raises(ConfigError, match="max_pending must be an int >= 1, got 0") as raised:
        Background(max_pending=0)
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize("add", ["add_pre", "add_post"])
def test_a_callback_that_is_not_callable_is_a_config_type_error(add: str) -> None:
    with pytest.raises(ConfigTypeError, match="is not callable") as raised:
        getattr(CallbackChain(), add)(5)
    assert isinstance(raised.value, TypeError) and isinstance(raised.value, ConfigError)


def test_a_closed_log_uploader_raises_closed_error(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    uploader = LogUploader(tmp_path / "out", project="p", run="r", root=tmp_path, every_iterations=1)
    uploader.close()
    with pytest.raises(ClosedError, match="LogUploader is closed") as raised:
        uploader.upload()
    assert isinstance(raised.value, RuntimeError)


def test_the_package_raises_no_bare_builtin_errors() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in CAUGHT_INSIDE:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                func = node.exc.func
                if isinstance(func, ast.Name) and func.id in BUILTINS:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} raises {func.id}")
    assert not found, "raise an error from tracker_saver/core/errors.py instead:\n" + "\n".join(found)


def test_importing_memory_adds_no_global_warnings_filter() -> None:
    code = (
        "import warnings, torch; before = list(warnings.filters)\n"
        "import tracker_saver.save.memory\n"
        "assert warnings.filters == before, warnings.filters[: len(warnings.filters) - len(before)]\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
