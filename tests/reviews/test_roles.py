"""Every URL of the project against every role, from one explicit access table.

The URL list is walked from the resolver (admin/ and static files aside), so a new URL without an
entry in ACCESS fails `test_every_url_has_an_entry_in_the_access_table`. For each entry and role
the test checks what GET answers (the page, a login redirect, 403, or 405 for POST-only views),
that a POST by a role without access is refused without changing anything, and that every view
that changes state refuses a POST without a CSRF token.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from agentops.models import AuditItem, Gate, Task, ToolCall
from agentops.tokens import api_token_create
from policies.models import Policy, PolicyChange, PolicyRule, PolicyVersion
from policies.selectors import policy_version_active
from policies.services import policy_draft_create
from reviews.email_actions import email_action_token
from reviews.models import Claim, Decision, SlackIdentity
from reviews.roles import group_names
from reviews.services import rubric_create, rubric_queue_attach
from reviews.services.slack import slack_link_token
from tests.reviews.builders import (
    asked_question,
    client_for,
    gated_refund,
    open_gate,
    stopped_trip,
)
from tests.reviews.test_rubrics import ITEMS as RUBRIC_ITEMS

ANONYMOUS, OPERATOR, AUDITOR, POLICY_ADMIN = "anonymous", "operator", "auditor", "policy admin"
TASK_STARTER = "task starter"
SIGNED_IN = frozenset({OPERATOR, AUDITOR, POLICY_ADMIN, TASK_STARTER})
# The decision log and the dashboard are for the review roles; starting tasks is not one.
REVIEW_ROLES = frozenset({OPERATOR, AUDITOR, POLICY_ADMIN})
REVIEWERS = frozenset({OPERATOR, AUDITOR})
ADMINS = frozenset({POLICY_ADMIN})
# page: GET shows it. form: GET shows a form, POST changes state. post: POST only (GET is 405).
# token: a machine's URL; no session opens it, only a bearer token (tested in its own module).
PAGE, FORM, POST, TOKEN = "page", "form", "post", "token"
READ_ONLY = (PAGE, TOKEN)


@dataclass
class World:
    task: Task
    gate: Gate
    stopped: Task
    call: ToolCall
    item: AuditItem
    policy: Policy
    version: PolicyVersion
    draft: PolicyVersion
    rule: PolicyRule
    token: int
    slack_link: str
    email_action: str
    question: Gate


@dataclass(frozen=True)
class Access:
    kind: str
    allowed: frozenset[str]
    # Anonymous users may use it too (the login and logout views).
    public: bool = False
    kwargs: Callable[[World], dict[str, Any]] = field(default=lambda w: {})
    # What a signed-in user outside `allowed` gets: 403, or 404 for an object outside their reach.
    denied: int = 403


def _artifact(w: World) -> dict[str, int]:
    from agentops.engine.jsonvalues import ARTIFACT_KEY, offloaded

    # Data shaped like a pointer is always stored as an artifact: a small one will do.
    pointer = offloaded({ARTIFACT_KEY: 0, "note": "x"}, path="test", task_id=w.task.pk)
    return {"artifact_id": pointer[ARTIFACT_KEY]}


def _task(w: World) -> dict[str, int]:
    return {"task_id": w.task.pk}


def _stopped(w: World) -> dict[str, int]:
    return {"task_id": w.stopped.pk}


def _gate(w: World) -> dict[str, int]:
    return {"gate_id": w.gate.pk}


def _question(w: World) -> dict[str, int]:
    return {"gate_id": w.question.pk}


def _policy(w: World) -> dict[str, int]:
    return {"policy_id": w.policy.pk}


def _version(w: World) -> dict[str, int]:
    return {"version_id": w.version.pk}


def _draft(w: World) -> dict[str, int]:
    return {"version_id": w.draft.pk}


def _rule(w: World) -> dict[str, int]:
    return {"version_id": w.draft.pk, "rule_id": w.rule.pk}


ACCESS: dict[str, Access] = {
    "login": Access(FORM, SIGNED_IN, public=True),
    "logout": Access(POST, SIGNED_IN, public=True),
    # Single sign-on's way to the provider and back: 404 while it is off, as here
    # (tests/agentops/test_oidc.py signs in through a real provider).
    "oidc_authentication_init": Access(TOKEN, frozenset(), public=True, denied=404),
    "oidc_authentication_callback": Access(TOKEN, frozenset(), public=True, denied=404),
    # Every signed-in user may list the tasks they may see; only task starters start one.
    # Another person's task is readable by reviewers (and its starter), and answers 404 to
    # anyone else.
    "agentops:task_list": Access(PAGE, SIGNED_IN),
    "agentops:task_new": Access(FORM, frozenset({TASK_STARTER})),
    "agentops:task_detail": Access(PAGE, REVIEWERS, kwargs=_task, denied=404),
    # An artifact opens for whoever may read its task.
    "agentops:artifact": Access(PAGE, REVIEWERS, kwargs=lambda w: _artifact(w), denied=404),
    # Prometheus: without a configured token the endpoint does not exist, whoever asks.
    "agentops:metrics": Access(TOKEN, frozenset(), public=True, denied=404),
    # The policy editor is for policy admins only.
    "policies:index": Access(PAGE, ADMINS),
    "policies:policy_detail": Access(PAGE, ADMINS, kwargs=_policy),
    "policies:draft_create": Access(POST, ADMINS, kwargs=_policy),
    "policies:version_diff": Access(PAGE, ADMINS, kwargs=_policy),
    "policies:version_detail": Access(PAGE, ADMINS, kwargs=_version),
    "policies:rule_add": Access(POST, ADMINS, kwargs=_draft),
    "policies:rule_edit": Access(FORM, ADMINS, kwargs=_rule),
    "policies:rule_delete": Access(POST, ADMINS, kwargs=_rule),
    "policies:rule_move": Access(POST, ADMINS, kwargs=_rule),
    "policies:version_settings": Access(POST, ADMINS, kwargs=_draft),
    "policies:version_publish": Access(POST, ADMINS, kwargs=_draft),
    "policies:version_discard": Access(POST, ADMINS, kwargs=_draft),
    "policies:version_revert": Access(POST, ADMINS, kwargs=_version),
    "policies:version_dry_run": Access(PAGE, ADMINS, kwargs=_draft),
    # Review workspace: operators and auditors read; operators decide; auditors review.
    "reviews:inbox": Access(PAGE, REVIEWERS),
    "reviews:gates_bulk_approve": Access(POST, frozenset({OPERATOR})),
    "reviews:gate": Access(PAGE, REVIEWERS, kwargs=_gate),
    "reviews:gate_approve": Access(POST, frozenset({OPERATOR}), kwargs=_gate),
    "reviews:gate_reject": Access(POST, frozenset({OPERATOR}), kwargs=_gate),
    "reviews:gate_edit": Access(POST, frozenset({OPERATOR}), kwargs=_gate),
    "reviews:gate_reject_stop": Access(POST, frozenset({OPERATOR}), kwargs=_gate),
    "reviews:claim": Access(POST, frozenset({OPERATOR}), kwargs=_task),
    "reviews:release": Access(POST, frozenset({OPERATOR}), kwargs=_task),
    "reviews:assign": Access(POST, frozenset({OPERATOR}), kwargs=_task),
    # Pause, resume, cancel and modify a task: operators only (auditors read).
    "reviews:task_pause": Access(POST, frozenset({OPERATOR}), kwargs=_task),
    "reviews:task_resume": Access(POST, frozenset({OPERATOR}), kwargs=_task),
    "reviews:task_cancel": Access(POST, frozenset({OPERATOR}), kwargs=_task),
    "reviews:task_modify": Access(POST, frozenset({OPERATOR}), kwargs=_task),
    "reviews:recover": Access(PAGE, REVIEWERS, kwargs=_stopped),
    # An agent's question: reviewers read it, operators answer it.
    "reviews:question": Access(PAGE, REVIEWERS, kwargs=_question),
    "reviews:question_answer": Access(POST, frozenset({OPERATOR}), kwargs=_question),
    # Granting and revoking scopes is the scope granters' (none of these roles hold it).
    "reviews:scope_grant": Access(POST, frozenset(), kwargs=_stopped),
    # Operators repair a stopped task's plan, start a task again or fork it (the starter too,
    # when an operator: no separation of duties, as for interventions).
    "reviews:plan_repair": Access(POST, frozenset({OPERATOR}), kwargs=_stopped),
    "reviews:task_restart": Access(POST, frozenset({OPERATOR}), kwargs=_stopped),
    "reviews:task_fork": Access(POST, frozenset({OPERATOR}), kwargs=_stopped),
    "reviews:scope_revoke": Access(POST, frozenset(), kwargs=lambda w: {"grant_id": 1}),
    "reviews:intervention": Access(POST, frozenset({OPERATOR}), kwargs=_stopped),
    "reviews:call_confirm": Access(
        POST,
        frozenset({OPERATOR}),
        kwargs=lambda w: {"task_id": w.stopped.pk, "call_id": w.call.pk},
    ),
    "reviews:audit": Access(PAGE, REVIEWERS),
    "reviews:audit_csv": Access(PAGE, REVIEWERS),
    "reviews:audit_dataset": Access(PAGE, REVIEWERS),
    "reviews:audit_review": Access(
        POST, frozenset({AUDITOR}), kwargs=lambda w: {"item_id": w.item.pk}
    ),
    "reviews:audit_bulk_review": Access(POST, frozenset({AUDITOR})),
    "reviews:audit_batch_take": Access(POST, frozenset({AUDITOR})),
    "reviews:audit_batch_release": Access(POST, frozenset({AUDITOR})),
    # Rubric reviews (the world's audit item is under a rubric); adjudication is for senior
    # auditors, a role none of these clients holds.
    "reviews:audit_rubric": Access(PAGE, REVIEWERS, kwargs=lambda w: {"item_id": w.item.pk}),
    "reviews:audit_rubric_answer": Access(
        POST, frozenset({AUDITOR}), kwargs=lambda w: {"item_id": w.item.pk}
    ),
    "reviews:audit_adjudicate": Access(POST, frozenset(), kwargs=lambda w: {"item_id": w.item.pk}),
    "reviews:adjudication": Access(PAGE, REVIEWERS),
    "reviews:rubrics": Access(PAGE, REVIEW_ROLES),
    "reviews:rubric_create": Access(POST, ADMINS),
    "reviews:rubric_attach": Access(POST, ADMINS),
    "reviews:decisions": Access(PAGE, REVIEW_ROLES),
    "reviews:decisions_csv": Access(PAGE, REVIEW_ROLES),
    # One's own account: language, notification choices and API tokens.
    "reviews:account": Access(FORM, SIGNED_IN),
    "reviews:account_language": Access(POST, SIGNED_IN),
    "reviews:api_token_new": Access(POST, SIGNED_IN),
    "reviews:api_token_revoke": Access(POST, SIGNED_IN, kwargs=lambda w: {"token_id": w.token}),
    # Linking one's Slack account from the link the Slack app sent (GET shows, POST links).
    "reviews:slack_link": Access(FORM, SIGNED_IN, kwargs=lambda w: {"token": w.slack_link}),
    "reviews:slack_unlink": Access(POST, SIGNED_IN),
    # A gate email's action link is the operator's (who was emailed): GET confirms, POST decides;
    # anyone else's answers 403.
    "reviews:email_action": Access(
        FORM, frozenset({OPERATOR}), kwargs=lambda w: {"token": w.email_action}
    ),
    # Slack's interaction endpoint: no session opens it; POST only, verified by Slack's signature
    # (tests/reviews/test_slack.py).
    "reviews:slack_interactions": Access(TOKEN, frozenset(), public=True, denied=405),
    # The oversight dashboard is read by every role; only policy admins open proposed drafts.
    "reviews:dashboard": Access(PAGE, REVIEW_ROLES),
    "reviews:oversight": Access(PAGE, REVIEW_ROLES),
    "reviews:calibration_draft": Access(POST, ADMINS),
    # The fleet's stop button: its own permission, which no role group holds by default.
    "reviews:fleet_stops": Access(FORM, frozenset()),
    "reviews:fleet_resume": Access(POST, frozenset(), kwargs=lambda w: {"stop_id": 1}),
}


def url_patterns(
    patterns: list[Any] | None = None, prefix: str = "", namespace: str = ""
) -> Iterator[tuple[str | None, str]]:
    """(namespaced name, route) of every URL pattern, recursively; admin, static files (the
    favicon is one) and the JSON API (its own table in test_api.py) aside."""
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        route = prefix + str(pattern.pattern)
        if route.startswith(("admin/", "static/", "favicon.ico", "api/")):
            continue
        if isinstance(pattern, URLResolver):
            inner = ":".join(n for n in (namespace, pattern.namespace or "") if n)
            yield from url_patterns(pattern.url_patterns, route, inner)
        elif isinstance(pattern, URLPattern):
            name = f"{namespace}:{pattern.name}" if namespace and pattern.name else pattern.name
            yield name, route


def test_every_url_has_an_entry_in_the_access_table():
    found = dict(url_patterns())
    unnamed = [route for name, route in found.items() if name is None]

    assert not unnamed, f"URL patterns without a name: {unnamed}"
    assert sorted(set(found) - set(ACCESS)) == [], "add these URLs to ACCESS"
    assert sorted(set(ACCESS) - set(found)) == [], "these ACCESS entries match no URL"


def test_the_access_table_walks_includes_and_skips_admin():
    names = {name for name, _ in url_patterns()}

    assert {"reviews:gate", "policies:rule_edit", "agentops:task_detail", "login"} <= names
    assert not any(name and name.startswith("admin:") for name in names)


@pytest.fixture
def world(sim, redis_clean, groups, policy_admin, operator, django_user_model) -> World:
    starter = django_user_model.objects.create_user(username="stan", password="x")
    task = gated_refund(created_by=starter)
    stopped = stopped_trip(created_by=starter)
    policy = Policy.objects.get(name="default")
    draft = policy_draft_create(policy=policy, author=policy_admin)
    item = AuditItem.objects.filter(task=stopped).first()
    rubric = rubric_create(actor=policy_admin, name="World rubric", items=RUBRIC_ITEMS)
    rubric_queue_attach(actor=policy_admin, rubric_id=rubric.pk, agent=item.agent)
    return World(
        task=task,
        gate=open_gate(task),
        stopped=stopped,
        call=ToolCall.objects.filter(task=stopped).order_by("id").first(),
        item=item,
        policy=policy,
        version=policy_version_active("default"),
        draft=draft,
        rule=PolicyRule.objects.filter(version=draft).order_by("position").first(),
        token=api_token_create(user=starter, name="stan's")[0].pk,
        slack_link=slack_link_token(team_id="T0ROLES", slack_user_id="U0ROLES"),
        email_action=email_action_token(gate=open_gate(task), user=operator, action="approve"),
        question=asked_question(created_by=starter),
    )


@pytest.fixture
def clients(operator, auditor, policy_admin, task_starter) -> dict[str, Client]:
    return {
        ANONYMOUS: Client(),
        OPERATOR: client_for(operator),
        AUDITOR: client_for(auditor),
        POLICY_ADMIN: client_for(policy_admin),
        TASK_STARTER: client_for(task_starter),
    }


def expected_get(access: Access, role: str) -> int:
    if access.kind == TOKEN:
        return access.denied
    if role == ANONYMOUS and not access.public:
        return 302
    if role != ANONYMOUS and role not in access.allowed:
        return access.denied
    return 405 if access.kind == POST else 200


def state() -> tuple[int, ...]:
    """Counts that any accepted state change would move."""
    return (
        Decision.objects.count(),
        Claim.objects.count(),
        Gate.objects.filter(status="open").count(),
        PolicyVersion.objects.count(),
        PolicyRule.objects.count(),
        PolicyChange.objects.count(),
        Task.objects.count(),
        AuditItem.objects.filter(status="pending").count(),
        SlackIdentity.objects.count(),
    )


@pytest.mark.django_db
def test_each_role_gets_exactly_the_access_the_table_gives(world, clients):
    failures = []
    before = state()
    for name, access in ACCESS.items():
        url = reverse(name, kwargs=access.kwargs(world))
        for role, client in clients.items():
            response = client.get(url)
            expected = expected_get(access, role)
            if response.status_code != expected:
                failures.append(f"GET {url} as {role}: {response.status_code}, not {expected}")
            elif expected == 302 and not response["Location"].startswith(reverse("login")):
                failures.append(f"GET {url} as {role}: redirected to {response['Location']}")
            if access.kind in READ_ONLY or role == ANONYMOUS or role in access.allowed:
                continue
            refused = client.post(url, {})
            if refused.status_code != 403:
                failures.append(f"POST {url} as {role}: {refused.status_code}, not 403")
    for name, access in ACCESS.items():
        if access.kind in READ_ONLY or access.public:
            continue
        response = clients[ANONYMOUS].post(reverse(name, kwargs=access.kwargs(world)), {})
        if response.status_code != 302 or not response["Location"].startswith(reverse("login")):
            failures.append(f"POST {name} as anonymous: {response.status_code}")

    assert not failures, "\n".join(failures)
    assert state() == before


# The refusal's page (templates/403_csrf.html): what happened, without the navigation.
EXPIRED = "<h1>This form has expired</h1>"


@pytest.mark.django_db
def test_every_state_change_needs_a_csrf_token(
    world, operator, auditor, policy_admin, task_starter
):
    users = {
        OPERATOR: operator,
        AUDITOR: auditor,
        POLICY_ADMIN: policy_admin,
        TASK_STARTER: task_starter,
    }
    strict = {role: client_for(user, enforce_csrf_checks=True) for role, user in users.items()}
    strict[ANONYMOUS] = Client(enforce_csrf_checks=True)
    before = state()
    failures = []
    for name, access in ACCESS.items():
        if access.kind in READ_ONLY:
            continue
        url = reverse(name, kwargs=access.kwargs(world))
        for role, client in strict.items():
            # htmx posts carry the same token in a header; without it, the same refusal.
            for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
                response = client.post(url, {"reason": "x", "action": "abort"}, **headers)
                if response.status_code != 403:
                    failures.append(f"POST {url} as {role} {headers}: {response.status_code}")
                elif EXPIRED not in response.content.decode():
                    failures.append(f"POST {url} as {role} {headers}: not the expired-form page")

    assert not failures, "\n".join(failures)
    assert state() == before


@pytest.mark.django_db
def test_a_post_with_the_csrf_header_is_accepted_like_htmx_sends_it(world, operator):
    client = client_for(operator, enforce_csrf_checks=True)
    page = client.get(reverse("reviews:inbox"))
    token = page.context["csrf_token"]

    response = client.post(
        reverse("reviews:claim", args=[world.task.pk]),
        HTTP_HX_REQUEST="true",
        HTTP_X_CSRFTOKEN=str(token),
    )

    assert response.status_code == 200
    assert Claim.objects.get(task=world.task).user == operator


@pytest.mark.django_db
def test_role_checks_and_group_names_share_one_query(operator, django_assert_num_queries):
    user = type(operator).objects.get(pk=operator.pk)
    with django_assert_num_queries(1):
        assert user.has_perm("reviews.decide_gate")
        assert not user.has_perm("reviews.review_audit")
        names = group_names(user)
    assert names == frozenset(operator.groups.values_list("name", flat=True)) != frozenset()
