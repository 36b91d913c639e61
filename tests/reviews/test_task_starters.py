"""The task-starter role: only its members (and superusers) start tasks, on the form, in the API
and in the service; the engine's own creations are not checked."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from agentops.engine import task_create
from agentops.engine.errors import StartRefused
from agentops.models import Task
from agentops.tokens import api_token_create
from tests.reviews.builders import client_for

pytestmark = pytest.mark.django_db

FORM = {"agent": "refund", "goal": "Refund A1001", "input": '{"order_id": "A1001"}'}


def test_the_start_form_is_refused_to_a_signed_in_user_without_the_role(
    groups, django_user_model, operator, auditor
):
    nobody = django_user_model.objects.create_user(username="nora", password="x")
    for user in (nobody, operator, auditor):
        client = client_for(user)

        page = client.get(reverse("agentops:task_new"))
        post = client.post(reverse("agentops:task_new"), FORM)

        assert (page.status_code, post.status_code) == (403, 403), user.username
    assert not Task.objects.exists()


def test_a_task_starter_opens_the_form_and_starts_a_task(task_starter):
    client = client_for(task_starter)

    page = client.get(reverse("agentops:task_new"))
    post = client.post(reverse("agentops:task_new"), FORM)

    assert page.status_code == 200
    task = Task.objects.get()
    assert post.status_code == 302 and post["Location"] == reverse(
        "agentops:task_detail", args=[task.pk]
    )
    assert task.created_by == task_starter


def test_the_navigation_and_the_task_list_offer_starting_only_to_task_starters(
    task_starter, operator
):
    new = reverse("agentops:task_new")

    starter_page = client_for(task_starter).get(reverse("agentops:task_list")).content.decode()
    operator_page = client_for(operator).get(reverse("agentops:task_list")).content.decode()

    assert f'href="{new}"' in starter_page
    assert f'href="{new}"' not in operator_page


def test_the_service_refuses_a_person_without_the_role_and_writes_nothing(groups, operator):
    with pytest.raises(StartRefused, match="olga may not start tasks"):
        task_create(agent="refund", goal="Refund", input={"order_id": "A1001"}, started_by=operator)

    assert not Task.objects.exists()


def test_the_service_records_the_starter_and_admits_superusers(task_starter, django_user_model):
    root = django_user_model.objects.create_superuser("root", "r@example.com", "pw")

    mine = task_create(agent="refund", goal="Refund", started_by=task_starter)
    theirs = task_create(agent="refund", goal="Refund", started_by=root)

    assert (mine.created_by, theirs.created_by) == (task_starter, root)


def test_an_inactive_task_starter_may_not_start(task_starter):
    task_starter.is_active = False
    task_starter.save()

    assert not task_starter.has_perm("agentops.start_task")


def test_engine_creations_pass_no_person_and_are_not_checked(groups, operator):
    # A child task is attributed to its parent's starter without asking again.
    task = task_create(agent="refund", goal="Refund", created_by=operator)

    assert task.created_by == operator


def test_the_api_refuses_to_start_a_task_for_a_token_without_the_role(groups, operator):
    _, token = api_token_create(user=operator, name="tests")

    response = Client(HTTP_AUTHORIZATION=f"Bearer {token}").post(
        "/api/v1/tasks", {"agent": "refund", "goal": "Refund"}, content_type="application/json"
    )

    assert response.status_code == 403
    assert "may not start tasks" in response.json()["detail"]
    assert not Task.objects.exists()


def test_the_demo_operator_holds_the_task_starter_role(groups, settings):
    call_command("seed_demo", verbosity=0)
    from django.contrib.auth import get_user_model

    demo = get_user_model().objects.get(username="operator")

    assert demo.has_perm("agentops.start_task") and demo.has_perm("reviews.decide_gate")
    assert not get_user_model().objects.get(username="auditor").has_perm("agentops.start_task")


def test_the_demo_users_have_example_addresses_so_notices_reach_them(groups, settings):
    call_command("seed_demo", verbosity=0)
    from django.contrib.auth import get_user_model

    users = get_user_model().objects.filter(
        username__in=["admin", "operator", "auditor", "policyadmin"]
    )
    assert sorted(user.email for user in users) == [
        "admin@example.com",
        "auditor@example.com",
        "operator@example.com",
        "policyadmin@example.com",
    ]
