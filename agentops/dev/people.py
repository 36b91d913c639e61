"""The people of the demo scenarios: people who act on a task through the product's JSON API
(`/api/v1/`), as a script or a chat bridge would, so the scenario's decisions take the same path
as anyone's: the token's role, the service's checks, the separation of duties and one entry in
the decision log; every request has a deadline.

Each person is a `Person` (a user and a token made for the run, revoked at its end, by
`people()`) calling the `Api` of the web process `web()` starts. The scenarios in which several
people act (`four-eyes`, `restart`, `fork`) use the default cast: `ada` starts tasks, `olga` is an
operator, `fiona` an operator and a finance lead (made if missing, in a development database);
`person_act` is one person doing a scenario's `then` (`grant-scope`, `ask-human`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from django.contrib.auth.models import Group, User
from django.core.management.base import CommandError

from agentops.dev.devstack import Stack, free_port, wait_until_answers
from agentops.engine import task_create
from agentops.engine.questions import QUESTION
from agentops.engine.scopes import missing_scope_of
from agentops.models import ApiToken, Gate, Task
from agentops.permissions import SCOPE_GRANTERS
from agentops.states import GateStatus
from agentops.tokens import api_token_create, api_token_revoke
from policies.defaults import DEFAULT_RULES
from policies.models import Policy
from policies.selectors import policy_version_active
from policies.services import policy_create, policy_draft_create, policy_publish, policy_rule_add

if TYPE_CHECKING:
    from agentops.dev.scenarios import Scenario

FOUR_EYES_POLICY = "four-eyes"
FINANCE_LEADS = "finance leads"
HTTP_SECONDS = 30.0

# Wait for a task to reach one of the statuses: (task id, statuses, seconds) -> the task.
Wait = Callable[[int, Collection[str], float], Task]


@dataclass
class Person:
    user: User
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@dataclass
class Api:
    """The product's JSON API at `base`, as one of the people."""

    base: str

    def call(self, person: Person, method: str, path: str, body: Any = None) -> httpx.Response:
        return httpx.request(
            method,
            f"{self.base}/api/v1{path}",
            json=body,
            headers=person.headers,
            timeout=HTTP_SECONDS,
        )


def _person(username: str, *groups: str) -> User:
    user, _ = User.objects.get_or_create(
        username=username, defaults={"email": f"{username}@example.com"}
    )
    if not user.email:
        User.objects.filter(pk=user.pk).update(email=f"{username}@example.com")
    for name in groups:
        group, _ = Group.objects.get_or_create(name=name)
        user.groups.add(group)
    return user


# The people of the scenarios in which several act: username -> their groups.
CAST: dict[str, tuple[str, ...]] = {
    "ada": ("task starters",),
    "olga": ("operators",),
    "fiona": ("operators", FINANCE_LEADS),
}


@contextmanager
def people(
    cast: Mapping[str, tuple[str, ...]] = CAST,
) -> Iterator[dict[str, Person]]:
    """The people of `cast` (by default `ada`, task starter; `olga`, operator; `fiona`,
    operator and finance lead), made if missing, each with a token for this run; the tokens are
    revoked afterwards."""
    users = {name: _person(name, *groups) for name, groups in cast.items()}
    made: list[tuple[ApiToken, User]] = []
    persons: dict[str, Person] = {}
    for name, user in users.items():
        row, token = api_token_create(user=user, name="demo scenario")
        made.append((row, user))
        persons[name] = Person(user=user, token=token)
    try:
        yield persons
    finally:
        for row, user in made:
            api_token_revoke(token_id=row.pk, user=user)


@contextmanager
def web(stack: Stack) -> Iterator[Api]:
    """The web process (gunicorn) on a free port, for the people's API calls."""
    port = free_port()
    child = stack.spawn_web(port)
    wait_until_answers(f"http://127.0.0.1:{port}/healthz", child)
    yield Api(base=f"http://127.0.0.1:{port}")


def person_act(stack: Stack, scenario: Scenario, task: Task) -> dict[str, Any]:
    """Start the web process and have the scenario's person (`scenario-granter`, a scope
    granter, or `scenario-operator`) do `scenario.then` to the stopped or waiting task through
    the API; returns the API's answer, or CommandError saying why not."""
    groups: tuple[str, ...]
    if scenario.then == "grant":
        scope = missing_scope_of(task.failure)
        if scope is None:
            raise CommandError(f"task {task.pk} did not stop for a missing scope: {task.failure}")
        # A granter acts on tasks they may see (the API's tasks_visible_to): an operator too.
        who, groups = "scenario-granter", ("operators", SCOPE_GRANTERS)
        path, body = f"/tasks/{task.pk}/grants", {"scope": scope, **scenario.person}
    elif scenario.then == "answer":
        gate = Gate.objects.get(task=task, status=GateStatus.OPEN, approval_kind=QUESTION)
        who, groups = "scenario-operator", ("operators",)
        path = f"/questions/{gate.pk}/answer"
        body = {"seen_digest": gate.args_digest, **scenario.person}
    else:
        raise CommandError(f"scenario {scenario.name}: no person acts on {scenario.then!r}")
    try:
        with people({who: groups}) as cast, web(stack) as api:
            response = api.call(cast[who], "POST", path, body)
    except RuntimeError as error:  # the web process did not come up
        raise CommandError(str(error)) from None
    if response.status_code != 200:
        raise CommandError(
            f"{who}: POST {path} answered {response.status_code}: {response.text[:300]}"
        )
    answer: dict[str, Any] = response.json()
    return answer


def four_eyes_policy_ensure(*, author: User) -> str:
    """The `four-eyes` policy: the shipped rules, with large payments (above 100) approved by two
    different people, one of them a finance lead. Published once; later runs reuse it."""
    if policy_version_active(FOUR_EYES_POLICY) is not None:
        return FOUR_EYES_POLICY
    policy = Policy.objects.filter(name=FOUR_EYES_POLICY).first() or policy_create(
        name=FOUR_EYES_POLICY,
        description="Large payments need two approvers (four eyes), one a finance lead.",
        author=author,
    )
    draft = policy_draft_create(policy=policy, author=author)
    for position, fields in enumerate(DEFAULT_RULES):
        extra: dict[str, Any] = {}
        if fields["name"] == "large payment":
            extra = {"approvals_required": 2, "second_approver_group": FINANCE_LEADS}
        policy_rule_add(draft=draft, author=author, fields={**fields, **extra}, position=position)
    policy_publish(draft=draft, author=author, change_note="Four eyes on large payments.")
    return FOUR_EYES_POLICY


def wait_for(check: Callable[[], Any], *, seconds: float, what: str) -> Any:
    """Poll `check` until it returns something truthy; RuntimeError naming `what` otherwise."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not happen within {seconds:g} s")


def refund_task(*, starter: User, order_id: str, policy: str = "default") -> Task:
    return task_create(
        agent="refund",
        goal=f"Refund order {order_id} (damaged)",
        input={"order_id": order_id, "reason": "damaged"},
        created_by=starter,
        policy=policy,
    )
