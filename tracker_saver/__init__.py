"""tracker_saver: Ignite checkpoints in a bucket and a model registry, n_saved objects per stream.

``TrackerSaver`` and ``resume`` need torch and ignite: they are imported on first use, so
``import tracker_saver.models`` and the CLI start without them.

Examples:
    >>> from tracker_saver import TrackerSaver, find_models, load_checkpoint
"""

import importlib
import typing

from tracker_saver.core.errors import (
    CallbackError,
    ClosedError,
    ConfigError,
    ConfigTypeError,
    FlushTimeoutError,
    IntegrityError,
    PromotionRefusedError,
    RecordNotFoundError,
    RegistryError,
    SerializationError,
    StorageError,
    StreamBusyError,
    StreamOwnedError,
    TrackerSaverError,
    UnreadableRecordError,
)
from tracker_saver.core.records import Record, RecordState, UploadInfo
from tracker_saver.core.timings import SaveStats
from tracker_saver.lifecycle.retention import Retention
from tracker_saver.lifecycle.webhooks import Webhook
from tracker_saver.logs import LogUploader, download_logs, list_logs
from tracker_saver.models import (
    add_tags,
    count_models,
    download_model,
    find_models,
    get_model,
    load_checkpoint,
    pin_model,
    remove_alias,
    remove_tags,
    rename_model,
    resolve_model,
    run_stats,
    set_alias,
    slot_history,
    unpin_model,
)
from tracker_saver.registry import Query, Registry, open_registry
from tracker_saver.save.callbacks import CallbackChain, PostUploadCallback, PreUploadCallback
from tracker_saver.storage import Storage, open_storage

if typing.TYPE_CHECKING:
    from tracker_saver.resume_run import resume
    from tracker_saver.save.saver import TrackerSaver

#: Exports imported on first use (they import torch and ignite): name -> module.
_LAZY = {"TrackerSaver": "tracker_saver.save.saver", "resume": "tracker_saver.resume_run"}

#: The one source of the version (pyproject reads it; docs/releases.md: the policy and the releases table).
__version__ = "0.3.0.dev0"

__all__ = [
    "CallbackChain",
    "CallbackError",
    "ClosedError",
    "ConfigError",
    "ConfigTypeError",
    "FlushTimeoutError",
    "IntegrityError",
    "LogUploader",
    "PostUploadCallback",
    "PreUploadCallback",
    "PromotionRefusedError",
    "Query",
    "Record",
    "RecordNotFoundError",
    "RecordState",
    "Registry",
    "RegistryError",
    "Retention",
    "SaveStats",
    "SerializationError",
    "Storage",
    "StorageError",
    "StreamBusyError",
    "StreamOwnedError",
    "TrackerSaver",
    "TrackerSaverError",
    "UnreadableRecordError",
    "UploadInfo",
    "Webhook",
    "add_tags",
    "count_models",
    "download_logs",
    "download_model",
    "find_models",
    "get_model",
    "list_logs",
    "load_checkpoint",
    "open_registry",
    "open_storage",
    "pin_model",
    "remove_alias",
    "remove_tags",
    "rename_model",
    "resolve_model",
    "resume",
    "run_stats",
    "set_alias",
    "slot_history",
    "unpin_model",
]


def __getattr__(name: str) -> typing.Any:
    """Import ``TrackerSaver`` and ``resume`` (torch, ignite) when first asked for (PEP 562)."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tracker_saver' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
