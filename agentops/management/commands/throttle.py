"""`manage.py throttle status|clear --user NAME | --address ADDR | --all`: see or lift lockouts.

An operator lifts a lockout that an attacker caused for a real person (a username's lockout holds
from every address, the right password included) or a shared office address.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentops.plumbing.throttle import (
    Key,
    Scope,
    address_key,
    throttle_forget,
    throttle_forget_all,
    throttle_state,
    user_key,
)


class Command(BaseCommand):
    help = "Show or clear failed sign-in and bad-token counts and lockouts (plumbing.throttle)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["status", "clear"])
        parser.add_argument("--user", help="a username as typed at sign-in")
        parser.add_argument("--address", help="a client address (an IPv6 one counts its /64)")
        parser.add_argument(
            "--all", dest="everything", action="store_true", help="clear: every count and lockout"
        )

    def handle(
        self,
        *args: object,
        action: str,
        user: str | None,
        address: str | None,
        everything: bool,
        **options: object,
    ) -> None:
        if everything:
            if action != "clear":
                raise CommandError("--all goes with clear")
            self.stdout.write(f"cleared {throttle_forget_all()} key(s)")
            return
        keys: list[Key] = []
        if user is not None:
            keys.append(user_key(user))
        if address is not None:
            keys += [
                address_key(scope, address) for scope in (Scope.LOGIN_ADDRESS, Scope.API_ADDRESS)
            ]
        if not keys:
            raise CommandError("name a --user or an --address (or clear --all)")
        if action == "clear":
            throttle_forget(keys)
        for key in keys:
            failures, locked = throttle_state(key)
            state = f"locked for {locked} s" if locked else "not locked"
            self.stdout.write(f"{key.scope}\t{key.subject}\t{failures} failure(s)\t{state}")
