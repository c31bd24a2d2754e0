"""The web UI (the ``ui`` extra): a FastAPI app over the model functions, and the server that runs it.

Examples:
    ``tracker-saver ui --registry runs/registry.db`` or, in Python,
    ``from tracker_saver.ui import serve; serve("runs/registry.db")``.
"""

from __future__ import annotations

from tracker_saver.core.extras import require

require("ui", "the UI")

from tracker_saver.ui.app import create_app  # noqa: E402 (after the check that names the extra)
from tracker_saver.ui.server import serve  # noqa: E402

__all__ = ["create_app", "serve"]
