"""`manage.py embedded status|stop`: the embedded PostgreSQL and Redis servers under `.data/`."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from agentops import embedded


class Command(BaseCommand):
    help = "Show or stop the embedded PostgreSQL and Redis servers (used when no URL is set)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("action", choices=["status", "stop"])

    def handle(self, *args, action: str, **options) -> None:
        data_dir = settings.DATA_DIR / "embedded"
        if action == "stop":
            # Close this process's own connection first, or the fast shutdown waits for it.
            from django.db import connections

            connections.close_all()
            embedded.stop(data_dir)
        for name, up in embedded.running(data_dir).items():
            self.stdout.write(f"{name}: {'running' if up else 'stopped'} ({data_dir})")
