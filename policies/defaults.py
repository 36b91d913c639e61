"""The shipped default policy, as data.

The data migration `0003_default_policy` writes the same rules inline (migrations never import app
code); a test checks the two agree. `policy_default_install` uses this copy to reinstall the
policy in a database whose migration rows are gone (a flushed test database).
"""

from __future__ import annotations

from typing import Any

DEFAULT_POLICY_NAME = "default"
DEFAULT_POLICY_DESCRIPTION = (
    "Shipped oversight policy: unknown tools, low confidence, sensitive systems and large "
    "payments wait for an operator; small payments and notifications are audited; reads run."
)
DEFAULT_SENSITIVE_SYSTEMS = ["prod-db", "identity"]
DEFAULT_CHANGE_NOTE = "Shipped default policy."

_GATE = {"approver_group": "operators", "timeout_seconds": 3600, "timeout_action": "reject"}

DEFAULT_RULES: list[dict[str, Any]] = [
    {"name": "unknown tool", "route": "gate", "unknown_tool": True, **_GATE},
    {"name": "low confidence", "route": "gate", "confidence_below": 0.7, **_GATE},
    {"name": "sensitive system", "route": "gate", "touches_sensitive": True, **_GATE},
    {
        "name": "large payment",
        "route": "gate",
        "side_effects": ["financial"],
        "amount_above": 100.0,
        **_GATE,
    },
    {"name": "small payment", "route": "audit", "side_effects": ["financial"], "sample_rate": 1.0},
    {"name": "notification", "route": "audit", "side_effects": ["notify"], "sample_rate": 1.0},
    {"name": "read", "route": "auto", "side_effects": ["read"], "sample_rate": 0.05},
    {"name": "default", "route": "gate", "is_default": True, **_GATE},
]
