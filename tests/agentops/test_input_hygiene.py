"""Every JSON entry point refuses what PostgreSQL cannot store, naming the path (no 500)."""

from __future__ import annotations

import html

import pytest
from django.test import Client
from django.urls import reverse

from agentops.forms import StorableJSONField, TaskStartForm
from agentops.models import Task
from reviews.forms import EditApproveForm

pytestmark = pytest.mark.django_db

BAD = [
    ('{"\\ud800": 1}', "input.<key '\\ud800'>: contains a lone surrogate"),
    ('{"a": ["ok", "x\\u0000y"]}', "input.a[1]: contains a NUL character"),
    ('{"b": {"c": "\\udfff"}}', "input.b.c: contains a lone surrogate"),
]


@pytest.mark.parametrize(("text", "says"), BAD, ids=["surrogate-key", "nul", "surrogate"])
def test_the_start_page_refuses_unstorable_input_with_a_form_error(django_user_model, text, says):
    user = django_user_model.objects.create_superuser("root", "r@example.com", "pw")
    client = Client()
    client.force_login(user)

    response = client.post(
        reverse("agentops:task_new"), {"agent": "refund", "goal": "Refund", "input": text}
    )

    assert response.status_code in (200, 400)
    assert says in html.unescape(response.content.decode())
    assert not Task.objects.exists()


@pytest.mark.parametrize(("text", "says"), BAD, ids=["surrogate-key", "nul", "surrogate"])
def test_the_start_form_names_the_path(text, says):
    form = TaskStartForm({"agent": "refund", "goal": "g", "input": text})

    assert not form.is_valid()
    assert says in form.errors["input"][0]


def test_the_edit_arguments_form_names_the_path():
    form = EditApproveForm({"seen_digest": "x", "arguments": '{"order_id": "\\ud83d"}'})

    assert not form.is_valid()
    assert "arguments.order_id: contains a lone surrogate" in form.errors["arguments"][0]


def test_admin_json_fields_refuse_unstorable_values():
    field = StorableJSONField()

    with pytest.raises(Exception, match=r"value.notes\[0\]: contains a NUL character"):
        field.clean('{"notes": ["a\\u0000"]}')
    assert field.clean('{"notes": ["fine"]}') == {"notes": ["fine"]}


@pytest.mark.parametrize(
    ("depth", "says"),
    [
        (300, "input.a" + "[0]" * 199 + ": nested deeper than 200 levels"),
        (30_000, "The input is nested too deeply."),
    ],
    ids=["past-the-limit", "past-json"],
)
def test_the_start_form_refuses_input_nested_too_deeply(depth, says):
    text = '{"a": ' + "[" * depth + "]" * depth + "}"

    form = TaskStartForm({"agent": "refund", "goal": "g", "input": text})

    assert not form.is_valid()
    assert says in form.errors["input"][0]


def test_admin_json_fields_refuse_deep_nesting_and_show_the_text_again():
    from django.forms.fields import InvalidJSONInput

    field = StorableJSONField()
    too_deep_for_json = "[" * 30_000 + "]" * 30_000

    with pytest.raises(Exception, match="The value is nested too deeply"):
        field.clean(too_deep_for_json)
    with pytest.raises(Exception, match=r"value(\[0\]){200}: nested deeper than 200 levels"):
        field.clean("[" * 300 + "]" * 300)
    assert isinstance(field.bound_data(too_deep_for_json, None), InvalidJSONInput)
