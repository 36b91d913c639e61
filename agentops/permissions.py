"""Who may start tasks and who may grant scopes: the task-starter and scope-granter roles and the
permissions they grant.

The task-starter role is membership of the "task starters" group (created by
`reviews.0008_task_starters_group`): the start form, the API and `task_create`. The scope-granter
role is membership of "scope granters" (`agentops.0022_scope_granters_group`): granting a task or
an agent a scope a service refused, for a bounded time, and revoking grants (the recovery panel,
the API, `reviews.services.grants`). The permissions are registered with django-rules from
`AgentopsConfig.ready` and asked through Django (`permission_required`, `user.has_perm`).
"""

from __future__ import annotations

from rules.predicates import Predicate

from agentops.engine.tasks import START_TASK
from agentops.plumbing.web import role

TASK_STARTERS = "task starters"
SCOPE_GRANTERS = "scope granters"
GRANT_SCOPES = "agentops.grant_scopes"

is_task_starter = role(TASK_STARTERS)
is_scope_granter = role(SCOPE_GRANTERS)

# permission: (predicate, what it lets one do)
PERMISSIONS: dict[str, tuple[Predicate, str]] = {
    START_TASK: (is_task_starter, "start tasks (the form, the API)"),
    GRANT_SCOPES: (
        is_scope_granter,
        "grant a stopped task (or its agent) the scope a service refused, for a bounded time, "
        "and revoke grants",
    ),
}
