"""The public face of the ClearML integration: ``from tracker_saver.clearml import ClearMLSaver``.

``from tracker_saver.clearml import ClearMLSaver`` replaces
``from ignite.handlers.clearml_logger import ClearMLSaver`` with the same constructor. The code
lives in :mod:`tracker_saver.integrations.clearml` (the drop-in is its ``saver`` module); this
module re-exports its public names, their public home: ``ClearMLSaver``,
``guard_torch_save_binding``, ``clearml_s3_options``, ``import_offline_session`` and
``SyncReport`` (ClearML's offline mode, docs/clearml.md).

Examples:
    >>> from tracker_saver.clearml import ClearMLSaver, import_offline_session
    >>> ClearMLSaver.__module__
    'tracker_saver.integrations.clearml.saver'
"""

from __future__ import annotations

from tracker_saver.integrations.clearml.saver import (
    ClearMLSaver,
    SyncReport,
    clearml_s3_options,
    guard_torch_save_binding,
    import_offline_session,
)

__all__ = ["ClearMLSaver", "SyncReport", "clearml_s3_options", "guard_torch_save_binding", "import_offline_session"]
