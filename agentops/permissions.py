"""Who may start tasks: the task-starter role and the permission it grants.

The role is membership of the "task starters" group (created by `reviews.0008_task_starters_group`);
the permission is registered with django-rules from `AgentopsConfig.ready` and asked through
Django: the start form (`permission_required`), the API and `task_create` (`user.has_perm`).
"""

from __future__ import annotations

from rules.predicates import Predicate

from agentops.engine.tasks import START_TASK
from agentops.web import role

TASK_STARTERS = "task starters"

is_task_starter = role(TASK_STARTERS)

# permission: (predicate, what it lets one do)
PERMISSIONS: dict[str, tuple[Predicate, str]] = {
    START_TASK: (is_task_starter, "start tasks (the form, the API)"),
}
