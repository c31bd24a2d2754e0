"""The set-up scripts a new user runs first: they wait for apt's lock instead of failing, and the
virtual environment they make holds what ``constraints.txt`` pins.

Run with the real ``apt-get`` and the real dpkg lock (root only, as CI runs): the test holds
``/var/lib/dpkg/lock-frontend`` the way dpkg does (an fcntl lock) while apt.sh runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ROOT

LOCK = Path("/var/lib/dpkg/lock-frontend")


@pytest.fixture
def apt_as_root() -> None:
    if not (hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get") and LOCK.exists()):
        if os.environ.get("CI"):
            pytest.fail("CI runs as root on Debian: apt-get and the dpkg lock must be there", pytrace=False)
        pytest.skip("needs root and Debian's apt-get")


@contextlib.contextmanager
def dpkg_lock_held() -> Iterator[None]:
    """Hold dpkg's frontend lock inside the block, as dpkg does (an fcntl lock).

    Taking it waits while someone else holds it: another test of this file in another xdist
    worker, or a real apt-get.
    """
    fd = os.open(LOCK, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor drops the lock


def _apt(*args: str, wait: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "apt.sh"), *args],
        capture_output=True, text=True, timeout=120, env={**os.environ, "APT_LOCK_WAIT": str(wait)},
    )  # fmt: skip


def test_apt_get_waits_for_the_dpkg_lock_and_says_so(apt_as_root: None) -> None:
    with dpkg_lock_held():
        # Installing a package that is installed changes nothing, but apt-get still takes the lock.
        proc = subprocess.Popen(
            ["bash", str(ROOT / "scripts" / "apt.sh"), "get", "install", "-y", "-qq", "coreutils"],
            stderr=subprocess.PIPE, text=True, env={**os.environ, "APT_LOCK_WAIT": "60"},
        )  # fmt: skip
        assert proc.stderr is not None
        said = proc.stderr.readline()  # while the lock is held, it says that it waits
        assert "waiting for another apt-get or dpkg to finish" in said, said
    _, rest = proc.communicate(timeout=120)  # the lock is free: its next try takes it
    assert proc.returncode == 0, rest


def test_apt_get_gives_up_after_apt_lock_wait_with_the_fix(apt_as_root: None) -> None:
    with dpkg_lock_held():
        done = _apt("get", "install", "-y", "coreutils", wait=2)
    assert done.returncode == 100
    assert "gave up after 2 s" in done.stderr and "raise APT_LOCK_WAIT" in done.stderr


def test_apt_install_of_installed_packages_needs_no_lock(apt_as_root: None) -> None:
    with dpkg_lock_held():  # needing it, the install would give up after 1 s (status 100, the message)
        done = _apt("install", "coreutils", "bash", wait=1)
    assert done.returncode == 0 and done.stderr == ""


def test_every_set_up_script_installs_through_apt_sh() -> None:
    for script in ("dev.sh", "ceph-s3.sh"):
        text = (ROOT / "scripts" / script).read_text()
        assert "apt-get" not in text.replace("apt-get or dpkg", ""), (
            f"{script} calls apt-get without waiting for its lock"
        )
        assert "apt.sh" in text


def test_apt_install_of_a_missing_package_runs_apt_get_and_succeeds(apt_as_root: None) -> None:
    """The path a fresh machine takes (update, then install), simulated (``-s``) so nothing changes.

    It once failed after apt-get succeeded: a ``RETURN`` trap left behind by the helper fired in
    its caller with ``set -u`` (``err: unbound variable``).
    """
    missing = "hello"  # in Debian's main archive, installed by nothing here
    installed = subprocess.run(["dpkg-query", "-W", "-f=${Status}", missing], capture_output=True, text=True)
    assert "install ok installed" not in installed.stdout, f"{missing} is installed: pick a missing package"
    done = _apt("install", "-s", missing, wait=60)
    assert done.returncode == 0, done.stderr
    assert f"installing {missing}" in done.stderr and "unbound variable" not in done.stderr


def test_ceph_s3_running_says_in_one_line_that_no_gateway_runs(tmp_path: Path) -> None:
    """``running`` answers a question: no gateway is an answer (exit 1, one line), not a script failure."""
    state = tmp_path / "no-ceph"
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "ceph-s3.sh"), "running"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "CEPH_S3_DIR": str(state), "CEPH_S3_PORT": "7480"},
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"ceph-s3: no gateway of {state} answers on 127.0.0.1:7480: start one with scripts/ceph-s3.sh start\n"
    )


def test_the_set_up_venv_holds_the_pinned_cpu_torch_and_no_broken_requirement() -> None:
    """``scripts/dev.sh`` installs with uv, which reads no pip.conf: it must still take the CPU build
    of the torch ``constraints.txt`` pins (from the find-links pip is configured with; a CUDA build
    is several GB) and leave every requirement satisfied, as pip would."""
    import torch

    pin = re.search(r"^torch==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M)
    assert pin, "constraints.txt pins torch"
    assert torch.__version__.split("+")[0] == pin[1] and torch.version.cuda is None, torch.__version__
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
