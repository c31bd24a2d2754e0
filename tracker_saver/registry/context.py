"""What a tracker's registry knows of the run it records (``RunContext``): its defaults, credentials, hooks.

``TrackerSaver`` asks a registry that is a ``RunContext`` for what it was not given, so tracker
policy stays out of the ``Registry`` seam and generic code never imports a tracker's modules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["RunContext"]


@runtime_checkable
class RunContext(Protocol):
    """A registry that also knows the run it records: an experiment tracker's current task.

    ``TrackerSaver`` asks it for what it was not given, so tracker policy stays out of the
    ``Registry`` seam and generic code never imports a tracker's modules.
    ``tracker_saver.integrations.clearml.registry.ClearMLRegistry`` is one.
    """

    def run_defaults(self) -> Mapping[str, str]:
        """``project``, ``run`` and ``output_uri`` of the run being saved, those it knows.

        Asked only when the saver is not given all three; it may raise ``ConfigError`` when it knows
        of no run to save under (MLflow without an active run).
        """
        ...

    def storage_options_for(self, output_uri: str, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` for ``output_uri``, plus what the tracker knows (e.g. its S3 credentials)."""
        ...

    def guard_writes(self, is_writing: Callable[[], bool]) -> None:
        """Make the tracker's framework hooks ignore what ``torch.save`` writes while ``is_writing()``."""
        ...

    def artifact_task(self) -> Any:
        """The tracker's task that ``LogUploader(saver=...)`` also attaches a run's logs to; ``None``: none."""
        ...
