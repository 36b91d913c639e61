"""`manage.py checkpoint verify|restore TASK`, `checkpoint heads`, `checkpoint chains`: a task's
rows against its log, a restore of a stopped task's rows from that log, and the record's hash
chains.

`verify` folds the task's latest snapshot with the events after it, as the runner does on every
claim, and also checks what the resume check does not: each step output against the digest its
latest snapshot recorded, and the task's three hash chains (events, snapshots, ledger rows); it
prints each difference and the first row where a chain stops holding, and exits 1 on any. With
`--heads FILE` (from `checkpoint heads`) it also checks that the chains still reach the heads
kept there. `restore` rewrites a stopped task's statuses and progress pointer from the fold, as
a decision of the person named by `--by`, with `--reason` (`reviews.services.
task_restore_from_log`); it refuses a task whose record was changed. The task stays stopped;
retry it from the recovery panel to resume.

`heads` prints every chain's head (its last place and digest) as JSON, to keep somewhere the
database's users cannot write; `chains [--heads FILE]` checks every task's chains and the
decision log's, and the kept heads, and exits 1 on any break.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentops.engine import (
    AgentOpsError,
    ChainBreak,
    CheckpointComparison,
    chain_heads,
    checkpoint_read,
    decision_log_break,
    heads_compare,
    task_chain_breaks,
)
from agentops.models import Task
from reviews.services import ReviewError, task_restore_from_log
from reviews.states import VIA_COMMAND


def _as_json(comparison: CheckpointComparison, kept: list[ChainBreak]) -> dict[str, Any]:
    return {
        "task": comparison.task_id,
        "snapshot_seq": comparison.seq,
        "events_folded": comparison.events,
        "differences": [
            {"field": d.field, "rows": d.rows, "log": d.log}
            for d in (*comparison.differences, *comparison.outputs)
        ],
        "chain_breaks": [b.as_json() for b in (*comparison.breaks, *kept)],
    }


class Command(BaseCommand):
    help = (
        "Check a task's rows, outputs and hash chains against its log (verify), rebuild a "
        "stopped task's rows from it (restore), print the chains' heads (heads), or check every "
        "chain (chains)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=("verify", "restore", "heads", "chains"))
        parser.add_argument("task", type=int, nargs="?", help="verify, restore: the task's id")
        parser.add_argument("--by", default="", help="restore: the operator's username")
        parser.add_argument("--reason", default="", help="restore: why (kept in the decision log)")
        parser.add_argument(
            "--heads", type=Path, help="verify, chains: the heads kept from `checkpoint heads`"
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        action, task_id = options["action"], options["task"]
        kept = self._kept(options["heads"])
        if action == "heads":
            self.stdout.write(json.dumps(chain_heads(), sort_keys=True))
            return
        if action == "chains":
            self._chains(kept, as_json=options["json"])
            return
        if task_id is None:
            raise CommandError(f"{action} needs the task's id")
        if action == "restore":
            comparison = self._restore(task_id, by=options["by"], reason=options["reason"])
            verb, kept_breaks = "restored", []
        else:
            comparison = self._read(task_id)
            verb = "differ"
            kept_breaks = heads_compare(kept, task_id=task_id) if kept is not None else []
        if options["json"]:
            self.stdout.write(json.dumps({**_as_json(comparison, kept_breaks), "action": verb}))
        else:
            self._print(comparison, verb, kept_breaks)
        found = len(comparison.differences) + len(comparison.outputs)
        broken = len(comparison.breaks) + len(kept_breaks)
        if verb == "differ" and (found or broken):
            raise CommandError(
                f"task {task_id}: {found} differences between the rows and the log, "
                f"{broken} chain breaks"
            )

    def _kept(self, path: Path | None) -> dict[str, Any] | None:
        if path is None:
            return None
        try:
            kept = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise CommandError(f"--heads {path}: {exc}") from None
        if (
            not isinstance(kept, dict)
            or set(kept) != {"decisions", "tasks"}
            or not isinstance(kept["tasks"], dict)
        ):
            raise CommandError(f"--heads {path}: not the output of `checkpoint heads`")
        return kept

    def _chains(self, kept: dict[str, Any] | None, *, as_json: bool) -> None:
        task_ids = Task.objects.order_by("pk").values_list("pk", flat=True)
        breaks = [found for task_id in task_ids.iterator() for found in task_chain_breaks(task_id)]
        log = decision_log_break()
        breaks += [log] if log is not None else []
        breaks += heads_compare(kept) if kept is not None else []
        if as_json:
            self.stdout.write(json.dumps({"chain_breaks": [b.as_json() for b in breaks]}))
        elif not breaks:
            against = " and reach the kept heads" if kept is not None else ""
            self.stdout.write(f"every chain holds{against}")
        for found in breaks if not as_json else []:
            self.stdout.write(str(found))
        if breaks:
            raise CommandError(f"{len(breaks)} chain breaks")

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

    def _print(
        self, comparison: CheckpointComparison, verb: str, kept_breaks: list[ChainBreak]
    ) -> None:
        source = f"snapshot #{comparison.seq} + {comparison.events} events"
        differences = (*comparison.differences, *comparison.outputs)
        breaks = (*comparison.breaks, *kept_breaks)
        if not differences and not breaks:
            self.stdout.write(
                f"task {comparison.task_id}: the rows and outputs agree with {source}, and its "
                "chains hold"
            )
            return
        if differences:
            head = "restored from" if verb == "restored" else "disagree with"
            self.stdout.write(
                f"task {comparison.task_id}: {len(differences)} rows {head} {source}:"
            )
        for difference in differences:
            self.stdout.write(f"  {difference}")
        for found in breaks:
            self.stdout.write(f"  {found}")
