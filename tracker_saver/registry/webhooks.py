"""The import path ``tracker_saver.registry.webhooks`` of releases before ``lifecycle/``: its names, re-exported.

Webhooks are :mod:`tracker_saver.lifecycle.webhooks`'s. Nothing in the package imports this
module (which would be an import up a floor): it is kept only so that users' imports keep working.

Examples:
    >>> from tracker_saver.registry.webhooks import Webhook  # as tracker_saver.lifecycle.webhooks has it
"""

from tracker_saver.lifecycle.webhooks import DEAD_AFTER, REFUSED, SIGNATURE_HEADER, Relay, Webhook, sign

__all__ = ["DEAD_AFTER", "REFUSED", "SIGNATURE_HEADER", "Relay", "Webhook", "sign"]
