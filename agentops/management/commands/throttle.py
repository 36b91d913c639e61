"""`manage.py throttle status|clear [--user NAME] --address ADDR | --all`: see or lift lockouts.

An operator lifts a lockout that guessing caused at a shared office address, or for a person at
their address (an account is counted per address: its lockout holds there, the right password
included, and nowhere else).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentops.plumbing.throttle import (
    Key,
    Scope,
    account_key,
    address_key,
    throttle_forget,
    throttle_forget_all,
    throttle_state,
)


class Command(BaseCommand):
    help = "Show or clear failed sign-in and bad-token counts and lockouts (plumbing.throttle)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["status", "clear"])
        parser.add_argument(
            "--user", help="a username as typed at sign-in (with the --address it signs in from)"
        )
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
        if address is None:
            raise CommandError(
                "name an --address, with a --user signing in from it or alone (or clear --all)"
            )
        keys: list[Key] = [account_key(user, address)] if user is not None else []
        keys += [address_key(scope, address) for scope in (Scope.LOGIN_ADDRESS, Scope.API_ADDRESS)]
        if action == "clear":
            throttle_forget(keys)
        for key in keys:
            failures, locked = throttle_state(key)
            state = f"locked for {locked} s" if locked else "not locked"
            self.stdout.write(f"{key.scope}\t{key.subject}\t{failures} failure(s)\t{state}")
