"""Scope grants as people's decisions: the service (who may grant, one decision per grant, the
step continues), the recovery panel and its POST (roles, CSRF, a double-submitted form), the task
page's grants with revoke, the API, and any text a person gives rendered escaped."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentops.engine import task_create
from agentops.models import ScopeGrant, Task, ToolCall
from agentops.states import LedgerStatus, TaskStatus
from agentops.tokens import api_token_create
from reviews.models import Claim, Decision
from reviews.services import NotAllowed, ReviewError, scope_grant_apply, scope_grant_revoke_apply
from reviews.states import VIA_BROWSER
from tests.builders import run_until_parked_or_done
from tests.markup import markup, plain
from tests.reviews.builders import client_for

pytestmark = pytest.mark.django_db

SCOPE = "payments:credit"


def stopped_goodwill(*, created_by: Any = None, order_id: str = "A1010") -> Task:
    task = task_create(
        agent="goodwill",
        goal=f"Credit order {order_id}",
        input={"order_id": order_id, "amount": 10},
        created_by=created_by,
    )
    task = run_until_parked_or_done(task)
    assert task.status == TaskStatus.NEEDS_ATTENTION
    return task


def grant_post(client: Any, task: Task, **overrides: Any) -> Any:
    body = {"scope": SCOPE, "to": "task", "minutes": "15", "reason": "credential predates it"}
    return client.post(reverse("reviews:scope_grant", args=[task.pk]), {**body, **overrides})


# -- the service ---------------------------------------------------------------------------------


def test_a_grant_is_one_decision_and_the_task_finishes_under_it(sim, redis_clean, granter):
    task = stopped_goodwill()

    grant = scope_grant_apply(
        task_id=task.pk,
        scope=SCOPE,
        minutes=60,
        to_agent=False,
        actor=granter,
        reason="credential predates the tool",
        via=VIA_BROWSER,
    )
    finished = run_until_parked_or_done(Task.objects.get(pk=task.pk))

    (decision,) = Decision.objects.filter(task_id_ref=task.pk)
    assert decision.action == "reviews.scope.granted"
    assert decision.actor_label == "grace" and decision.channel == "browser"
    assert decision.reason == "credential predates the tool"
    assert decision.detail["scope"] == SCOPE and decision.detail["grant"] == grant.pk
    assert decision.detail["to"] == "task" and decision.detail["then"] == "retry"
    assert finished.status == TaskStatus.SUCCEEDED
    assert ToolCall.objects.filter(task=task, status=LedgerStatus.SUCCEEDED).count() == 4


def test_who_may_grant_is_checked_by_the_service(
    sim, redis_clean, operator, groups, django_user_model
):
    starter_granter = django_user_model.objects.create_user("sam")
    starter_granter.groups.add(groups["scope granters"], groups["operators"])
    task = stopped_goodwill(created_by=starter_granter)

    for person, refusal in [
        (operator, "only scope granters"),
        (starter_granter, "you started this task"),
    ]:
        with pytest.raises(NotAllowed, match=refusal):
            scope_grant_apply(
                task_id=task.pk,
                scope=SCOPE,
                minutes=15,
                to_agent=False,
                actor=person,
                reason="x",
            )
    assert ScopeGrant.objects.count() == 0 and Decision.objects.count() == 0
    assert Task.objects.get(pk=task.pk).status == TaskStatus.NEEDS_ATTENTION


def test_a_claim_held_by_someone_else_must_be_taken_over(sim, redis_clean, granter, operator):
    task = stopped_goodwill()
    Claim.objects.create(task=task, user=operator)

    with pytest.raises(ReviewError, match="take it over"):
        scope_grant_apply(
            task_id=task.pk, scope=SCOPE, minutes=15, to_agent=False, actor=granter, reason="x"
        )
    scope_grant_apply(
        task_id=task.pk,
        scope=SCOPE,
        minutes=15,
        to_agent=False,
        actor=granter,
        reason="x",
        take_over=True,
    )

    actions = list(Decision.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["reviews.claim.taken_over", "reviews.scope.granted"]


def test_a_revocation_is_a_decision_and_needs_a_reason(sim, redis_clean, granter):
    task = stopped_goodwill()
    grant = scope_grant_apply(
        task_id=task.pk, scope=SCOPE, minutes=15, to_agent=True, actor=granter, reason="x"
    )

    with pytest.raises(ReviewError, match="say why"):
        scope_grant_revoke_apply(grant_id=grant.pk, actor=granter, reason=" ")
    scope_grant_revoke_apply(grant_id=grant.pk, actor=granter, reason="reissued credential")

    revoked = Decision.objects.get(action="reviews.scope.revoked")
    assert revoked.reason == "reissued credential" and revoked.task_id_ref is None
    assert "revoked from agent goodwill" in revoked.subject
    assert ScopeGrant.objects.get(pk=grant.pk).revoked_by_label == "grace"


# -- the pages -----------------------------------------------------------------------------------


def test_the_recovery_panel_recommends_the_grant_and_offers_its_form_to_granters_only(
    sim, redis_clean, granter, operator, auditor
):
    task = stopped_goodwill()
    url = reverse("reviews:recover", args=[task.pk])

    page = client_for(granter).get(url).content.decode()
    operator_page = client_for(operator).get(url).content.decode()
    auditor_page = client_for(auditor).get(url).content.decode()

    assert (
        "<strong>Grant</strong>" in page
        and 'advisor rule <span translate="no">missing-scope</span>' in page
    )
    assert '<code id="grant-scope" translate="no">payments:credit</code>' in page
    assert 'id="scope-grant-form"' in page and 'name="csrfmiddlewaretoken"' in page
    assert re.findall(r'name="action" value="(\w+)"', page) == ["retry", "skip", "abort"]
    for other in (operator_page, auditor_page):
        assert '<code id="grant-scope" translate="no">payments:credit</code>' in other
        assert 'id="scope-grant-form"' not in other
    assert "Only scope granters may grant or revoke scopes." in operator_page
    # Whom to ask, on the option and under the recommendation.
    assert (
        operator_page.count(
            'Ask one of the scope granters to grant it: <strong translate="no">grace</strong>'
        )
        == 2
    )
    # One reason per form: the shared one says which choices it goes with.
    assert "your choice of retry, skip or abort. The grant asks for its own reason." in page
    assert page.count(">Why grant it</label>") == 1


def test_granting_from_the_panel_redirects_with_a_message_and_a_second_post_changes_nothing(
    sim, redis_clean, granter
):
    task = stopped_goodwill()
    client = client_for(granter)

    first = grant_post(client, task)
    page = client.get(first["Location"]).content.decode()
    second = grant_post(client, task)

    assert first.status_code == 302
    assert first["Location"] == reverse("agentops:task_detail", args=[task.pk])
    assert second.status_code == 409
    assert "there is nothing to grant" in second.content.decode()
    assert ScopeGrant.objects.count() == 1
    assert Decision.objects.filter(action="reviews.scope.granted").count() == 1
    assert '<span translate="no">payments:credit</span> granted to this task until' in page
    assert 'id="scope-grants"' in page and "in force" in page


def test_the_grant_post_refuses_without_the_role_without_csrf_and_with_bad_input(
    sim, redis_clean, granter, operator
):
    task = stopped_goodwill()

    assert grant_post(client_for(operator), task).status_code == 403
    csrf = client_for(granter, enforce_csrf_checks=True)
    assert grant_post(csrf, task).status_code == 403
    assert (
        client_for(granter).get(reverse("reviews:scope_grant", args=[task.pk])).status_code == 405
    )
    no_reason = grant_post(client_for(granter), task, reason="   ")
    assert (
        no_reason.status_code == 400
        and "Say why the scope is granted." in no_reason.content.decode()
    )
    too_long = grant_post(client_for(granter), task, minutes="20000")
    assert too_long.status_code == 400
    other_scope = grant_post(client_for(granter), task, scope="payments:refund")
    assert other_scope.status_code == 400
    assert "not payments:refund" in other_scope.content.decode()
    assert ScopeGrant.objects.count() == 0 and Decision.objects.count() == 0


def test_a_grant_is_revoked_from_the_task_page(sim, redis_clean, granter, operator):
    task = stopped_goodwill()
    grant = scope_grant_apply(
        task_id=task.pk, scope=SCOPE, minutes=15, to_agent=False, actor=granter, reason="x"
    )
    url = reverse("reviews:scope_revoke", args=[grant.pk])

    assert client_for(operator).post(url, {"reason": "no"}).status_code == 403
    empty = client_for(granter).post(url, {"reason": ""})
    done = client_for(granter).post(url, {"reason": "done with it"})
    again = client_for(granter).post(url, {"reason": "again"}, follow=True)

    assert empty.status_code == done.status_code == 302
    assert "already revoked by grace" in again.content.decode()
    assert Decision.objects.filter(action="reviews.scope.revoked").count() == 1
    page = client_for(operator).get(reverse("agentops:task_detail", args=[task.pk]))
    assert 'revoked by <span translate="no">grace</span>' in page.content.decode()
    assert f'id="revoke-{grant.pk}"' not in page.content.decode()


# -- the API -------------------------------------------------------------------------------------


def api_post(user: User, path: str, body: dict[str, Any]) -> Any:
    _, token = api_token_create(user=user, name="tests")
    from django.test import Client

    return Client(HTTP_AUTHORIZATION=f"Bearer {token}").post(
        f"/api/v1{path}", body, content_type="application/json"
    )


def test_the_api_grants_lists_and_revokes_with_the_same_checks(sim, redis_clean, granter, operator):
    task = stopped_goodwill()
    body = {"scope": SCOPE, "minutes": 30, "to": "task", "reason": "via the API"}

    assert api_post(operator, f"/tasks/{task.pk}/grants", body).status_code == 403
    bad = api_post(granter, f"/tasks/{task.pk}/grants", {**body, "scope": "hotels:book"})
    granted = api_post(granter, f"/tasks/{task.pk}/grants", body)
    twice = api_post(granter, f"/tasks/{task.pk}/grants", body)

    assert bad.status_code == 400 and "not hotels:book" in bad.json()["detail"]
    assert granted.status_code == 200, granted.content
    assert granted.json()["scope"] == SCOPE and granted.json()["in_force"] is True
    assert granted.json()["granted_by"] == "grace" and granted.json()["task_id"] == task.pk
    assert twice.status_code == 409
    (decision,) = Decision.objects.filter(action="reviews.scope.granted")
    assert decision.channel == "api" and decision.api_token_id is not None
    _, token = api_token_create(user=operator, name="reader")
    from django.test import Client

    listed = Client(HTTP_AUTHORIZATION=f"Bearer {token}").get(f"/api/v1/tasks/{task.pk}/grants")
    assert [g["id"] for g in listed.json()] == [granted.json()["id"]]
    revoked = api_post(granter, f"/grants/{granted.json()['id']}/revoke", {"reason": "done"})
    assert revoked.status_code == 200 and revoked.json()["in_force"] is False
    assert (
        api_post(granter, f"/grants/{granted.json()['id']}/revoke", {"reason": "x"}).status_code
        == 400
    )
    assert api_post(granter, "/grants/999999/revoke", {"reason": "x"}).status_code == 404


def test_the_api_finds_only_tasks_and_grants_the_caller_may_see(
    sim, redis_clean, granter, groups, django_user_model
):
    """A granter who may not read tasks (no operator or auditor role) sees only the tasks they
    started: another's task and its grants answer 404, as GET /tasks/{id} does."""
    blind = django_user_model.objects.create_user("gina")
    blind.groups.add(groups["scope granters"])
    task = stopped_goodwill()
    body = {"scope": SCOPE, "minutes": 30, "to": "task", "reason": "via the API"}

    hidden = api_post(blind, f"/tasks/{task.pk}/grants", body)
    grant = api_post(granter, f"/tasks/{task.pk}/grants", body).json()
    hidden_revoke = api_post(blind, f"/grants/{grant['id']}/revoke", {"reason": "x"})

    assert hidden.status_code == 404 and hidden.json()["detail"] == f"no task {task.pk}"
    assert hidden_revoke.status_code == 404
    assert ScopeGrant.objects.get(pk=grant["id"]).revoked_at is None
    assert list(Decision.objects.values_list("action", flat=True)) == ["reviews.scope.granted"]
    # An agent's grant belongs to no task: a granter may revoke it.
    other = stopped_goodwill(order_id="A1011")
    agent_grant = api_post(granter, f"/tasks/{other.pk}/grants", {**body, "to": "agent"}).json()
    revoked = api_post(blind, f"/grants/{agent_grant['id']}/revoke", {"reason": "reissued"})
    assert revoked.status_code == 200 and revoked.json()["in_force"] is False


