"""A missing extra's error says what to install, and it is installable: tracker-saver is on no index.

``pip install 'tracker-saver[s3]'`` fails for everyone who cloned the repository, so each hint
names the extra's own requirements, exactly as ``pyproject.toml`` pins them.
"""

from __future__ import annotations

import re

import pytest

from tests.helpers import ROOT

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
HINTS = {
    "s3": ["tracker_saver/storage/__init__.py"],
    "clearml": ["tracker_saver/registry/__init__.py", "tracker_saver/integrations/clearml/transport.py"],
    "ui": ["tracker_saver/cli/main.py", "tracker_saver/ui/__init__.py"],
}


@pytest.mark.parametrize("extra", sorted(HINTS))
def test_a_missing_extras_hint_installs_its_requirements_as_pinned(extra: str) -> None:
    wanted = " ".join(f"'{req}'" for req in EXTRAS[extra])
    for path in HINTS[extra]:
        text = (ROOT / path).read_text()
        assert f"pip install {wanted} (the {extra} extra)" in text, path


def test_no_hint_installs_tracker_saver_from_an_index() -> None:
    for path in (ROOT / "tracker_saver").rglob("*.py"):
        assert not re.search(r"pip install[^\n]*tracker-saver", path.read_text()), path
