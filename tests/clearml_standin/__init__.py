"""An in-memory stand-in of the ClearML API server, for tests only; it is not a ClearML server.

The real server needs Docker, MongoDB, Elasticsearch and Redis. This stand-in speaks just
enough of its REST protocol (``POST|GET /v<version>/<service>.<action>`` with a JSON body,
answers wrapped as ``{"meta": {...}, "data": {...}}``) for the *real* clearml SDK to run
``Task.init``, ``OutputModel``, ``Model.query_models``, ignite's ``ClearMLSaver`` and
``Task.import_offline_session`` (``tasks.create``, ``edit``, ``started``, ``completed`` and the
session's logs and metrics as ``events.add_batch``, accepted and dropped) against it.
Entities live in plain dicts so tests can assert on exactly what the SDK sent.

What it mirrors from clearml-server (apiserver/database/model/base.py, services/models.py):

* ``auth.login`` answers a JWT whose payload carries ``api_version``/``server_version``
  (the SDK decodes it, unverified, to choose its API level).
* ``get_all``/``get_all_ex`` filters: ``name``/``comment`` are regular expressions; ``id``,
  ``project``, ``task``, ``tags``, ``system_tags``, ``status``, ``type``, ``user``,
  ``framework``, ``uri``, ``parent`` and ``metadata.<key>.value`` are *list fields* with the
  server's operators: a plain list is OR, ``-tag`` or ``__$not tag`` excludes, ``__$all`` /
  ``__$and`` switch to AND, ``__$any`` / ``__$or`` back to OR. The buckets are joined by the
  first operator if it comes before any value, else by AND, exactly like clearml-server 2.0:
  ``["a", "-b"]`` means "has a AND lacks b". ``ready`` is equality; ``only_fields``,
  ``order_by``, ``page``/``page_size`` (pages of at most 500) and ``size``/``scroll_id`` are honoured.
* models: ``name`` needs at least 3 characters, tags are stored sorted, ``metadata`` is a dict
  ``key -> {key, type, value}`` (values are strings), ``models.create``/``edit`` replace fields,
  ``add_or_update_metadata`` merges (or replaces), ``archive_many``/``unarchive_many`` toggle the
  ``archived`` system tag, an unknown id is ``400/201 invalid model id``.
* tasks: ``add_or_update_model`` replaces the output-model entry of the same name or appends;
  ``delete_models`` removes entries by name; status calls (``started``, ``completed``, ...) move
  ``status``; an unknown id is ``400/101 invalid task id``.
* ``events.*`` batches are accepted and dropped (only counted).

* permissions: ``auth.login`` refuses any other key pair (``401/22 Unauthorized (invalid
  credentials)``); a project marked with :meth:`ClearMLStandIn.read_only` may be read, but
  creating, changing or deleting a model, task or subproject in it answers ``403/21 Forbidden
  (modification not allowed)``, the server's ``NoWritePermission``.

The rules it shares with the real clearml-server (metadata keys, task statuses, field types,
name lengths, paging, batch calls, error codes and messages) are in
:mod:`tests.clearml_standin.rules`, each measured on the real server; an endpoint it does not
implement is answered as the real server answers one it lacks, ``404/0 Unable to find
endpoint``, and remembered in :attr:`ClearMLStandIn.unknown_calls`: never an empty success.
Faults can be injected with :meth:`ClearMLStandIn.fail` to test error mapping.

Outages (``tests/test_clearml_outages.py``): :meth:`ClearMLStandIn.pause` stops listening and
drops every open connection (a client is refused, as by a server that went away) and
:meth:`ClearMLStandIn.resume` listens again on the same port with every entity kept;
:meth:`ClearMLStandIn.hang` accepts connections and reads requests but answers none (a frozen
server) until :meth:`ClearMLStandIn.unhang`, which drops the held requests unprocessed.

Examples:
    >>> server = ClearMLStandIn().start()
    >>> server.api_host.startswith("http://127.0.0.1:")
    True
    >>> server.stop()
"""

from __future__ import annotations

from tests.clearml_standin.common import ACCESS_KEY, SECRET_KEY, Call, StandInError
from tests.clearml_standin.server import ClearMLStandIn

__all__ = ["ACCESS_KEY", "SECRET_KEY", "Call", "ClearMLStandIn", "StandInError"]
