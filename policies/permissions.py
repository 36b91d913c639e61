"""Who may change the oversight policies: the policy-admin role and the permission it grants.

The role is membership of the "policy admins" group (created by `0004_policy_admins_group`); the
permission is registered with django-rules from `PoliciesConfig.ready` and asked through Django
(`permission_required("policies.edit_policy")`, `user.has_perm`). The role predicate lives here,
in the lowest app that needs it, so `reviews` (whose decision log and dashboard policy admins
read) uses the same one.
"""

from __future__ import annotations

from rules.predicates import Predicate

from agentops.plumbing.web import role

POLICY_ADMINS = "policy admins"

is_policy_admin = role(POLICY_ADMINS)

# permission: (predicate, what it lets one do)
PERMISSIONS: dict[str, tuple[Predicate, str]] = {
    "policies.edit_policy": (
        is_policy_admin,
        "open the policy editor: drafts, rules, dry-runs, publish, revert",
    ),
}
