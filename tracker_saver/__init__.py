"""tracker_saver: Ignite checkpoints in a bucket and a model registry, n_saved objects per stream.

Examples:
    >>> from tracker_saver import TrackerSaver, find_models, load_checkpoint
"""

from tracker_saver.callbacks import CallbackChain, PostUploadCallback, PreUploadCallback
from tracker_saver.errors import (
    CallbackError,
    ConfigError,
    FlushTimeoutError,
    IntegrityError,
    RecordNotFoundError,
    RegistryError,
    SerializationError,
    StorageError,
    StreamBusyError,
    TrackerSaverError,
)
from tracker_saver.models import find_models, get_model, load_checkpoint, rename_model
from tracker_saver.records import Record, RecordState, UploadInfo
from tracker_saver.registry import Query, Registry, open_registry
from tracker_saver.resume import resume
from tracker_saver.saver import TrackerSaver
from tracker_saver.storage import Storage, open_storage

__version__ = "0.1.0"

__all__ = [
    "CallbackChain",
    "CallbackError",
    "ConfigError",
    "FlushTimeoutError",
    "IntegrityError",
    "PostUploadCallback",
    "PreUploadCallback",
    "Query",
    "Record",
    "RecordNotFoundError",
    "RecordState",
    "Registry",
    "RegistryError",
    "SerializationError",
    "Storage",
    "StorageError",
    "StreamBusyError",
    "TrackerSaver",
    "TrackerSaverError",
    "UploadInfo",
    "find_models",
    "get_model",
    "load_checkpoint",
    "open_registry",
    "open_storage",
    "rename_model",
    "resume",
]
