"""The one place that touches MLflow's private attributes: a client's tracking client; checked on mlflow 3.17.

``MlflowClient.set_logged_model_tags`` first reads the model (a GET), then writes the tags, and
turns any failure of that read into ``INVALID_PARAMETER_VALUE``. A save writes tags on models it
made itself, so it skips the read and calls the tracking client underneath, as the public method
does after its read. ``tests/test_mlflow_internals.py`` checks this against the installed mlflow:
an upgrade that renames it fails there, naming the attribute and the mlflow extra's pin,
not mid-training.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracker_saver.core.errors import ConfigError
from tracker_saver.core.extras import EXTRAS

__all__ = ["CHECKED_ON", "TRACKING_CLIENT", "tag_writer"]

#: The mlflow version this was checked on.
CHECKED_ON = "3.17.2"
#: The ``MlflowClient`` attribute that holds its tracking client (``TrackingServiceClient``).
TRACKING_CLIENT = "_tracking_client"


def tag_writer(client: Any) -> Callable[[str, dict[str, str]], None]:
    """``set_logged_model_tags(model_id, tags)`` of ``client``'s tracking client: one PATCH, no read first.

    Raises:
        ConfigError: the installed mlflow has no such attribute (checked on :data:`CHECKED_ON`).
    """
    tracking = getattr(client, "_tracking_client", None)
    write = getattr(tracking, "set_logged_model_tags", None)
    if not callable(write):
        raise ConfigError(
            f"this mlflow's MlflowClient has no {TRACKING_CLIENT}.set_logged_model_tags (checked on mlflow "
            f"{CHECKED_ON}): tracker_saver/integrations/mlflow/internals.py needs updating for it "
            f"(meanwhile pip install {' '.join(repr(req) for req in EXTRAS['mlflow'])})"
        )
    return write  # type: ignore[no-any-return]
