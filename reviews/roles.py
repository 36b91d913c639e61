"""Who may do what in the people's room: the operator and auditor roles, the permissions they
grant, and who may decide a given gate.

A role is membership of a group the migrations create (`operators`, `auditors` here; `policy
admins` in `policies.permissions`, `task starters` in `agentops.permissions`), made with
`agentops.plumbing.web.role`: only active users hold one, and an active superuser holds every
permission (Django's own rule). Each app registers its own permissions from its `AppConfig.ready`
(`agentops.plumbing.web.permissions_register`), and everyone asks through Django: views with
`agentops.plumbing.web.permission_required("<app>.<name>")`, services with `user.has_perm(...)`,
templates and the navigation with `{% if perms.<app>.<name> %}`. The group names are read once per
user object (rules caches them; `group_names` reads the same cache): for the signed-in user of a
request, with the user (`PermissionRowsBackend.get_user`), so a page's checks ask the database
nothing more however many it makes.

A permission registered with django-rules is decided by its rule alone: `ModelBackend` (the
per-user and group permission rows, which the admin and `agentops.view_task` use) is not asked
about it, so a page that checks a role the viewer lacks does not load the viewer's permission rows
for nothing.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, cast

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connections, router
from django.utils.translation import gettext as _
from rules.permissions import perm_exists
from rules.predicates import Predicate

from agentops.engine import approval_kind_of
from agentops.plumbing.web import role
from policies.permissions import is_policy_admin
from policies.phrases import Phrase, gettext_noop
from reviews.states import Role

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User
    from django.http import HttpRequest

    from agentops.models import Gate

is_operator = role(Role.OPERATORS)
is_auditor = role(Role.AUDITORS)
is_senior_auditor = role(Role.SENIOR_AUDITORS)
is_reviewer = is_operator | is_auditor | is_senior_auditor
has_review_role = is_reviewer | is_policy_admin

# permission: (predicate, what it lets one do)
PERMISSIONS: dict[str, tuple[Predicate, str]] = {
    "reviews.decide_gate": (
        is_operator,
        "decide gates, resolve stopped tasks, claim and assign items, pause, resume, cancel "
        "and modify tasks",
    ),
    "reviews.review_audit": (
        is_auditor | is_senior_auditor,
        "mark audit items ok or flag them, answer their rubrics",
    ),
    "reviews.adjudicate_audit": (
        is_senior_auditor,
        "settle the audit items whose reviewers disagree (the adjudication lane)",
    ),
    "reviews.define_rubrics": (
        is_policy_admin,
        "define rubrics and attach them to the audit queue",
    ),
    "reviews.read_reviews": (
        is_reviewer,
        "read the inbox, the gate and recovery panels and the audit queue",
    ),
    "reviews.read_decisions": (has_review_role, "read the decision log"),
    "reviews.read_dashboard": (has_review_role, "read the oversight dashboard"),
}


# Where django-rules' `is_group_member` keeps a user's group names, on the user object.
RULES_GROUP_CACHE = "_group_names_cache"


def group_names(user: User) -> frozenset[str]:
    """The user's group names, from the cache the role checks fill (or filling it when no role
    check came first): one query per user object for both."""
    cached = getattr(user, RULES_GROUP_CACHE, None)
    if cached is None:
        cached = set(user.groups.values_list("name", flat=True))
        setattr(user, RULES_GROUP_CACHE, cached)
    return frozenset(cached)


def gate_decider_refusal(gate: Gate, user: User) -> str | None:
    """Why `user` may not decide `gate`, or None when they may: in its approver group (or a
    superuser), with the permission, and not the person who started the task (separation of
    duties). The service refuses with it; the inbox shows the controls only where it is None.
    A refusal that names a group is a `Phrase`, so the gate panel keeps the name as written
    in the reader's language (`ReviewError.reason`)."""
    if not getattr(user, "is_authenticated", False):
        return _("log in to decide gates")
    if gate.task.created_by_id is not None and gate.task.created_by_id == user.pk:
        return _("you started this task, so someone else must decide its gates")
    if user.is_superuser:
        # Any group, but one person's approval still counts once (four eyes).
        return approval_kind_of(gate).person_refusal(gate, user=user)
    if not user.has_perm("reviews.decide_gate"):
        return Phrase(
            gettext_noop("only members of %(group)s may decide this gate"),
            {"group": repr(gate.approver_group)},
        )
    # Who of the approver group, and how many, decide: the gate's approval kind says.
    return approval_kind_of(gate).may_decide(gate, user=user, groups=group_names(user))


