"""Calibration drafts: a policy draft that moves the gate settings the dashboard's figures
suggest. It only creates a draft; publishing stays a policy admin's act.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction
from django.utils.translation import gettext as _

from agentops.engine import DEFAULT_GATE_TIMEOUT_SECONDS
from policies.engine import GateSettings, Route
from policies.models import Policy, PolicyVersion
from policies.selectors import policy_version_active
from policies.services import policy_draft_create, policy_rule_add
from reviews.services._common import NotAllowed, ReviewError

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def _gate_settings_of(draft: PolicyVersion) -> GateSettings:
    """Who decides the proposed gate and when it times out: as the draft's default rule says
    (or its first gate rule; else operators, one hour, reject)."""
    gates = draft.rules.filter(route=Route.GATE).order_by("-is_default", "position")
    model = gates.first()
    if model is None or not model.approver_group:
        return GateSettings(
            approver_group="operators",
            timeout_seconds=DEFAULT_GATE_TIMEOUT_SECONDS,
            timeout_action="reject",
        )
    return GateSettings(
        approver_group=model.approver_group,
        timeout_seconds=model.timeout_seconds or DEFAULT_GATE_TIMEOUT_SECONDS,
        timeout_action=model.timeout_action,
        escalate_to=model.escalate_to,
    )


def calibration_draft_create(
    *, actor: User, rule: str, agent: str, tool: str, threshold: float, policy_id: int | None = None
) -> PolicyVersion:
    """Open a policy draft that gates `tool` for `agent` when the model's confidence is below
    `threshold`, placed just before `rule` (the rule that let the flagged items through).

    The draft is an ordinary one, built by the policies services: an admin reviews it in the
    editor, dry-runs it and publishes it, or discards it. Nothing is published here.
    """
    if actor is None or not actor.has_perm("policies.edit_policy"):
        raise NotAllowed(_("only policy admins may open policy drafts"))
    if not (0 < threshold <= 1) or not tool or not agent:
        raise ReviewError(_("a proposal needs a tool, an agent and a threshold between 0 and 1"))
    with transaction.atomic():
        policy = (
            Policy.objects.get(pk=policy_id) if policy_id else Policy.objects.get(name="default")
        )
        if policy_version_active(policy.name) is None:
            raise ReviewError(
                _("policy %(name)s has no published version to start from") % {"name": policy.name}
            )
        draft = policy_draft_create(policy=policy, author=actor)
        before = draft.rules.filter(name=rule).values_list("position", flat=True).first()
        policy_rule_add(
            draft=draft,
            author=actor,
            fields={
                "name": f"calibrated: gate {tool} for {agent} below {threshold:.2f}",
                "route": Route.GATE.value,
                "tools": [tool],
                "agents": [agent],
                "confidence_below": threshold,
                **_gate_settings_of(draft).as_dict(),
            },
            position=before if before is not None else 0,
        )
    return draft
