"""`manage.py roles`: who holds which role. `roles add USERNAME GROUP...` puts a person in groups
(`operators`, `auditors`, `task starters`, `scope granters`, `policy admins`, or an approver group
a policy names), `roles remove USERNAME GROUP...` takes them out, `roles` lists each group and
its members."""

from __future__ import annotations

import logging

from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser

from reviews.services import ReviewError
from reviews.services.people import ROLE_GROUPS, person_groups_change

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "List the role groups and their members, or put a person in groups or take them out."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", nargs="?", choices=["list", "add", "remove"], default="list")
        parser.add_argument("username", nargs="?")
        parser.add_argument("groups", nargs="*", help="group names (quote those with spaces)")

    def handle(
        self, *args: object, action: str, username: str | None, groups: list[str], **opts: object
    ) -> None:
        if action == "list":
            self._list()
            return
        if not username or not groups:
            raise CommandError(f"roles {action} USERNAME GROUP [GROUP ...]")
        join, leave = (groups, []) if action == "add" else ([], groups)
        try:
            person_groups_change(username=username, join=join, leave=leave)
        except ReviewError as exc:
            raise CommandError(str(exc)) from None
        logger.info("roles %s: %s %s", action, username, ", ".join(groups))
        where = "in" if action == "add" else "out of"
        self.stdout.write(f"{username} is now {where} {', '.join(groups)}")

    def _list(self) -> None:
        for group in Group.objects.order_by("name").prefetch_related("user_set"):
            members = sorted(user.get_username() for user in group.user_set.all())
            what = ROLE_GROUPS.get(group.name, "an approver group")
            self.stdout.write(f"{group.name} ({what}): {', '.join(members) or 'nobody'}")
