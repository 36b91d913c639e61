"""What the recovery panel shows of a scope grant: the scope a service refused (None: nothing to
grant), whether the viewer may grant it (or why not, and who may), and the grant form."""

from __future__ import annotations

from typing import Any

from agentops.models import Task
from reviews.forms import ScopeGrantForm
from reviews.selectors import scope_granters_list, scope_to_grant
from reviews.services import grant_refusal


def grant_context(task: Task, user: Any, *, form: ScopeGrantForm | None = None) -> dict[str, Any]:
    """What the recovery panel shows of a grant: the scope to grant (None: nothing to grant),
    whether the viewer may grant it (or why not), and the form."""
    scope = scope_to_grant(task=task)
    if scope is None:
        return {"grant_scope": None}
    refusal = grant_refusal(user=user, task=task)
    return {
        "grant_scope": scope,
        "grant_refusal": refusal,
        # Whom to ask, for a viewer who may not grant.
        "grant_granters": scope_granters_list(task=task) if refusal is not None else [],
        "grant_form": form or ScopeGrantForm(initial={"scope": scope}, auto_id="grant_%s"),
    }
