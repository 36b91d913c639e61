"""The people of the demo scenarios: a person who acts on a task through the product's JSON API
(`/api/v1/`), as a script or a chat bridge would, so the scenario's decision takes the same
path as anyone's: the token's role, the service's checks and one entry in the decision log.

Each person is a user in the groups their role needs, with a fresh API token; every request has a
deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from django.contrib.auth.models import Group, User
from django.core.management.base import CommandError

from agentops.dev.devstack import Stack, free_port, wait_until_answers
from agentops.engine.questions import QUESTION
from agentops.engine.scopes import missing_scope_of
from agentops.models import Gate, Task
from agentops.permissions import SCOPE_GRANTERS
from agentops.states import GateStatus
from agentops.tokens import api_token_create

if TYPE_CHECKING:
    from agentops.dev.scenarios import Scenario

REQUEST_SECONDS = 10.0


@dataclass(frozen=True)
class ApiPerson:
    username: str
    token: str
    base_url: str  # the web process, e.g. http://127.0.0.1:8123

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body` to `/api/v1/<path>`; the answer's JSON, or CommandError saying why not."""
        response = httpx.post(
            f"{self.base_url}/api/v1/{path}",
            json=body,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=REQUEST_SECONDS,
        )
        if response.status_code != 200:
            raise CommandError(
                f"{self.username}: POST {path} answered {response.status_code}: "
                f"{response.text[:300]}"
            )
        answer: dict[str, Any] = response.json()
        return answer


def person_with_token(*, username: str, groups: tuple[str, ...], base_url: str) -> ApiPerson:
    """The scenario's person (created once, put in `groups`) with a new API token."""
    user, _ = User.objects.get_or_create(username=username)
    for name in groups:
        user.groups.add(Group.objects.get_or_create(name=name)[0])
    _, token = api_token_create(user=user, name="demo scenario")
    return ApiPerson(username=username, token=token, base_url=base_url)


def person_act(stack: Stack, scenario: Scenario, task: Task) -> dict[str, Any]:
    """Start the web process and have the scenario's person do `scenario.then` to the stopped or
    waiting task through the API; returns the API's answer."""
    port = free_port()
    web = stack.spawn_web(port)
    try:
        wait_until_answers(f"http://127.0.0.1:{port}/healthz", web)
    except RuntimeError as error:
        raise CommandError(str(error)) from None
    base = f"http://127.0.0.1:{port}"
    if scenario.then == "grant":
        scope = missing_scope_of(task.failure)
        if scope is None:
            raise CommandError(f"task {task.pk} did not stop for a missing scope: {task.failure}")
        granter = person_with_token(
            username="scenario-granter", groups=(SCOPE_GRANTERS,), base_url=base
        )
        return granter.post(f"tasks/{task.pk}/grants", {"scope": scope, **scenario.person})
    if scenario.then == "answer":
        gate = Gate.objects.get(task=task, status=GateStatus.OPEN, approval_kind=QUESTION)
        operator = person_with_token(
            username="scenario-operator", groups=("operators",), base_url=base
        )
        return operator.post(
            f"questions/{gate.pk}/answer", {"seen_digest": gate.args_digest, **scenario.person}
        )
    raise CommandError(f"scenario {scenario.name}: no person acts on {scenario.then!r}")
