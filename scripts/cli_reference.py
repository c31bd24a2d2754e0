"""Write docs/cli-reference.md from the ``tracker-saver`` parser (``--check``: fail if it differs).

::

    python scripts/cli_reference.py          # regenerate the page
    python scripts/cli_reference.py --check  # exit 1 when the committed page is stale
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracker_saver.cli.reference import reference_markdown  # noqa: E402

PAGE = ROOT / "docs" / "cli-reference.md"


def main(argv: list[str]) -> int:
    text = reference_markdown()
    if "--check" in argv:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python scripts/cli_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
