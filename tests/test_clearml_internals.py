"""ClearML's internals that the registry relies on still exist in the installed clearml, in the shape used.

Every private ClearML attribute tracker_saver touches goes through
``tracker_saver.integrations.clearml.internals``. Each test here names the attribute and
pyproject's bound, so an upgrade that breaks the shim fails here, not mid-training. No server
is needed: the classes are inspected, never connected.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("clearml", reason="ClearML tests need clearml: pip install 'clearml>=1.16,<3' (the clearml extra)")

import clearml  # noqa: E402
from clearml import Task  # noqa: E402
from clearml.backend_api import Session  # noqa: E402
from clearml.config import ConfigWrapper  # noqa: E402

from tracker_saver.integrations.clearml import internals  # noqa: E402

pytestmark = pytest.mark.clearml


@pytest.fixture(autouse=True)
def _sdk_configured(clearml_server: Any) -> None:
    """Each test under the session's ClearML configuration: the first use of ClearML's API classes
    fixes the SDK's configuration for the process, and the later ClearML tests of this worker need
    theirs (with the SDK's defaults, 240 retries, each of them waited 300 s in ci33)."""


ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tracker_saver" / "integrations" / "clearml"
BOUND = re.search(r'"(clearml[^"]*)"', (ROOT / "pyproject.toml").read_text()).group(1)  # type: ignore[union-attr]


def _broken(what: str) -> str:
    return (
        f"clearml {clearml.__version__}: {what}; tracker_saver.integrations.clearml.internals relies on it "
        f"(checked on clearml {internals.CHECKED_ON}): adapt the shim, or bound pyproject's {BOUND!r} below this version"
    )


@pytest.mark.parametrize("name", internals.SESSION_TIMEOUTS)
def test_session_timeouts_are_connect_read_pairs(name: str) -> None:
    value = getattr(Session, name, None)
    assert isinstance(value, tuple) and len(value) == 2, _broken(
        f"Session.{name} is {value!r}, not a (connect, read) pair"
    )
    assert all(isinstance(v, (int, float)) for v in value), _broken(f"Session.{name} is {value!r}")


@pytest.mark.parametrize("name", internals.SESSION_HOOKS)
def test_session_hooks_are_methods_of_self_alone(name: str) -> None:
    hook = getattr(Session, name, None)
    assert callable(hook), _broken(f"Session.{name} is gone")
    assert list(inspect.signature(hook).parameters) == ["self"], _broken(f"Session.{name} takes other arguments")


def test_the_bounded_session_overrides_each_name_it_sets() -> None:
    bounded = internals.bounded_session_class(1.0, 2.0)
    assert issubclass(bounded, Session)
    for name in (*internals.SESSION_TIMEOUTS, *internals.SESSION_HOOKS):
        assert name in vars(bounded), name
    assert bounded._session_timeout == (1.0, 2.0)


def test_the_sdk_validates_a_request_with_its_own_validator_class_and_the_request_classs_schema() -> None:
    from clearml.backend_api.services import models
    from clearml.backend_api.session import datamodel

    hook = getattr(Session, internals.VALIDATE_HOOK, None)
    assert callable(hook), _broken(f"Session.{internals.VALIDATE_HOOK} is gone")
    assert list(inspect.signature(hook).parameters) == ["self", "req_obj"], _broken(
        f"Session.{internals.VALIDATE_HOOK} takes other arguments"
    )
    assert internals.VALIDATE_HOOK in vars(internals.bounded_session_class(1.0, 2.0))
    validator = getattr(datamodel, "_CustomValidator", None)
    assert callable(getattr(validator, "check_schema", None)), _broken("datamodel._CustomValidator is gone")
    assert isinstance(getattr(models.GetAllRequest, "_schema", None), dict), _broken("Request._schema is no dict")


def _sdk_and_ours(request: Any) -> tuple[str, str]:
    """What the SDK's ``Session.validate_request`` and the bounded session's raise for ``request`` ("" for nothing)."""
    bounded = internals.bounded_session_class(1.0, 2.0)
    outcomes = []
    for session in (Session.__new__(Session), bounded.__new__(bounded)):  # validating needs no connection
        try:
            session.validate_request(request)
            outcomes.append("")
        except Exception as exc:  # noqa: BLE001 (compared whatever it is)
            outcomes.append(f"{type(exc).__name__}: {exc}")
    return outcomes[0], outcomes[1]


def test_the_bounded_session_refuses_and_accepts_exactly_what_the_sdk_does() -> None:
    from clearml.backend_api.services import models

    created = models.CreateRequest(uri="file:///out/slot-0", name="best_model_1.pt", project="p", tags=["a"])
    missing = models.CreateRequest(uri="file:///out/slot-0", name="no uri")
    missing._property_uri = None  # the schema requires it
    wrong = models.GetAllRequest(name="x")
    wrong._property_name = 5  # a string in the schema, set past the request's own type check
    for request in (created, models.GetAllRequest(project=["p"], only_fields=["id"]), missing, wrong, object()):
        sdk, ours = _sdk_and_ours(request)
        assert sdk == ours, (request, sdk, ours)
    assert "'uri' is a required property" in _sdk_and_ours(missing)[1]
    assert _sdk_and_ours(wrong)[1].startswith("ValidationError: 5 is not of type 'string'")


def test_session_takes_host_config_and_http_retries_config() -> None:
    params = inspect.signature(Session.__init__).parameters
    for name in ("host", "config", "http_retries_config"):
        assert name in params, _broken(f"Session() takes no {name}=")


def test_config_wrapper_init_returns_the_sdk_configuration() -> None:
    assert callable(getattr(ConfigWrapper, "_init", None)), _broken("ConfigWrapper._init is gone")
    assert not inspect.signature(ConfigWrapper._init).parameters, _broken("ConfigWrapper._init() takes arguments")
    config = internals.sdk_config()
    assert callable(getattr(config, "get", None)), _broken(f"ConfigWrapper._init() returned {config!r}, without get()")
    assert config.get("api.http.no_such_key_here", "fallback") == "fallback"


@pytest.mark.parametrize(
    ("request_class", "action"),
    [
        ("models.GetAllRequest", "get_all"),
        ("models.CreateRequest", "create"),  # never retried after an unclear failure
        ("models.DeleteRequest", "delete"),
        ("projects.CreateRequest", "create"),
    ],
    ids=["models.get_all", "models.create", "models.delete", "projects.create"],
)
def test_a_request_names_its_action(request_class: str, action: str) -> None:
    # Looked up here, not at collection: touching ``services`` reads the SDK's configuration, once
    # for the process, before the fixture has pointed CLEARML_CONFIG_FILE at the session's.
    from clearml.backend_api import services

    service, name = request_class.split(".")
    cls = getattr(getattr(services, service), name)
    assert internals.request_action(cls) == action, _broken(f"{request_class}._action is not {action!r}")
    if cls is services.models.GetAllRequest:  # and an instance, as send() sees it
        assert internals.request_action(cls(name="x")) == action


def test_the_offline_task_file_is_clearmls() -> None:
    found = getattr(Task, "_offline_filename", None)
    assert found == internals.OFFLINE_TASK_FILE, _broken(f"Task._offline_filename is {found!r}")


def test_the_installed_clearml_is_within_the_pyproject_bound() -> None:
    major = int(clearml.__version__.split(".")[0])
    assert 1 <= major < 3, _broken(f"the installed clearml is outside {BOUND!r}")


#: The private names only the shim may use (attributes, or strings given to getattr).
PRIVATE = {
    *internals.SESSION_TIMEOUTS, *internals.SESSION_HOOKS, "_init", "_action", "_offline_filename", "_schema",
    "_CustomValidator",
}  # fmt: skip


def _private_uses(source: str) -> set[str]:
    """The names of :data:`PRIVATE` that ``source`` uses as an attribute, a getattr string or a method it defines."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE:
            found.add(node.attr)
        elif isinstance(node, ast.Constant) and node.value in PRIVATE:
            found.add(str(node.value))
        elif (
            isinstance(node, (ast.FunctionDef, ast.Name)) and getattr(node, "name", getattr(node, "id", "")) in PRIVATE
        ):
            found.add(getattr(node, "name", getattr(node, "id", "")))
    return found


def test_only_the_shim_touches_clearmls_internals() -> None:
    uses = {
        path.name: found
        for path in sorted(PACKAGE.glob("*.py"))
        if path.name != "internals.py" and (found := _private_uses(path.read_text()))
    }
    assert uses == {}, "go through tracker_saver.integrations.clearml.internals"


def test_the_private_use_finder_finds_each_kind() -> None:
    source = "ConfigWrapper._init()\ngetattr(r, '_action')\nclass S:\n    def _load_vaults(self): ...\n"
    assert _private_uses(source) == {"_init", "_action", "_load_vaults"}
    assert _private_uses((PACKAGE / "internals.py").read_text()) >= PRIVATE - {"_offline_filename"}
