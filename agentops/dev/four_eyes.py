"""`demo_scenario four-eyes`: a 108 EUR refund under the `four-eyes` policy waits at a gate that
two different people must approve, one of them a finance lead.

Over the API: the starter (ada) may not approve; olga approves (1 of 2) and may not approve
again; the finance leads are told a second approval is wanted; fiona edits the amount, which
starts the count over (1 of 2, by fiona); olga approves the edited amount (2 of 2) and the
refund runs once, with the edited amount.
"""

from __future__ import annotations

from typing import Any

from agentops.dev.people import Api, Person, Wait, four_eyes_policy_ensure, refund_task, wait_for
from agentops.models import Gate, ToolCall
from agentops.states import TERMINAL, GateStatus, TaskStatus

EDITED_AMOUNT = 104.0


def _gate(api: Api, person: Person, gate_id: int) -> dict[str, Any]:
    answer = api.call(person, "GET", f"/gates/{gate_id}")
    answer.raise_for_status()
    gate: dict[str, Any] = answer.json()
    return gate


def _approve(api: Api, person: Person, gate: dict[str, Any], **edit: Any) -> tuple[int, Any]:
    if edit:
        body = {
            "seen_digest": gate["args_digest"],
            "arguments": {**gate["arguments"], **edit},
            "reason": "round the refund down to the eligible amount",
        }
        answer = api.call(person, "POST", f"/gates/{gate['id']}/edit", body)
    else:
        body = {"seen_digest": gate["args_digest"], "reason": "checked the order"}
        answer = api.call(person, "POST", f"/gates/{gate['id']}/approve", body)
    return answer.status_code, answer.json()


def run_four_eyes(
    *, api: Api, cast: dict[str, Person], wait: Wait, timeout: float
) -> dict[str, Any]:
    ada, olga, fiona = cast["ada"], cast["olga"], cast["fiona"]
    policy = four_eyes_policy_ensure(author=fiona.user)
    task = refund_task(starter=ada.user, order_id="B2002", policy=policy)
    task = wait(task.pk, {TaskStatus.AWAITING_APPROVAL, *TERMINAL}, timeout)
    gate_id = Gate.objects.get(task=task, status=GateStatus.OPEN).pk
    refusals: dict[str, int] = {}

    gate = _gate(api, olga, gate_id)
    refusals["starter"], _ = _approve(api, ada, gate)
    status, gate = _approve(api, olga, gate)
    after_first = f"{len(gate['approvals'])} of {gate['approvals_required']}"
    refusals["same_person_again"], _ = _approve(api, olga, gate)
    notices = wait_for(
        lambda: [
            n
            for n in api.call(olga, "GET", f"/gates/{gate_id}/notices").json()
            if n["event"] == "gate_second_approval"
        ],
        seconds=timeout,
        what="the second approvers' notice",
    )
    _, gate = _approve(api, fiona, gate, amount=EDITED_AMOUNT)
    after_edit = f"{len(gate['approvals'])} of {gate['approvals_required']}"
    _, gate = _approve(api, olga, gate)
    task = wait(task.pk, TERMINAL, timeout)
    decisions = api.call(olga, "GET", f"/tasks/{task.pk}/decisions").json()
    return {
        "task_id": task.pk,
        "task_status": task.status,
        "policy": policy,
        "gate_id": gate_id,
        "gate_status": gate["status"],
        "approvals_after_first": after_first,
        "approvals_after_edit": after_edit,
        "approved_by": [*(a["by"] for a in gate["approvals"]), gate["decided_by"]],
        "decided_by": gate["decided_by"],
        "refusals": refusals,
        "second_group_told": sorted({r for n in notices for r in n["recipients"]}),
        "refunded_amount": _refunded(task.pk),
        "decisions": [
            {"action": d["action"], "actor": d["actor"], **_count(d["detail"])} for d in decisions
        ],
        "first_approval_status": status,
    }


def _count(detail: dict[str, Any]) -> dict[str, Any]:
    keys = ("approval", "of", "started_over")
    return {key: detail[key] for key in keys if key in detail}


def _refunded(task_id: int) -> float | None:
    call = ToolCall.objects.filter(task_id=task_id, tool="issue_refund").order_by("id").last()
    return None if call is None else (call.args or {}).get("amount")