class PermissionRowsBackend(ModelBackend):
    """Django's ModelBackend for every permission that is not a role's (see the module), for
    every app. It stays here although it serves every app: its dotted path is stored in each
    signed-in session (`BACKEND_SESSION_KEY`), so moving it would sign everyone out.

    The signed-in user of a request is read with their group names and permission rows in one
    statement (`get_user`), so a page's role and permission checks ask the database nothing
    more about them."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> User | None:
        """ModelBackend's password check, while local passwords are on: with
        AGENTOPS_LOCAL_PASSWORDS=false people sign in at the identity provider only
        (agentops.oidc), and no password signs anyone in, wherever it is posted."""
        if not settings.AGENTOPS.get("LOCAL_PASSWORDS", True):
            return None
        user: User | None = super().authenticate(request, username, password, **kwargs)
        return user

    def has_perm(self, user_obj: User | AnonymousUser, perm: str, obj: Any = None) -> bool:
        if perm_exists(perm):
            return False
        return super().has_perm(user_obj, perm, obj)

    def get_user(self, user_id: Any) -> User | None:
        """ModelBackend's answer (the active user `user_id`, else None), with the caches the
        role checks (their group names) and this backend (their permission rows) would fill,
        read in the same statement."""
        model = get_user_model()
        db = router.db_for_read(model)
        with connections[db].cursor() as cursor:
            cursor.execute(_user_sql(), [user_id])
            row = cursor.fetchone()
        if row is None:
            return None
        *values, groups, permissions = row
        user = model.from_db(db, _user_fields(), values)
        if not self.user_can_authenticate(user):
            return None
        setattr(user, RULES_GROUP_CACHE, set(groups))
        if not user.is_superuser:
            user._perm_cache = set(permissions)  # type: ignore[attr-defined]
        return user

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        """ModelBackend's answer (the user's permission rows and their groups'), read in one
        query instead of two (none for the user of a request: `get_user` read them), and cached
        on the user object as ModelBackend caches it."""
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        if user_obj.is_superuser:
            return super().get_all_permissions(user_obj, obj)
        if not hasattr(user_obj, "_perm_cache"):
            with connections[router.db_for_read(Permission)].cursor() as cursor:
                cursor.execute(f"SELECT ARRAY({_permission_rows_sql()})", [user_obj.pk] * 2)
                user_obj._perm_cache = set(cursor.fetchone()[0])
        return cast(set[str], user_obj._perm_cache)


@functools.cache
def _user_fields() -> tuple[str, ...]:
    return tuple(field.attname for field in get_user_model()._meta.concrete_fields)


def _table(model: Any) -> str:
    return f'"{model._meta.db_table}"'


@functools.cache
def _permission_rows_sql() -> str:
    """`app_label.codename` of every permission row of the user (the first two parameters: their
    id, twice) and of their groups, as ModelBackend names them."""
    user = get_user_model()
    own = user.user_permissions.through
    member = user.groups.through
    granted = Group.permissions.through
    return (
        f'SELECT DISTINCT ct."app_label" || \'.\' || p."codename" FROM {_table(Permission)} p '
        f'JOIN {_table(ContentType)} ct ON ct."id" = p."content_type_id" '
        f'WHERE p."id" IN (SELECT o."permission_id" FROM {_table(own)} o WHERE o."user_id" = %s '
        f'UNION SELECT gp."permission_id" FROM {_table(granted)} gp '
        f'JOIN {_table(member)} m ON m."group_id" = gp."group_id" WHERE m."user_id" = %s)'
    )


@functools.cache
def _user_sql() -> str:
    """One user (the parameter: their id) by their columns, their group names and their
    permission rows."""
    user = get_user_model()
    member = user.groups.through
    columns = ", ".join(f'u."{field.column}"' for field in user._meta.concrete_fields)
    rows = _permission_rows_sql().replace("%s", 'u."id"')
    return (
        f"SELECT {columns}, "
        f'ARRAY(SELECT g."name" FROM {_table(Group)} g JOIN {_table(member)} m '
        f'ON m."group_id" = g."id" WHERE m."user_id" = u."id"), ARRAY({rows}) '
        f'FROM {_table(user)} u WHERE u."id" = %s'
    )
