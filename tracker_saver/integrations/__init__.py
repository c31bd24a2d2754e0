"""One package per experiment tracker's glue; generic tracker_saver code never imports these.

``clearml``: the whole ClearML integration (:mod:`tracker_saver.integrations.clearml`): the
drop-in saver, the registry and its parts, the binding guard, clearml.conf credentials.
``mlflow``: the MLflow registry (:mod:`tracker_saver.integrations.mlflow`): records as MLflow 3
LoggedModels, its transport, store, claims and codec.
"""

from __future__ import annotations

__all__: list[str] = []
