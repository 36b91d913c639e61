"""The task page and the recovery panel show the task tree and name the child that stopped;
the skip preview names the steps that depend on the skipped one."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agentops.dev.sim.services import fault_set
from agentops.engine import task_create, task_retry
from agentops.models import Task
from agentops.states import TaskStatus
from tests.agentops.test_subtasks import run_family
from tests.builders import run_until_parked_or_done
from tests.reviews.builders import client_for

pytestmark = pytest.mark.django_db


def parent_with_a_stopped_child(created_by) -> tuple[Task, Task]:
    fault_set(service="suppliers", operation="quote", mode="forbidden", count=1)
    parent = run_family(
        task_create(
            agent="procurement",
            goal="Buy bolts",
            input={"item": "bolts", "quantity": 10},
            created_by=created_by,
        )
    )
    assert parent.status == TaskStatus.AWAITING_CHILDREN
    child = Task.objects.get(parent=parent, status=TaskStatus.NEEDS_ATTENTION)
    return parent, child


def test_the_parents_panel_names_the_child_that_stopped_and_links_its_recovery(
    sim, redis_clean, operator, starter
):
    parent, child = parent_with_a_stopped_child(starter)
    client = client_for(operator)

    panel = client.get(reverse("reviews:recover", args=[parent.pk])).content.decode()

    assert (
        f'step 1 waits on child task #{child.pk} (<span translate="no">supplier_quote</span>), '
        "which stopped"
    ) in panel
    assert reverse("reviews:recover", args=[child.pk]) in panel
    assert panel.count("Child <a") == 3

    child_panel = client.get(reverse("reviews:recover", args=[child.pk])).content.decode()
    assert f"in child task #{child.pk} of task #{parent.pk}" in child_panel
    assert "Task tree" in child_panel


def test_the_task_page_shows_the_tree_with_the_states_of_the_children(
    sim, redis_clean, operator, starter
):
    parent, child = parent_with_a_stopped_child(starter)
    client = client_for(operator)

    page = client.get(reverse("agentops:task_detail", args=[parent.pk])).content.decode()
    assert "Task tree" in page
    assert page.count("Succeeded") >= 2 and "Needs attention" in page
    assert f"task #{child.pk}" in page

    task_retry(task_id=child.pk, actor=operator)
    run_family(parent)
    child_page = client.get(reverse("agentops:task_detail", args=[child.pk])).content.decode()
    assert f'Parent <a href="{reverse("agentops:task_detail", args=[parent.pk])}"' in child_page


def test_the_skip_preview_names_the_dependants_that_are_skipped_too(
    sim, redis_clean, operator, starter
):
    fault_set(service="flights", operation="book", mode="forbidden", count=1)
    task = run_until_parked_or_done(
        task_create(agent="trip", goal="Trip to Rome", input={}, created_by=starter)
    )
    assert task.status == TaskStatus.NEEDS_ATTENTION

    from agentops.selectors import task_get_detail

    recovery = task_get_detail(task_id=task.pk, viewer=operator).recovery
    assert recovery is not None
    skip = recovery.previews["skip"]
    assert [s.ordinal for s in skip.skipped] == [1, 3]
    assert [s.ordinal for s in skip.runs] == [2]
    assert "the steps that depend on it, 4 'Send the itinerary'" in skip.summary
