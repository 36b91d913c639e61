"""`manage.py api_token create USERNAME [--name N]` / `revoke ID USERNAME` / `list USERNAME`."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentops.models import ApiToken
from agentops.tokens import api_token_create, api_token_revoke


class Command(BaseCommand):
    help = "Create, list or revoke a user's API tokens (the token is printed once, on create)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["create", "list", "revoke"])
        parser.add_argument("username")
        parser.add_argument("token_id", nargs="?", type=int, help="revoke: the token's id")
        parser.add_argument("--name", default="API token")

    def handle(
        self,
        *args: object,
        action: str,
        username: str,
        token_id: int | None,
        name: str,
        **opts: object,
    ) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        if action == "create":
            row, token = api_token_create(user=user, name=name)
            self.stdout.write(f"token {row.pk} ({row.name}) for {username}; shown once:\n{token}")
        elif action == "revoke":
            if token_id is None or not api_token_revoke(token_id=token_id, user=user):
                raise CommandError(f"{username} has no live token {token_id}")
            self.stdout.write(f"revoked token {token_id}")
        else:
            for row in ApiToken.objects.filter(user=user):
                state = "revoked" if row.revoked_at else f"last used {row.last_used_at or 'never'}"
                self.stdout.write(f"{row.pk}\t{row.prefix}…\t{row.name}\t{state}")
