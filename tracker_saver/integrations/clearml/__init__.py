"""The ClearML integration, all in this package; generic tracker_saver code never imports it.

Top to leaves: ``saver`` (the drop-in ``ClearMLSaver``, public as :mod:`tracker_saver.clearml`);
``sync`` (push an offline session's records); ``registry`` (records as ClearML models, and
``RunContext``), which holds a ``transport`` (the session and the one ``send``) and hands it to
its collaborators ``tasks`` (a model on its task, the state mirror), ``states``, ``labels``
(names, tags, aliases, pins) and ``claims``; with ``codec`` (records ↔ models), ``session``
(timeouts and retries on ClearML's session), ``internals`` (the one place that touches
ClearML's private attributes) and ``journal`` (offline mode's local journal). Leaves, importing
nothing of tracker_saver: ``binding`` (ClearML's ``torch.save`` binding skips our writes) and
``conf`` (S3 credentials from clearml.conf). This ``__init__`` imports nothing, so importing a
leaf loads only that leaf.
"""

from __future__ import annotations

__all__: list[str] = []
