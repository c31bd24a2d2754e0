"""Metadata keys as clearml-server can store them: the keys it refuses are escaped on write, unescaped on read.

clearml-server (apiserver 2.0.0, measured 2026-12-06) applies ``models.add_or_update_metadata``
with ``replace_metadata=false`` as the mongoengine update ``set__metadata__<key>``, after its own
escaping of ``.``, ``$``, ``%``, ``__`` and a leading ``_`` (which round-trips). What that leaves
refused or changed, read from its code (``bll/model/metadata.py``,
``utilities/parameter_key_escaper.py``) and checked on the server:

* ``key``, ``type``, ``value``: mongoengine resolves the name to a field of the metadata item
  itself: ``400/800 Data validation error: key=StringField only accepts string values``;
* ``S``: mongoengine's positional operator: ``500 Field name cannot contain ... "$"``;
* a key that is empty once stripped: ``400/12 Empty key is not allowed``;
* leading or trailing whitespace: stripped, so ``" x "`` would come back as ``"x"``.

Such a key, and any key that starts with :data:`ESCAPE`, is stored as ``~`` followed by the key
with ``%`` and whitespace percent-encoded (``type`` → ``~type``, ``" x "`` → ``~%20x%20``);
every other key is stored as it is. Reading strips the ``~`` and decodes, so the user keeps
the name. Only stored keys that start with ``~`` are escaped ones: a record written before
this escaping with a key that starts with ``~`` reads back without it.

Examples:
    >>> escape_key("type"), escape_key("score"), escape_key(" x "), escape_key("~a")
    ('~type', 'score', '~%20x%20', '~~a')
    >>> unescape_key("~type"), unescape_key("score"), unescape_key("~%20x%20"), unescape_key("~~a")
    ('type', 'score', ' x ', '~a')
"""

from __future__ import annotations

from urllib.parse import quote, unquote

__all__ = ["ESCAPE", "REFUSED_KEYS", "escape_key", "unescape_key"]

#: The first character of an escaped key.
ESCAPE = "~"
#: Keys clearml-server refuses in ``models.add_or_update_metadata`` (whitespace aside).
REFUSED_KEYS = frozenset({"key", "type", "value", "S"})


def _needs_escape(key: str) -> bool:
    return key in REFUSED_KEYS or key.startswith(ESCAPE) or not key.strip() or key != key.strip()


def escape_key(key: str) -> str:
    """``key`` as stored on a ClearML model (itself unless the server would refuse or change it)."""
    if not _needs_escape(key):
        return key
    return ESCAPE + "".join(quote(c, safe="") if c == "%" or c.isspace() else c for c in key)


def unescape_key(stored: str) -> str:
    """The user's key of a stored metadata key (:func:`escape_key` undone)."""
    return unquote(stored[len(ESCAPE) :]) if stored.startswith(ESCAPE) else stored
