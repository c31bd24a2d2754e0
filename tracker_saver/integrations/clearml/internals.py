"""The one place that touches ClearML's private attributes; checked on clearml 2.1.12.

ClearML offers no public way to bound its API session or to read a request's action, so the
registry leans on a few of its internals. Every such access goes through this module, and
``tests/test_clearml_internals.py`` checks each name below against the installed clearml (and
that no other module of the package names them): an upgrade that renames or reshapes one fails
there, naming the attribute and pyproject's bound (``clearml>=1.16,<3``), not mid-training.

What is relied on (clearml 2.1.12):

* ``Session._session_initial_timeout``, ``_session_timeout``, ``_write_session_timeout``: class
  attributes, ``(connect, read)`` tuples the session passes to ``requests``; a subclass sets ours.
* ``Session._load_vaults(self)``: overridden to do nothing (the vaults would replace the SDK's
  global configuration with this session's).
* ``Session._get_retry_codes(self) -> list[int]``: overridden to ``[]``, so a 502/503 comes back
  as an answer for our retry loop.
* ``Session.validate_request(self, req_obj)``: overridden to validate each request with a
  validator made once per request class, from ``Request._schema`` (the request's JSON schema) and
  ``clearml.backend_api.session.datamodel._CustomValidator`` (the SDK's own jsonschema validator
  class). The SDK calls ``jsonschema.validate``, which checks the schema against JSON Schema's
  metaschema at every request first: 2.7 ms of CPU for a ``models.get_all``, against 0.05 ms
  (``benchmarks/bench_clearml_requests.py``). The same errors are raised for the same requests.
* ``ConfigWrapper._init() -> Config``: the SDK's configuration (clearml.conf, ``CLEARML_*``).
* ``Request._action``: a request's action name (``"get_all"``, ``"create"``...).
* ``Task._offline_filename``: the task file in an offline session (``"task.json"``).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CHECKED_ON",
    "OFFLINE_TASK_FILE",
    "SESSION_HOOKS",
    "SESSION_TIMEOUTS",
    "VALIDATE_HOOK",
    "bounded_session_class",
    "request_action",
    "sdk_config",
]

#: The clearml version these internals were checked on.
CHECKED_ON = "2.1.12"
#: ``Session`` class attributes holding ``(connect, read)`` timeouts.
SESSION_TIMEOUTS = ("_session_initial_timeout", "_session_timeout", "_write_session_timeout")
#: ``Session`` methods the bounded session overrides.
SESSION_HOOKS = ("_load_vaults", "_get_retry_codes")
#: The ``Session`` method that validates a request before it is sent; overridden too.
VALIDATE_HOOK = "validate_request"
#: The task file of an offline session folder (clearml's ``Task._offline_filename``).
OFFLINE_TASK_FILE = "task.json"


def bounded_session_class(connect: float, read: float) -> type[Any]:
    """A ``clearml.backend_api.Session`` subclass with our timeouts, no vaults and no retry codes.

    Examples:
        As :func:`tracker_saver.integrations.clearml.session.open_session` does::

            session = bounded_session_class(10.0, 20.0)(host=None, config=config, http_retries_config={"total": 0})
    """
    from clearml.backend_api import Session

    timeouts = (connect, read)

    class _Bounded(Session):
        _session_initial_timeout = _session_timeout = _write_session_timeout = timeouts

        def _load_vaults(self) -> None:
            return None  # they would replace the SDK's global configuration with this one's

        def _get_retry_codes(self) -> list[int]:
            return []  # so a 502/503 comes back as an answer, for send() to retry (or not)

        def validate_request(self, req_obj: Any) -> None:
            if not validate_once(req_obj):
                super().validate_request(req_obj)

    return _Bounded


#: Each request class's validator, its schema checked once (per process: a schema never changes).
_VALIDATORS: dict[type[Any], Any] = {}


def validate_once(request: Any) -> bool:
    """Validate a ClearML ``request`` as the SDK does, its class's schema checked only the first time.

    ``jsonschema.validate(instance, schema, cls)``, which the SDK calls, is ``cls.check_schema(schema)``
    then the best match of ``cls(schema).iter_errors(instance)``, raised: the same here, with
    ``cls(schema)`` kept per request class. ``False`` when it cannot (not a request with a schema,
    or no SDK validator class with jsonschema < 3): the SDK's own check then.

    Examples:
        >>> validate_once(object())
        False
    """
    validator = _VALIDATORS.get(type(request))
    if validator is None:
        schema = getattr(request, "_schema", None)
        if not isinstance(schema, dict) or not hasattr(request, "to_dict"):
            return False
        from clearml.backend_api.session import datamodel

        if datamodel._CustomValidator is None:
            return False
        datamodel._CustomValidator.check_schema(schema)
        validator = _VALIDATORS[type(request)] = datamodel._CustomValidator(schema)
    from jsonschema.exceptions import best_match

    error = best_match(validator.iter_errors(request.to_dict()))
    if error is not None:
        raise error
    return True


def sdk_config() -> Any:
    """The SDK's configuration (clearml.conf and ``CLEARML_*``), as ``ConfigWrapper`` holds it.

    The first use of ClearML's API classes makes the SDK read its configuration once for the
    process: use them only where that configuration is meant (doctests that built a request and
    a session before the tests pointed ``CLEARML_CONFIG_FILE`` at theirs made every later ClearML
    test in that process wait out the SDK's 240 retries).

    Examples:
        Where the registry opens its session::

            retries = sdk_config().get("api.http.retries.total", None)
    """
    from clearml.config import ConfigWrapper

    return ConfigWrapper._init()


def request_action(request: Any) -> str:
    """The action of a ClearML API request (``"get_all"``, ``"create"``...); ``""`` if it has none.

    Examples:
        >>> request_action(object())  # a ClearML request, e.g. models.GetAllRequest, gives 'get_all'
        ''
    """
    return str(getattr(request, "_action", "") or "")
