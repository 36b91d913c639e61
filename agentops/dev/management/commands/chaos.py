"""`manage.py chaos [--minutes M] [--workers N] [--tasks T] [--seed S] [--hosts H]
[--tasks-per-worker K] [--model-seconds S] [--json]`."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from agentops.dev.chaos import ChaosRun, chaos_markdown
from agentops.dev.hosts import hosts_unavailable


class Command(BaseCommand):
    help = (
        "Run the demo agents under continuous faults (worker kills and freezes, a Redis flush, "
        "model and service faults), then check the invariants; exit 1 if one breaks."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--minutes", type=float, default=2.0)
        parser.add_argument("--workers", type=int, default=2)
        parser.add_argument("--tasks", type=int, default=8, help="tasks kept in flight")
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument(
            "--hosts",
            type=int,
            default=1,
            help="run the workers and sweepers on this many hosts of their own (network "
            "namespaces; needs root)",
        )
        parser.add_argument(
            "--kill-every", type=float, default=4.0, help="mean seconds between worker kills"
        )
        parser.add_argument(
            "--tasks-per-worker",
            type=int,
            default=1,
            help="tasks each worker advances at once (`worker --tasks`): a kill ends them all",
        )
        parser.add_argument(
            "--model-seconds",
            type=float,
            default=0.0,
            help="seconds each model call takes (kills then land in calls in flight)",
        )
        parser.add_argument("--json", action="store_true", dest="as_json")

    def handle(
        self,
        *args: object,
        minutes: float,
        workers: int,
        tasks: int,
        seed: int,
        hosts: int,
        kill_every: float,
        tasks_per_worker: int,
        model_seconds: float,
        as_json: bool,
        **options: object,
    ) -> None:
        if (
            minutes <= 0
            or workers < 1
            or tasks < 1
            or kill_every <= 0
            or hosts < 1
            or tasks_per_worker < 1
        ):
            raise CommandError(
                "--minutes, --workers, --tasks, --hosts, --kill-every and --tasks-per-worker "
                "must be positive"
            )
        if model_seconds < 0:
            raise CommandError("--model-seconds must not be negative")
        if hosts > 1 and (why := hosts_unavailable()):
            raise CommandError(why)
        executor = MigrationExecutor(connection)
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            raise CommandError("the database has unapplied migrations: run `manage.py migrate`")
        report = ChaosRun(
            minutes=minutes,
            workers=workers,
            tasks=tasks,
            seed=seed,
            hosts=hosts,
            kill_every=kill_every,
            tasks_per_worker=tasks_per_worker,
            model_seconds=model_seconds,
        ).run()
        self.stdout.write(json.dumps(report, indent=2) if as_json else chaos_markdown(report))
        if not report["ok"]:
            raise CommandError("an invariant broke (see the report)")
