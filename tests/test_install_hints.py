"""A missing extra's error says what to install, and it is installable: tracker-saver is on no index.

``pip install 'tracker-saver[s3]'`` fails for everyone who cloned the repository, so each hint
names the extra's own requirements, exactly as ``pyproject.toml`` pins them.
"""

from __future__ import annotations

import re
import sys

import pytest

from tests.helpers import ROOT
from tracker_saver.core.extras import EXTRAS as EXTRAS_HINTED
from tracker_saver.core.extras import install_hint
from tracker_saver.registry import open_registry
from tracker_saver.storage import open_storage

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_every_extras_hint_installs_its_requirements_as_pinned() -> None:
    assert {name: list(reqs) for name, reqs in EXTRAS_HINTED.items()} == {
        name: EXTRAS[name] for name in EXTRAS_HINTED
    }, "tracker_saver/core/extras.py's EXTRAS must pin what pyproject.toml pins"
    for extra, reqs in EXTRAS_HINTED.items():
        wanted = " ".join(f"'{req}'" for req in reqs)
        assert install_hint("x", extra).endswith(f": pip install {wanted} (the {extra} extra)")


def test_only_the_extras_table_pins_an_install_hint() -> None:
    # One table of hints (tracker_saver/core/extras.py): no other module spells a pin of its own.
    for path in (ROOT / "tracker_saver").rglob("*.py"):
        if path.name != "extras.py":
            text = path.read_text()
            pins = [req for reqs in EXTRAS_HINTED.values() for req in reqs]
            assert not [req for req in pins if re.search(r"pip install[^\n]*" + re.escape(req), text)], path


def _hide(monkeypatch: pytest.MonkeyPatch, missing: str, *loaded: str) -> None:
    """Make ``import missing`` fail as an absent extra does, and forget ``loaded`` modules that imported it."""
    monkeypatch.setitem(sys.modules, missing, None)
    for name in list(sys.modules):
        if name.startswith(loaded):
            monkeypatch.delitem(sys.modules, name)


def test_an_s3_output_uri_without_boto3_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide(monkeypatch, "boto3", "tracker_saver.storage.s3")
    with pytest.raises(ModuleNotFoundError, match=r"needs boto3: pip install 'boto3>=1.38.22' \(the s3 extra\)"):
        open_storage("s3://bucket/prefix")


@pytest.mark.parametrize(
    ("kind", "module", "pin"), [("mlflow", "mlflow", "'mlflow>=3.9,<4'"), ("clearml", "clearml", "'clearml>=1.16,<3'")]
)
def test_a_tracker_registry_without_its_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, kind: str, module: str, pin: str
) -> None:
    _hide(monkeypatch, module, f"tracker_saver.integrations.{kind}")
    with pytest.raises(ModuleNotFoundError, match=re.escape(f"registry='{kind}' needs {module}: pip install {pin}")):
        open_registry(kind)


def test_no_hint_installs_tracker_saver_from_an_index() -> None:
    for path in (ROOT / "tracker_saver").rglob("*.py"):
        assert not re.search(r"pip install[^\n]*tracker-saver", path.read_text()), path
