"""Scenarios in which people act (`demo_scenario four-eyes`, `restart`, `fork`): the task runs on
real workers against the simulated services, and the people decide over real HTTP, through the
product's JSON API (gunicorn), each with their own token, so their roles, the separation of
duties and the decision log apply as they do for anyone.

The people and groups are made here if missing (a development database): `ada` starts tasks,
`olga` is an operator, `fiona` an operator and a finance lead. Their tokens are made for the run
and revoked at its end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from django.contrib.auth.models import Group, User

from agentops.dev.devstack import Stack, free_port, wait_until_answers
from agentops.models import ApiToken, Task
from agentops.services import task_create
from agentops.tokens import api_token_create, api_token_revoke
from policies.defaults import DEFAULT_RULES
from policies.models import Policy
from policies.selectors import policy_version_active
from policies.services import policy_create, policy_draft_create, policy_publish, policy_rule_add

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


@contextmanager
def people() -> Iterator[dict[str, Person]]:
    """`ada` (task starter), `olga` (operator), `fiona` (operator, finance lead), each with a
    token for this run; the tokens are revoked afterwards."""
    users = {
        "ada": _person("ada", "task starters"),
        "olga": _person("olga", "operators"),
        "fiona": _person("fiona", "operators", FINANCE_LEADS),
    }
    made: list[tuple[ApiToken, User]] = []
    cast: dict[str, Person] = {}
    for name, user in users.items():
        row, token = api_token_create(user=user, name="demo scenario")
        made.append((row, user))
        cast[name] = Person(user=user, token=token)
    try:
        yield cast
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
