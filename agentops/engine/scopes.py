"""OAuth scopes as the engine reads them: the spelling of a scope, and the scope a stored
authorization-gap failure names (what a service said it missed). Pure: read by the recovery
advisor, the tools' HTTP helper and the grants (`engine.grants`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agentops.engine.errors import FailureKind

# `service:operation`, as the simulated services (and most OAuth APIs) spell a scope.
SCOPE = re.compile(r"[a-z][a-z0-9_-]{0,48}:[a-z0-9_.*-]{1,48}")


def missing_scope_of(failure: Mapping[str, Any] | None) -> str | None:
    """The scope a service refused a call for, as the stored failure names it (None when the
    failure is not a refusal for a named, well-formed scope)."""
    if not isinstance(failure, Mapping) or failure.get("kind") != FailureKind.AUTHORIZATION_GAP:
        return None
    detail = failure.get("detail")
    scope = detail.get("missing_scope") if isinstance(detail, Mapping) else None
    return scope if isinstance(scope, str) and SCOPE.fullmatch(scope) else None
