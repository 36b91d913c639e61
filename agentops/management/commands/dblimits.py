"""`manage.py dblimits [--apply]`: the connection limits a new session of this role gets.

Through a pooler in transaction mode (AGENTOPS_DB_POOL_MODE=transaction) a connection cannot ask
for its limits at startup; they must be defaults of the role in this database, which `--apply`
sets (`ALTER ROLE CURRENT_USER IN DATABASE ... SET ...`: a role may set its own defaults). Server
connections the pooler opened before keep their old values until it opens new ones (PgBouncer:
`RECONNECT` on its console, or a restart). Without `--apply` it checks a new session as the
product opens one, and exits 1 while a limit is missing, so a deploy can check.
"""

from __future__ import annotations

from typing import Any

import psycopg
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from psycopg import sql

from agentops.plumbing.postgres.base import connect_error, limits_missing, refusal


class Command(BaseCommand):
    help = "Show, or set as the role's defaults, the connection limits every session must carry."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--apply", action="store_true", help="set them as this role's defaults here"
        )

    def handle(self, *args: object, apply: bool, **options: object) -> None:
        limits: dict[str, str] = connection.settings_dict["LIMITS"]
        if apply:
            with self._session() as raw:
                for name, value in limits.items():
                    raw.execute(
                        sql.SQL("ALTER ROLE CURRENT_USER IN DATABASE {} SET {} = {}").format(
                            sql.Identifier(connection.settings_dict["NAME"]),
                            sql.Identifier(name),
                            sql.Literal(value),
                        )
                    )
            self.stdout.write(
                f"set as the role's defaults: {self._listed(limits)}; sessions opened before "
                "keep their old values: have the pooler open new ones (PgBouncer: RECONNECT, or "
                "a restart), then check with `manage.py dblimits`"
            )
            return
        with self._session() as raw:
            missing = limits_missing(raw, limits)
        if missing:
            raise CommandError(str(refusal(missing)))
        self.stdout.write(f"a new session has its limits: {self._listed(limits)}")

    def _session(self) -> psycopg.Connection[Any]:
        """A session opened as the product opens one (with its startup options when direct), but
        not through the backend, which refuses a session without its limits."""
        params = connection.get_connection_params()
        for django_only in ("cursor_factory", "context", "prepare_threshold"):
            params.pop(django_only, None)
        try:
            return psycopg.connect(**params, autocommit=True)
        except psycopg.OperationalError as error:
            raise CommandError(str(connect_error(error, params))) from None

    @staticmethod
    def _listed(limits: dict[str, str]) -> str:
        return ", ".join(f"{name} = {value}" for name, value in limits.items())
