"""What the review reads share: JSON shown to people (`pretty_json`), the holder of a task's
claim, and how many decisions a task's log shows. Pure helpers over rows already loaded; they run
no query of their own beyond the one their caller prefetched for.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from agentops.engine import is_pointer
from agentops.models import Task
from agentops.selectors import json_preview
from reviews.models import Claim

if TYPE_CHECKING:
    from django.contrib.auth.models import User

TASK_LOG_LIMIT = 50


def pretty_json(value: Any) -> str:
    """Stored JSON as an indented, key-sorted block (the canonical record, not the model's text)."""
    if is_pointer(value):
        return json_preview(value)
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def holder_of(task: Task) -> User | None:
    """The user holding the task's inbox item, from a select_related claim (None: nobody)."""
    try:
        return task.claim.user
    except Claim.DoesNotExist:
        return None
