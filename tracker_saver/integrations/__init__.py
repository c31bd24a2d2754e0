"""One experiment tracker's leaf glue per module; generic tracker_saver code never imports these.

``clearml_binding``: make ClearML's ``torch.save`` binding skip our writes.
``clearml_conf``: S3 credentials from clearml.conf. Both import nothing of tracker_saver; the
ClearML registry (``tracker_saver.registry.clearml``) and the drop-in saver
(``tracker_saver.clearml``) build on them.
"""

from __future__ import annotations

__all__: list[str] = []