def test_the_task_page_says_an_agent_grant_is_not_for_a_task_its_granter_started(
    sim, redis_clean, granter, operator
):
    scope_grant_apply(
        task_id=stopped_goodwill().pk,
        scope=SCOPE,
        minutes=60,
        to_agent=True,
        actor=granter,
        reason="x",
    )
    own = task_create(
        agent="goodwill",
        goal="Credit order A1012",
        input={"order_id": "A1012", "amount": 10},
        created_by=granter,
    )
    others = task_create(
        agent="goodwill",
        goal="Credit order A1013",
        input={"order_id": "A1013", "amount": 10},
        created_by=operator,
    )

    client = client_for(operator)
    mine = client.get(reverse("agentops:task_detail", args=[own.pk])).content.decode()
    theirs = client.get(reverse("agentops:task_detail", args=[others.pk])).content.decode()
    assert mine.count("not for this task: its granter started it") == 1
    assert (
        "not for this task" not in theirs and 'agent <span translate="no">goodwill</span>' in theirs
    )


# -- any text a person gives ---------------------------------------------------------------------

# Any text PostgreSQL stores (no NUL), as a person may type it.
texts = st.text(
    st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=300,
).filter(lambda t: t.strip())


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reason=texts, revoke_reason=texts)
def test_a_grants_reasons_render_escaped_on_the_task_page(operator, reason, revoke_reason):
    task = task_create(agent="goodwill", goal="Credit", input={"order_id": "A1010"})
    now = timezone.now()
    ScopeGrant.objects.create(
        task=task,
        agent="goodwill",
        scope=SCOPE,
        reason=reason,
        granted_by_label="grace",
        created_at=now,
        expires_at=now + timedelta(minutes=5),
        revoked_at=now,
        revoked_by_label="otto",
        revoke_reason=revoke_reason,
    )

    client = client_for(operator)
    url = reverse("agentops:task_detail", args=[task.pk])
    response = client.get(url)

    page = response.content.decode()
    assert response.status_code == 200
    section = page.split('id="scope-grants"')[1]
    assert escape(reason) in section and escape(revoke_reason) in section
    # No markup of theirs reaches the page: it is the page a plain text of the same shape gives.
    ScopeGrant.objects.filter(task=task).update(
        reason=plain(reason), revoke_reason=plain(revoke_reason)
    )
    assert markup(page) == markup(client.get(url).content.decode())
