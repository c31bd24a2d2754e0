"""The web UI (the ``ui`` extra): a FastAPI app over the model functions, and the server that runs it.

Examples:
    ``tracker-saver ui --registry runs/registry.db`` or, in Python,
    ``from tracker_saver.ui import serve; serve("runs/registry.db")``.
"""

from __future__ import annotations

try:
    import fastapi  # noqa: F401
    import uvicorn  # noqa: F401
except ModuleNotFoundError as exc:  # pragma: no cover - depends on the installed extras
    raise ModuleNotFoundError(
        f"the UI needs fastapi and uvicorn ({exc}): pip install 'fastapi>=0.110' 'uvicorn>=0.30' (the ui extra)"
    ) from exc

from tracker_saver.ui.app import create_app
from tracker_saver.ui.server import serve

__all__ = ["create_app", "serve"]
