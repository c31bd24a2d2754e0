"""The stand-in answers as the real clearml-server does: one test per rule of ``tests/clearml_standin/rules.py``.

Each test sends the request the real server was measured on (apiserver 2.0.0, API 2.31, run from
its own code on loopback, 2026-12-06) over real HTTP, and checks the answer the real server gave:
its code, subcode and the words of its message. With CLEARML_API_HOST, CLEARML_API_ACCESS_KEY and
CLEARML_API_SECRET_KEY set, the same tests run against that server, which is how each rule was
checked there.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.conftest_clearml import VERSION, ClearMLApi

pytestmark = pytest.mark.clearml


@pytest.fixture
def api(clearml_api: ClearMLApi) -> ClearMLApi:
    return clearml_api


@pytest.fixture
def project(api: ClearMLApi) -> str:
    return str(api.ok("projects.create", name=f"tracker_saver-rules/{uuid.uuid4().hex[:12]}")["id"])


def _model(api: ClearMLApi, project: str, **fields: Any) -> str:
    return str(api.ok("models.create", name="rules-model", uri="", project=project, **fields)["id"])


def _task(api: ClearMLApi, project: str, status: str) -> str:
    """A task moved to ``status`` the way the SDK moves it (``started``, then the final call)."""
    task = str(api.ok("tasks.create", name="rules-task", type="training", project=project)["id"])
    calls = {"created": [], "in_progress": ["started"], "stopped": ["started", "stopped"],
             "failed": ["started", "failed"], "completed": ["started", "completed"],
             "published": ["started", "completed", "publish"], "closed": ["started", "completed", "close"]}  # fmt: skip
    for action in calls[status]:
        api.ok(f"tasks.{action}", task=task, force=True)
    assert api.ok("tasks.get_by_id", task=task)["task"]["status"] == status
    return task


def _item(key: str, value: str = "1") -> dict[str, str]:
    return {"key": key, "type": "str", "value": value}


# -- models.add_or_update_metadata: the metadata key rule -------------------------------------------


@pytest.mark.parametrize("key", ["key", "type", "value"])
def test_metadata_keys_naming_a_metadata_items_own_fields_are_refused(api, project, key) -> None:
    code, subcode, msg, _ = api("models.add_or_update_metadata", model=_model(api, project), metadata=[_item(key)])
    assert (code, subcode) == (400, 800)
    assert msg == f"Data validation error: {key}=StringField only accepts string values"


def test_the_metadata_key_S_is_the_positional_operator_and_a_server_error(api, project) -> None:
    code, subcode, msg, _ = api("models.add_or_update_metadata", model=_model(api, project), metadata=[_item("S")])
    assert (code, subcode) == (500, 0) and 'cannot start with "$"' in msg


@pytest.mark.parametrize("key", ["", "   "])
def test_an_empty_metadata_key_is_refused(api, project, key) -> None:
    code, subcode, msg, _ = api("models.add_or_update_metadata", model=_model(api, project), metadata=[_item(key)])
    assert (code, subcode, msg) == (400, 12, "Validation error (Empty key is not allowed)")


def test_other_metadata_keys_are_taken_and_read_back_stripped(api, project) -> None:
    model = _model(api, project)
    keys = ["Key", "id", "name", "a.b", "$x", "score name", "_x", "__x", "%x", "0", "slot_key", "~type", "in", "set"]
    for key in keys:
        api.ok("models.add_or_update_metadata", model=model, metadata=[_item(key)])
    api.ok("models.add_or_update_metadata", model=model, metadata=[_item(" padded ")])
    stored = api.ok("models.get_by_id", model=model)["model"]["metadata"]
    assert sorted(stored) == sorted([*keys, "padded"])


def test_replacing_all_metadata_takes_the_keys_an_update_refuses(api, project) -> None:
    model = _model(api, project)
    api.ok("models.add_or_update_metadata", model=model, metadata=[_item("key"), _item("type")], replace_metadata=True)
    assert sorted(api.ok("models.get_by_id", model=model)["model"]["metadata"]) == ["key", "type"]


@pytest.mark.parametrize(
    ("metadata", "words"),
    [
        ([], "length is lower than allowed minimum '1'"),
        ({"a": _item("a")}, 'expected type "list"'),
        ([{"key": "a", "value": "1"}], "error for field 'type'"),
        ([{"key": "a", "type": "int", "value": 1}], 'expected type "str"'),
    ],
)
def test_metadata_items_are_checked_before_anything_is_written(api, project, metadata, words) -> None:
    code, subcode, msg, _ = api("models.add_or_update_metadata", model=_model(api, project), metadata=metadata)
    assert (code, subcode) == (400, 12) and words in msg


def test_deleting_metadata_needs_keys_and_forgets_unknown_ones(api, project) -> None:
    model = _model(api, project)
    assert api("models.delete_metadata", model=model, keys=[])[:2] == (400, 12)
    assert api.ok("models.delete_metadata", model=model, keys=["not-there"]) == {"updated": 1}


# -- task statuses: what each write needs -----------------------------------------------------------

FINISHED = ["stopped", "failed", "completed", "published", "closed"]


@pytest.mark.parametrize("status", ["created", "in_progress"])
def test_a_running_task_lists_and_unlists_models(api, project, status) -> None:
    task, model = _task(api, project, status), _model(api, project)
    api.ok("tasks.add_or_update_model", task=task, name="entry", model=model, type="output")
    api.ok("tasks.delete_models", task=task, models=[{"name": "entry", "type": "output"}])


@pytest.mark.parametrize("status", FINISHED)
@pytest.mark.parametrize(
    ("endpoint", "fields"),
    [
        ("tasks.add_or_update_model", {"name": "entry", "type": "output"}),
        ("tasks.delete_models", {"models": [{"name": "entry", "type": "output"}]}),
        (
            "tasks.add_or_update_artifacts",
            {"force": True, "artifacts": [{"key": "a", "type": "custom", "mode": "output"}]},
        ),
    ],
)
def test_a_finished_task_refuses_changes_to_its_lists(api, project, status, endpoint, fields) -> None:
    task, model = _task(api, project, status), _model(api, project)
    if endpoint == "tasks.add_or_update_model":
        fields = {**fields, "model": model}
    code, subcode, msg, _ = api(endpoint, task=task, **fields)
    assert (code, subcode, msg) == (400, 110, f"Invalid task status: expected=created, status={status}")


@pytest.mark.parametrize("status", FINISHED)
def test_a_model_of_a_finished_task_can_still_be_created_edited_and_given_metadata(api, project, status) -> None:
    task = _task(api, project, status)
    model = str(api.ok("models.create", name="late-model", uri="", project=project, task=task)["id"])
    api.ok("models.edit", model=model, comment="edited")
    api.ok("models.add_or_update_metadata", model=model, metadata=[_item("a")])
    assert api.ok("tasks.get_by_id", task=task)["task"]["status"] == status


def test_tasks_edit_needs_a_created_task_or_force(api, project) -> None:
    task = _task(api, project, "in_progress")
    assert api("tasks.edit", task=task, comment="c")[:3] == (
        400,
        110,
        "Invalid task status: expected=created, status=in_progress",
    )
    api.ok("tasks.edit", task=task, comment="c", force=True)
    api.ok("tasks.update", task=_task(api, project, "completed"), tags=["any status"])


def test_hyper_params_change_while_created_or_with_force_while_in_progress(api, project) -> None:
    task = _task(api, project, "in_progress")
    params = [{"section": "s", "name": "n", "value": "1"}]
    assert api("tasks.edit_hyper_params", task=task, hyperparams=params)[:2] == (400, 110)
    api.ok("tasks.edit_hyper_params", task=task, hyperparams=params, force=True)


# -- models.edit and models.update: field types ---------------------------------------------------


@pytest.mark.parametrize("endpoint", ["models.edit", "models.update"])
def test_metadata_as_a_list_is_a_server_error_in_edit_and_update(api, project, endpoint) -> None:
    code, subcode, msg, _ = api(endpoint, model=_model(api, project), metadata=[_item("a")])
    assert (code, subcode, msg) == (500, 0, "'list' object has no attribute 'items'")


@pytest.mark.parametrize("endpoint", ["models.edit", "models.update"])
def test_metadata_as_a_dict_replaces_it_in_edit_and_update(api, project, endpoint) -> None:
    model = _model(api, project)
    api.ok(endpoint, model=model, metadata={"type": _item("type"), "k": _item("k")})
    assert sorted(api.ok("models.get_by_id", model=model)["model"]["metadata"]) == ["k", "type"]


@pytest.mark.parametrize("endpoint", ["models.edit", "models.update"])
@pytest.mark.parametrize(
    ("fields", "answer"),
    [
        ({"name": "ab"}, (400, 800, "Data validation error: name=String value is too short")),
        ({"name": "  ab  "}, (400, 800, "Data validation error: name=String value is too short")),
        ({"name": 123}, (500, 0, "'int' object has no attribute 'strip'")),
        ({"comment": 5}, (400, 800, "Data validation error: comment=StringField only accepts string values")),
        ({"uri": 5}, (500, 0, "'int' object has no attribute 'strip'")),
        ({"tags": [1]}, (500, 0, "'int' object has no attribute 'startswith'")),
        ({"tags": ["__$x"]}, (400, 16, "Invalid value for fields (unsupported tag prefix): values=(__$x)")),
        ({"iteration": "x"}, (400, 12, "Validation error (invalid literal for int() with base 10: 'x')")),
    ],
)
def test_edit_and_update_refuse_wrong_field_types(api, project, endpoint, fields, answer) -> None:
    assert api(endpoint, model=_model(api, project), **fields)[:3] == answer


def test_edit_checks_types_and_ids_that_update_ignores(api, project) -> None:
    model = _model(api, project)
    assert api("models.edit", model=model, ready="yes")[:2] == (400, 800)
    assert api("models.edit", model=model, framework=5)[:2] == (400, 800)
    assert api("models.edit", model=model, task="nope")[:3] == (
        400, 16, "Invalid value for fields (expecting Task id): id=nope, field=task"
    )  # fmt: skip
    assert api("models.edit", model=model, project="nope")[:2] == (400, 16)
    assert api.ok("models.update", model=model, ready="yes", framework=5) == {"updated": 0, "fields": {}}
    assert api("models.update", model=model, task="nope")[:2] == (400, 101)


@pytest.mark.parametrize("endpoint", ["models.edit", "models.update"])
def test_unknown_fields_are_ignored_not_refused(api, project, endpoint) -> None:
    assert api.ok(endpoint, model=_model(api, project), foo=1) == {"updated": 0, "fields": {}}


def test_tags_in_edit_are_sorted_with_duplicates_kept(api, project) -> None:
    model = _model(api, project)
    api.ok("models.edit", model=model, tags=["b", "a", "a"])
    assert api.ok("models.get_by_id", model=model)["model"]["tags"] == ["a", "a", "b"]


# -- creating: names, required fields --------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["projects.create", "tasks.create", "models.create"])
def test_names_shorter_than_three_characters_are_refused(api, project, endpoint) -> None:
    fields = {
        "tasks.create": {"type": "training", "project": project},
        "models.create": {"uri": "", "project": project},
    }
    code, subcode, msg, _ = api(endpoint, name="ab", **fields.get(endpoint, {}))
    assert (code, subcode, msg) == (400, 800, "Data validation error: name=String value is too short")


def test_models_create_checks_required_fields_types_and_ids(api, project) -> None:
    assert api("models.create", name="abc", project=project)[:3] == (
        400, 12, "Validation error (error for field 'uri'. field is required!)"
    )  # fmt: skip
    assert api("models.create", name="abc", uri="", project=project, tags="a")[:2] == (400, 12)
    assert api("models.create", name="abc", uri="", project=project, metadata=[_item("a")])[:2] == (400, 12)
    assert api("models.create", name="abc", uri="", project="nope")[:3] == (
        400, 12, "Validation error (Invalid project ids): project=nope"
    )  # fmt: skip
    assert api("models.create", name="abc", uri="", project=project, task="nope")[:2] == (400, 101)


def test_a_project_name_is_unique(api, project) -> None:
    name = api.ok("projects.get_by_id", project=project)["project"]["name"]
    code, subcode, msg, _ = api("projects.create", name=name)
    assert (code, subcode) == (400, 801) and msg.startswith("Project with the same name already exists")


# -- what the stand-in does not implement, paging, batches, ids ------------------------------------


def test_an_unknown_endpoint_is_not_found_never_an_empty_success(api) -> None:
    assert api("models.no_such_action", model="x")[:3] == (
        404, 0, f"Unable to find endpoint for name models.no_such_action and version {VERSION}"
    )  # fmt: skip


def test_a_page_holds_at_most_500_and_bad_paging_is_refused(api, project) -> None:
    for _ in range(3):
        _model(api, project)
    page = api.ok("models.get_all", project=[project], page=0, page_size=2, only_fields=["id"])["models"]
    assert len(page) == 2
    assert api("models.get_all", project=[project], page=0, page_size=0)[:2] == (400, 12)
    assert api("models.get_all", project=[project], page=-1, page_size=2)[:2] == (400, 12)
    assert api.ok("models.get_all", project=[project], page=1, only_fields=["id"])["models"] == []  # pages of 500


def test_archiving_adds_a_system_tag_only_and_reports_unknown_ids(api, project) -> None:
    task, model = _task(api, project, "in_progress"), _model(api, project)
    api.ok("tasks.add_or_update_model", task=task, name="entry", model=model, type="output")
    answer = api.ok("models.archive_many", ids=[model, "nope"])
    assert answer["succeeded"] == [{"id": model, "archived": True}]
    assert [(f["id"], f["error"]["codes"]) for f in answer["failed"]] == [("nope", [400, 201])]
    assert "archived" in api.ok("models.get_by_id", model=model)["model"]["system_tags"]
    outputs = api.ok("tasks.get_by_id", task=task)["task"]["models"]["output"]
    assert [e["model"] for e in outputs] == [model]  # still listed on its task
    assert api("models.archive_many", ids=[])[:2] == (400, 12)


def test_deleting_a_listed_model_takes_it_off_its_own_task(api, project) -> None:
    task = _task(api, project, "in_progress")
    model = _model(api, project, task=task)
    api.ok("tasks.add_or_update_model", task=task, name="entry", model=model, type="output")
    api.ok("models.delete", model=model)
    assert api.ok("tasks.get_by_id", task=task)["task"]["models"]["output"] == []
    assert api("models.delete", model=model)[:2] == (400, 201)


def test_deleting_a_model_a_task_uses_as_input_needs_force(api, project) -> None:
    task, model = _task(api, project, "in_progress"), _model(api, project)
    api.ok("tasks.add_or_update_model", task=task, name="in", model=model, type="input")
    assert api("models.delete", model=model)[:2] == (400, 205)
    failed = api.ok("models.delete_many", ids=[model])["failed"]
    assert [f["error"]["codes"] for f in failed] == [[400, 205]]


@pytest.mark.parametrize(
    ("endpoint", "field", "answer"),
    [("models.get_by_id", "model", (400, 201)), ("tasks.get_by_id", "task", (400, 101)),
     ("projects.get_by_id", "project", (400, 401)), ("models.edit", "model", (400, 201))],
)  # fmt: skip
def test_an_unknown_id_has_the_servers_code(api, endpoint, field, answer) -> None:
    assert api(endpoint, **{field: "nope"})[:2] == answer


def test_bad_list_filters_are_refused(api) -> None:
    assert api("models.get_all", tags=[1])[:2] == (400, 16)
    assert api("models.get_all", tags=["__$foo"])[:2] == (400, 16)
    assert api("models.get_all", name="(")[:2] == (400, 21)


# -- status changes --------------------------------------------------------------------------------

#: Measured for every status and action, without ``force``: what clearml-server 2.0 refuses (400/110).
REFUSED = {
    "created": ["stopped", "completed", "failed", "publish", "close"],
    "in_progress": ["publish", "close", "enqueue"],
    "completed": ["stopped", "failed", "close", "enqueue"],
    "failed": ["started", "completed", "close"],
    "published": ["started", "stopped", "completed", "failed", "publish", "close", "reset", "enqueue"],
    "closed": ["started", "completed", "enqueue"],
}


@pytest.mark.parametrize("status", ["created", "in_progress", "stopped", "completed", "failed", "published", "closed"])
def test_status_changes_follow_the_servers_state_machine_unless_forced(api, project, status) -> None:
    for action in ["started", "stopped", "completed", "failed", "publish", "close", "reset", "enqueue"]:
        code, subcode, msg, _ = api(f"tasks.{action}", task=_task(api, project, status))
        if action in REFUSED.get(status, []):
            assert (code, subcode) == (400, 110) and msg.startswith("Invalid task status"), (status, action)
        else:
            assert (code, subcode) == (200, 0), (status, action, msg)
    if status != "published":
        assert api("tasks.completed", task=_task(api, project, status), force=True)[:2] == (200, 0)


@pytest.mark.parametrize("endpoint", ["models.update_for_task", "models.get_by_task_id"])
def test_endpoints_gone_since_api_2_13_answer_moved_permanently(api, project, endpoint) -> None:
    code, subcode, msg, _ = api(endpoint, task=_task(api, project, "in_progress"))
    assert (code, subcode) == (301, 1) and msg.startswith("This endpoint is no longer supported")
