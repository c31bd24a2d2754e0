"""One package per experiment tracker's glue; generic tracker_saver code never imports these.

``clearml``: the whole ClearML integration (:mod:`tracker_saver.integrations.clearml`): the
drop-in saver, the registry and its parts, the binding guard, clearml.conf credentials.
"""

from __future__ import annotations

__all__: list[str] = []
