"""Routing a proposed action to a lane, under the policy version the task pinned at creation.

The one seam between the engine and `policies`: the runner builds a policy `Action` here and asks
`policies.selectors.policy_evaluate` (pure evaluation over a cached, immutable version). This
module decides (the arguments to run, the verdict, whether a person's approval still holds, what
is recorded on the step), including the one route no policy changes: an agent's question always
waits for a person. The runner commits the outcome in its fenced transaction.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agentops.engine.errors import FailureKind, OrchestrationFailure
from agentops.engine.registry import Tool
from agentops.models import Step, Task
from agentops.states import Phase
from policies import catalog
from policies.engine import Action, GateSettings, Route, Verdict
from policies.selectors import policy_evaluate
from policies.services import policy_version_ensure_active

# The built-in tool an agent asks a person with (`questions.ask_human`) and the approval kind of
# the gate its call waits at: whatever the policy says, a question goes to a person
# (`question_verdict`; a policy that denies it refuses it).
ASK_HUMAN = "ask_human"
QUESTION = "question"

__all__ = [
    "ASK_HUMAN",
    "QUESTION",
    "Action",
    "Verdict",
    "action_for",
    "approved",
    "audited",
    "effective_arguments",
    "question_verdict",
    "route_action",
    "routed_payload",
    "step_routing",
    "verdict_for",
]


def action_for(
    *,
    task: Task,
    tool: Tool,
    arguments: dict[str, Any],
    step: int,
    confidence: float | None,
    edited: bool = False,
) -> Action:
    """The Action the policy sees for a proposed call: built by `policies.catalog.action_for`,
    the one builder (the catalog knows every registered tool's side effect and systems)."""
    return catalog.action_for(
        tool=tool.name,
        arguments=arguments,
        agent=task.agent,
        step=step,
        confidence=confidence,
        edited=edited,
        systems=tool.systems,
    )


def route_action(*, task: Task, action: Action) -> Verdict:
    """The verdict of the task's pinned policy version for `action`."""
    version_id = task.policy_version_id or policy_version_ensure_active().pk
    return policy_evaluate(version_id=version_id, action=action)


def effective_arguments(
    step: Step, tool: Tool, proposal: dict[str, Any]
) -> tuple[dict[str, Any], bool]:
    """The arguments to run: a person's edit of a gated action wins over the model's."""
    approval = step.approval
    if approval and approval.get("tool") == tool.name:
        return approval["arguments"], bool(approval.get("edited"))
    return proposal["arguments"], False


def verdict_for(
    *,
    task: Task,
    tool: Tool,
    arguments: dict[str, Any],
    step: int,
    confidence: float | None,
    edited: bool,
) -> Verdict:
    """The verdict for a proposed call; a denied action raises authorization_gap."""
    verdict = route_action(
        task=task,
        action=action_for(
            task=task,
            tool=tool,
            arguments=arguments,
            step=step,
            confidence=confidence,
            edited=edited,
        ),
    )
    if verdict.route == Route.DENY:
        raise OrchestrationFailure(
            f"policy denies {tool.name}: {'; '.join(verdict.reasons)}",
            kind=FailureKind.AUTHORIZATION_GAP,
            detail={"rule": verdict.rule, "policy_version": verdict.version},
        )
    if tool.name == ASK_HUMAN:
        return question_verdict(verdict)
    return verdict


def question_verdict(verdict: Verdict) -> Verdict:
    """The verdict of an `ask_human` call: always a person, at a gate of the question kind. A
    rule that gates it keeps its settings (group, timeout, escalation); any other route waits
    with the default settings."""
    if verdict.route == Route.GATE:
        return replace(
            verdict, gate=replace(verdict.gate or GateSettings(), approval_kind=QUESTION)
        )
    return replace(
        verdict,
        route=Route.GATE,
        gate=GateSettings(
            approver_group="operators", timeout_action="reject", approval_kind=QUESTION
        ),
        reasons=(*verdict.reasons, f"{ASK_HUMAN} waits for a person's answer"),
    )


def approved(step: Step, digest: str, verdict: Verdict) -> bool:
    """A person's approval holds only for these exact arguments under this policy version,
    and, if the action is still gated, under the same rule (a stricter rule gates again)."""
    approval = step.approval
    return bool(
        approval
        and approval.get("args_digest") == digest
        and approval.get("policy_version_id") == verdict.version_id
        and (verdict.route != Route.GATE or approval.get("rule") == verdict.rule)
    )


def step_routing(verdict: Verdict) -> dict[str, Any]:
    """The fields the verdict stores on the step, so any decision can be replayed."""
    return {
        "route": verdict.route,
        "policy_version_number": verdict.version,
        "policy_rule": verdict.rule,
    }


def routed_payload(*, tool: Tool, verdict: Verdict, digest: str) -> dict[str, Any]:
    """What the gate or ledger event records about the routing (before the tool call)."""
    return {
        "tool": tool.name,
        "route": verdict.route,
        "rule": verdict.rule,
        "policy_version": verdict.version,
        "reasons": list(verdict.reasons),
        "args_digest": digest,
        "phase": Phase.BEFORE_TOOL_CALL,
        **({"schema_digest": tool.schema_digest} if tool.schema_digest else {}),
    }


def audited(verdict: Verdict, step: Step) -> bool:
    """The call gets an audit item: the audit lane, or a sampled share of `auto` (decided
    deterministically from the step id)."""
    return verdict.route == Route.AUDIT or verdict.queues_audit(str(step.pk))
