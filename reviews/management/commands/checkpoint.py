"""`manage.py checkpoint verify|restore TASK`: a task's rows against its log, and a restore of a
stopped task's rows from that log.

Both fold the task's latest snapshot with the events after it, as the runner does on every
claim. `verify` prints where the rows disagree (and exits 1 when they do); `restore` rewrites a
stopped task's statuses and progress pointer from the fold, as a decision of the person named by
`--by`, with `--reason` (`reviews.services.task_restore_from_log`). The task stays stopped; retry
it from the recovery panel to resume.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentops.engine import AgentOpsError, CheckpointComparison, checkpoint_read
from agentops.models import Task
from reviews.services import ReviewError, task_restore_from_log
from reviews.states import VIA_COMMAND


def _as_json(comparison: CheckpointComparison) -> dict[str, Any]:
    return {
        "task": comparison.task_id,
        "snapshot_seq": comparison.seq,
        "events_folded": comparison.events,
        "differences": [
            {"field": d.field, "rows": d.rows, "log": d.log} for d in comparison.differences
        ],
    }


class Command(BaseCommand):
    help = "Compare a task's rows with its log (verify), or rebuild a stopped task's rows from it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=("verify", "restore"))
        parser.add_argument("task", type=int, help="the task's id")
        parser.add_argument("--by", default="", help="restore: the operator's username")
        parser.add_argument("--reason", default="", help="restore: why (kept in the decision log)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        task_id: int = options["task"]
        if options["action"] == "restore":
            comparison = self._restore(task_id, by=options["by"], reason=options["reason"])
            verb = "restored"
        else:
            comparison = self._read(task_id)
            verb = "differ"
        if options["json"]:
            self.stdout.write(json.dumps({**_as_json(comparison), "action": verb}))
        else:
            self._print(comparison, verb)
        if verb == "differ" and comparison.differences:
            raise CommandError(
                f"task {task_id}: {len(comparison.differences)} differences between the rows "
                "and the log"
            )

    def _read(self, task_id: int) -> CheckpointComparison:
        try:
            return checkpoint_read(task_id)
        except Task.DoesNotExist:
            raise CommandError(f"no task {task_id}") from None
        except AgentOpsError as exc:
            raise CommandError(str(exc)) from None

    def _restore(self, task_id: int, *, by: str, reason: str) -> CheckpointComparison:
        if not by:
            raise CommandError("restore needs --by USERNAME (the operator who decides it)")
        user = get_user_model().objects.filter(username=by, is_active=True).first()
        if user is None:
            raise CommandError(f"no active user {by!r}")
        if not Task.objects.filter(pk=task_id).exists():
            raise CommandError(f"no task {task_id}")
        try:
            return task_restore_from_log(
                task_id=task_id, actor=user, reason=reason, via=VIA_COMMAND
            )
        except (ReviewError, AgentOpsError) as exc:
            raise CommandError(str(exc)) from None

    def _print(self, comparison: CheckpointComparison, verb: str) -> None:
        source = f"snapshot #{comparison.seq} + {comparison.events} events"
        if not comparison.differences:
            self.stdout.write(f"task {comparison.task_id}: the rows agree with {source}")
            return
        head = "restored from" if verb == "restored" else "disagrees with"
        self.stdout.write(
            f"task {comparison.task_id}: {len(comparison.differences)} rows {head} {source}:"
        )
        for difference in comparison.differences:
            self.stdout.write(f"  {difference}")
