"""`demo_scenario restart` and `demo_scenario fork`: a person starts a task again, or forks one
from a step, through the API (their own token), with real workers.

- restart: a trip stops half done (the hotel refuses once, the flight is booked); olga starts it
  again under the traveller's full name (an edited input), choosing to abort the old task; the
  new task books both and succeeds, and the two link to each other.
- fork: a refund succeeds (lookup, eligibility, tracking, refund, email); olga forks it from step
  5 with an edited input: steps 1 to 4 are the original's results, referenced (no call repeated
  at the simulated services: `effects_repeated == 0`), and the fork sends the email again.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from agentops.dev.people import Api, Person, Wait
from agentops.dev.sim.models import Effect
from agentops.dev.sim.services import fault_reset, fault_set
from agentops.engine import task_create
from agentops.models import Step, Task
from agentops.states import TERMINAL, TaskStatus

SETTLED = {*TERMINAL, TaskStatus.NEEDS_ATTENTION}


def _effects(task_id: int) -> int:
    """Calls a task made at the simulated services (by its keys: `t<task>-s<step id>-...`)."""
    return Effect.objects.filter(request_key__startswith=f"t{task_id}-").count()


def _kinds_of(task_id: int, step_ids: list[int]) -> Q:
    """The (service, operation) pairs those steps of the task made calls of, as a filter."""
    keys = Q(pk__in=[])
    for step_id in step_ids:
        keys |= Q(request_key__startswith=f"t{task_id}-s{step_id}-")
    kinds = Q(pk__in=[])
    for service, operation in set(Effect.objects.filter(keys).values_list("service", "operation")):
        kinds |= Q(service=service, operation=operation)
    return kinds


def _decisions(api: Api, person: Person, task_id: int) -> list[dict[str, Any]]:
    answer = api.call(person, "GET", f"/tasks/{task_id}/decisions")
    answer.raise_for_status()
    return [
        {"action": d["action"], "actor": d["actor"], "detail": d["detail"]} for d in answer.json()
    ]


def run_restart(*, api: Api, cast: dict[str, Person], wait: Wait, timeout: float) -> dict[str, Any]:
    ada, olga = cast["ada"], cast["olga"]
    fault_set(service="hotels", operation="book", mode="forbidden", count=1)
    try:
        old = task_create(
            agent="trip",
            goal="Book a trip to Rome for Ada (the hotel refuses once)",
            input={"traveller": "Ada Lovelace", "destination": "FCO", "date": "2026-12-17"},
            created_by=ada.user,
        )
        old = wait(old.pk, SETTLED, timeout)
        stopped_as = old.status
        body = {
            "ending": "abort",
            "reason": "the hotel refused; book under her full name",
            "input": {**old.input, "traveller": "Augusta Ada King"},
        }
        answer = api.call(olga, "POST", f"/tasks/{old.pk}/restart", body)
        answer.raise_for_status()
        new = wait(answer.json()["id"], TERMINAL, timeout)
    finally:
        fault_reset(service="hotels", operation="book")
    old.refresh_from_db()
    return {
        "task_id": new.pk,
        "task_status": new.status,
        "old_task_id": old.pk,
        "old_stopped_as": stopped_as,
        "old_task_status": old.status,
        "restart_status_code": answer.status_code,
        "linked": {
            "new_origin": new.origin_id,
            "old_again": list(old.again.values_list("pk", flat=True)),
        },
        "input_changed": {"traveller": [old.input.get("traveller"), new.input.get("traveller")]},
        "old_effects": _effects(old.pk),
        "new_effects": _effects(new.pk),
        "decisions": _decisions(api, olga, old.pk),
    }


def run_fork(*, api: Api, cast: dict[str, Person], wait: Wait, timeout: float) -> dict[str, Any]:
    ada, olga = cast["ada"], cast["olga"]
    old = task_create(
        agent="refund",
        goal="Refund order A1001: the parcel arrived damaged",
        input={"order_id": "A1001", "reason": "damaged"},
        created_by=ada.user,
    )
    old = wait(old.pk, SETTLED, timeout)
    before = _effects(old.pk)
    from_step = 5  # 1-based: email the customer
    referenced = list(
        Step.objects.filter(task=old, ordinal__lt=from_step - 1).values_list("pk", flat=True)
    )
    # Every call at the simulated services of the kinds the referenced steps made, whoever made
    # it: a fork that ran one of them again (under any key) adds one.
    same_kind = _kinds_of(old.pk, referenced)
    calls_before = Effect.objects.filter(same_kind).count()
    body = {
        "from_step": from_step,
        "reason": "the customer asked for the email in another wording",
        "input": {**old.input, "note": "resend the confirmation"},
    }
    answer = api.call(olga, "POST", f"/tasks/{old.pk}/fork", body)
    answer.raise_for_status()
    new = wait(answer.json()["id"], SETTLED, timeout)
    adopted = Step.objects.filter(task=new, ordinal__lt=from_step - 1).order_by("ordinal")
    return {
        "task_id": new.pk,
        "task_status": new.status,
        "old_task_id": old.pk,
        "old_task_status": Task.objects.get(pk=old.pk).status,
        "fork_status_code": answer.status_code,
        "from_step": from_step,
        "linked": {
            "new_origin": new.origin_id,
            "old_again": list(old.again.values_list("pk", flat=True)),
        },
        "referenced_steps": [
            {"step": s.ordinal + 1, "title": s.title, "from": s.spec.get("adopted_from")}
            for s in adopted
        ],
        "effects_repeated": Effect.objects.filter(same_kind).count() - calls_before,
        "referenced_effect_kinds": sorted(
            {
                f"{s}.{o}"
                for s, o in Effect.objects.filter(same_kind).values_list("service", "operation")
            }
        ),
        "original_effects_before_and_after": [before, _effects(old.pk)],
        "fork_effects": _effects(new.pk),
        "fork_ledger_rows": new.tool_calls.count(),
        "decisions": _decisions(api, olga, old.pk),
    }
