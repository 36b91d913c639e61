"""`manage.py retention`: archive finished tasks, then remove their rows; or verify an archive.

It lives in `reviews` because the archive carries the decision log's rows for those tasks beside
the engine's (agentops may not import reviews). The decision log itself is append-only: its rows
stay in the database, and the archive holds a copy. The erasure is recorded as one decision.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from agentops.retention import (
    BATCH,
    MANIFEST,
    RetentionError,
    archive_verify,
    archive_write,
    archived_task_read,
    retention_plan,
    tasks_erase,
)
from reviews.models import Decision
from reviews.services import decision_record
from reviews.states import VIA_SYSTEM

logger = logging.getLogger("reviews.retention")


def _cut_off(value: str) -> datetime:
    moment = parse_datetime(value)
    if moment is None:
        day = parse_date(value)
        if day is None:
            raise CommandError(f"--finished-before {value!r}: expected a date (2026-01-31)")
        moment = datetime.combine(day, time.min)
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment)


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError(value)
    return number


def _decisions(task_ids: list[int]) -> QuerySet[Decision]:
    return Decision.objects.filter(task_id_ref__in=task_ids).order_by("pk")


class Command(BaseCommand):
    help = (
        "Archive every finished task family that ended before a date (JSON Lines with a sha256 "
        "manifest), then remove its rows; or --verify an archive."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--finished-before", metavar="DATE")
        parser.add_argument("--archive", metavar="DIR", type=Path)
        parser.add_argument("--dry-run", action="store_true", help="only count; change nothing")
        parser.add_argument("--verify", metavar="DIR", type=Path, help="check an archive")
        parser.add_argument(
            "--show",
            nargs=2,
            metavar=("DIR", "TASK_ID"),
            help="print an archived task from its archive (checked against its manifest first)",
        )
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="--show: the archived rows as JSON"
        )
        parser.add_argument(
            "--batch",
            metavar="N",
            type=_positive,
            default=BATCH,
            help=f"tasks per query and per erasing transaction (default {BATCH})",
        )

    def handle(
        self,
        *args: Any,
        finished_before: str | None,
        archive: Path | None,
        dry_run: bool,
        verify: Path | None,
        show: list[str] | None,
        as_json: bool,
        batch: int,
        **options: Any,
    ) -> None:
        if show is not None:
            self._show(Path(show[0]), _positive(show[1]), as_json=as_json)
            return
        if verify is not None:
            self._verify(verify)
            return
        if finished_before is None:
            raise CommandError("give --finished-before DATE (or --verify DIR)")
        plan = retention_plan(finished_before=_cut_off(finished_before), batch=batch)
        summary = f"{len(plan.task_ids)} tasks"
        if plan.skipped_families:
            summary += f" ({plan.skipped_families} families kept: a member has not finished)"
        if dry_run:
            self.stdout.write(f"would archive and remove {summary}")
            return
        if archive is None:
            raise CommandError("give --archive DIR: rows are removed only once they are archived")
        try:
            archived = archive_write(
                archive, plan.task_ids, extras={"decisions": _decisions}, batch=batch
            )
            archive_verify(archive)
        except RetentionError as exc:
            raise CommandError(f"nothing removed: {exc}") from exc
        erased = tasks_erase(plan.task_ids, batch=batch, archive=archive)
        manifest = json.loads((archive / MANIFEST).read_bytes())
        decision_record(
            action="reviews.retention.erased",
            actor=None,
            subject=f"{erased} finished tasks",
            reason=f"finished before {finished_before}",
            detail={"archive": str(archive), "tasks": erased, "rows": manifest["rows"]},
            via=VIA_SYSTEM,
        )
        logger.info("retention: archived and removed %s tasks to %s", erased, archive)
        self.stdout.write(f"archived {archived.tasks} tasks to {archive}; removed {erased}")

    def _show(self, archive: Path, task_id: int, *, as_json: bool) -> None:
        try:
            line = archived_task_read(archive, task_id)
        except RetentionError as exc:
            raise CommandError(str(exc)) from exc
        if as_json:
            self.stdout.write(json.dumps(line, indent=2, ensure_ascii=False))
            return
        task = line["task"]["fields"]
        self.stdout.write(
            f"Task {task_id} ({task['agent']}), archived in {archive}\n"
            f"Goal: {task['goal']}\n"
            f"Status: {task['status']}, started {task.get('started_at')}, "
            f"finished {task.get('finished_at')}"
        )
        for step in line.get("steps", []):
            fields = step["fields"]
            self.stdout.write(
                f"  step {fields['ordinal'] + 1}: {fields['title']} ({fields['status']})"
            )
        for call in line.get("tool_calls", []):
            fields = call["fields"]
            self.stdout.write(
                f"  ledger: {fields['tool']} {fields['status']} (key {fields['idempotency_key']})"
            )
        for decision in line.get("decisions", []):
            fields = decision["fields"]
            self.stdout.write(f"  decision: {fields['action']} at {fields['created_at']}")
        counts = [f"{name} {len(rows)}" for name, rows in line.items() if name != "task"]
        self.stdout.write("Rows: " + ", ".join(counts))

    def _verify(self, archive: Path) -> None:
        try:
            found = archive_verify(archive)
        except RetentionError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"{archive}: complete: {found['tasks']} tasks, {found['files']} files, "
            f"rows {found['rows']}"
        )
