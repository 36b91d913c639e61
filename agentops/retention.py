"""Retention: archive finished tasks to JSON Lines, then erase their rows through the one path the
database lets delete the record.

The record (steps, ledger, events, snapshots, gates, audit items) is guarded by triggers
(migration 0016): a DELETE passes only inside a transaction that has said
`SET LOCAL agentops.erasing = 'on'`, which `tasks_erase` alone does. A family (a root task and its
fan-out children) is archived and erased whole, and only when every member is terminal and finished
before the cut-off. The archive is written and fsynced, with a sha256 manifest, before any row is
erased; `archive_verify` reads it back as the rows it holds (Django's own deserializer), so what
was removed can be re-imported.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from django.core import serializers
from django.core.files.storage import default_storage
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.db.models import Model
from django.utils import timezone

from agentops.engine.jsonvalues import fsync_directory
from agentops.models import (
    ArchivedTask,
    Artifact,
    AuditItem,
    Event,
    Gate,
    Snapshot,
    Step,
    Task,
    ToolCall,
)
from agentops.states import TERMINAL

ARCHIVE_FORMAT = "agentops-retention/1"
MANIFEST = "manifest.json"
TASKS_FILE = "tasks.jsonl"
# Tasks per query and per erasing transaction (`manage.py retention --batch N` sets another).
BATCH = 200

# Each task's rows, in the order a re-import would insert them.
RECORD: tuple[tuple[str, type[Model]], ...] = (
    ("steps", Step),
    ("tool_calls", ToolCall),
    ("events", Event),
    ("snapshots", Snapshot),
    ("gates", Gate),
    ("audit_items", AuditItem),
    ("artifacts", Artifact),
)

# More rows to archive beside a task's own (the decision log's, from the app that owns it): a
# name, and the rows for a list of task ids.
Extra = Callable[[list[int]], Iterable[Model]]


class RetentionError(Exception):
    """The archive is incomplete or does not match its manifest."""


@dataclass
class Plan:
    """The families retention would archive and erase."""

    task_ids: list[int]
    skipped_families: int = 0


@dataclass
class Archived:
    tasks: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    artifact_files: int = 0


def retention_plan(*, finished_before: datetime, batch: int = BATCH) -> Plan:
    """Every task of each family whose members all ended before `finished_before` (the families
    read `batch` roots at a time)."""
    roots = list(
        Task.objects.filter(
            parent__isnull=True, status__in=TERMINAL, finished_at__lt=finished_before
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    task_ids: list[int] = []
    skipped = 0
    for start in range(0, len(roots), batch):
        some = roots[start : start + batch]
        families = _families(some)
        for root in some:
            members = families[root]
            if all(_finished(row, finished_before) for row in members):
                task_ids.extend(row["pk"] for row in members)
            else:
                skipped += 1
    return Plan(task_ids=task_ids, skipped_families=skipped)


def _families(roots: list[int]) -> dict[int, list[dict[str, Any]]]:
    """Each root's family (itself and every descendant), as {pk, status, finished_at} rows."""
    fields = ("pk", "parent_id", "status", "finished_at")
    families: dict[int, list[dict[str, Any]]] = {}
    root_of: dict[int, int] = {}
    for row in Task.objects.filter(pk__in=roots).values(*fields):
        families[row["pk"]] = [row]
        root_of[row["pk"]] = row["pk"]
    frontier = list(roots)
    while frontier:
        children = list(Task.objects.filter(parent_id__in=frontier).values(*fields))
        for row in children:
            root_of[row["pk"]] = root_of[row["parent_id"]]
            families[root_of[row["pk"]]].append(row)
        frontier = [row["pk"] for row in children]
    return families


def _finished(row: dict[str, Any], before: datetime) -> bool:
    return (
        row["status"] in TERMINAL and row["finished_at"] is not None and row["finished_at"] < before
    )


def archive_write(
    directory: Path, task_ids: list[int], *, extras: dict[str, Extra], batch: int = BATCH
) -> Archived:
    """Write the tasks, their rows, their artifact files and the `extras` to `directory` (new or
    empty) with a manifest of sha256 digests, read `batch` tasks at a time; every file is fsynced
    before this returns."""
    directory.mkdir(parents=True, exist_ok=True)
    if any(directory.iterdir()):
        raise RetentionError(f"{directory} is not empty: archive into a new directory")
    archived = Archived()
    digest = hashlib.sha256()
    files: dict[str, dict[str, Any]] = {}
    with open(directory / TASKS_FILE, "wb") as out:
        for start in range(0, len(task_ids), batch):
            for line in _task_lines(task_ids[start : start + batch], extras, archived):
                out.write(line)
                digest.update(line)
        out.flush()
        os.fsync(out.fileno())
    files[TASKS_FILE] = {"sha256": digest.hexdigest(), "lines": archived.tasks}
    for name in Artifact.objects.filter(task_id__in=task_ids).values_list("name", flat=True):
        files[f"artifacts/{name}"] = _copy_artifact(name, directory)
        archived.artifact_files += 1
    manifest = {
        "format": ARCHIVE_FORMAT,
        "created_at": timezone.now().isoformat(),
        "tasks": archived.tasks,
        "rows": archived.rows,
        "files": files,
    }
    _write_synced(directory / MANIFEST, json.dumps(manifest, indent=2).encode())
    fsync_directory(str(directory))
    return archived


def _task_lines(
    task_ids: list[int], extras: dict[str, Extra], archived: Archived
) -> Iterator[bytes]:
    """One JSON line per task: the task row and, under each name, its rows."""
    tasks = Task.objects.filter(pk__in=task_ids).order_by("pk")
    grouped: dict[str, dict[int, list[Model]]] = {}
    for name, model in RECORD:
        grouped[name] = _by_task(model._default_manager.filter(task_id__in=task_ids).order_by("pk"))
    for name, rows_of in extras.items():
        grouped[name] = _by_task(rows_of(task_ids))
    for task in tasks:
        line: dict[str, Any] = {"task": _serialized([task])[0]}
        for name, by_task in grouped.items():
            rows = by_task.get(task.pk, [])
            line[name] = _serialized(rows)
            archived.rows[name] = archived.rows.get(name, 0) + len(rows)
        archived.tasks += 1
        yield json.dumps(line, cls=DjangoJSONEncoder, ensure_ascii=False).encode() + b"\n"


def _by_task(rows: Iterable[Model]) -> dict[int, list[Model]]:
    grouped: dict[int, list[Model]] = {}
    for row in rows:
        task_id = getattr(row, "task_id", None) or getattr(row, "task_id_ref", None)
        if task_id is not None:
            grouped.setdefault(task_id, []).append(row)
    return grouped


def _serialized(rows: list[Model]) -> list[dict[str, Any]]:
    serialized: list[dict[str, Any]] = serializers.serialize("python", rows)
    return serialized


def _copy_artifact(name: str, directory: Path) -> dict[str, Any]:
    target = directory / "artifacts" / name
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with default_storage.open(name, "rb") as source, open(target, "wb") as out:
        for chunk in iter(lambda: source.read(1 << 20), b""):
            digest.update(chunk)
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    return {"sha256": digest.hexdigest(), "bytes": target.stat().st_size}


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def archive_verify(directory: Path) -> dict[str, Any]:
    """Check every file against the manifest and read every row back as a model instance (as a
    re-import would); RetentionError names the first thing that does not match."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise RetentionError(f"{directory / MANIFEST}: {exc}") from exc
    if manifest.get("format") != ARCHIVE_FORMAT:
        raise RetentionError(f"{directory}: not a {ARCHIVE_FORMAT} archive")
    for name, expected in manifest["files"].items():
        actual = _sha256(directory / name)
        if actual != expected["sha256"]:
            raise RetentionError(f"{name}: sha256 {actual} does not match the manifest")
    tasks = 0
    rows: dict[str, int] = {}
    with open(directory / TASKS_FILE, encoding="utf-8") as lines:
        for number, text in enumerate(lines, start=1):
            line = json.loads(text)
            objects = [line["task"]] + [
                row for key, value in line.items() if key != "task" for row in value
            ]
            try:
                list(serializers.deserialize("python", objects))
            except serializers.base.DeserializationError as exc:
                raise RetentionError(f"{TASKS_FILE} line {number}: {exc}") from exc
            tasks += 1
            for key, value in line.items():
                if key != "task":
                    rows[key] = rows.get(key, 0) + len(value)
    if tasks != manifest["tasks"] or rows != manifest["rows"]:
        raise RetentionError(
            f"{TASKS_FILE} holds {tasks} tasks and {rows}; the manifest says "
            f"{manifest['tasks']} and {manifest['rows']}"
        )
    return {"tasks": tasks, "rows": rows, "files": len(manifest["files"])}


def archived_task_read(directory: Path, task_id: int) -> dict[str, Any]:
    """Task `task_id`'s line of the archive in `directory` (the task row and, under each name,
    its rows, as `archive_write` wrote them), once the whole archive checks out against its
    manifest (`archive_verify`). RetentionError when it does not, or holds no such task."""
    archive_verify(directory)
    with open(directory / TASKS_FILE, encoding="utf-8") as lines:
        for text in lines:
            line: dict[str, Any] = json.loads(text)
            if line["task"]["pk"] == task_id:
                return line
    raise RetentionError(f"{directory}: no task {task_id} in this archive")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as source:
            for chunk in iter(lambda: source.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        raise RetentionError(f"{path}: {exc}") from exc
    return digest.hexdigest()


def tasks_erase(task_ids: list[int], *, batch: int = BATCH, archive: Path | None = None) -> int:
    """Delete the tasks and every row of theirs (the one path the record's triggers allow), `batch`
    tasks per transaction, then their artifact files once the deletion has committed. Returns how
    many tasks were deleted. With `archive`, each task leaves an `ArchivedTask` saying where it
    went, in the transaction that deletes it.

    The caller has archived them (or they are a benchmark's own scratch tasks)."""
    names = list(Artifact.objects.filter(task_id__in=task_ids).values_list("name", flat=True))
    deleted = 0
    for start in range(0, len(task_ids), batch):
        some = task_ids[start : start + batch]
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL agentops.erasing = 'on'")
            # A compensation row points at the call it undid (PROTECT): unlink them first, the
            # collector would refuse to delete a protected row even when it goes too.
            ToolCall.objects.filter(task_id__in=some, compensation_of__isnull=False).update(
                compensation_of=None
            )
            if archive is not None:
                ArchivedTask.objects.bulk_create(
                    ArchivedTask(task_id=pk, created_by_id=starter, archive=str(archive))
                    for pk, starter in Task.objects.filter(pk__in=some).values_list(
                        "pk", "created_by_id"
                    )
                )
            deleted += Task.objects.filter(pk__in=some).delete()[1].get("agentops.Task", 0)
    transaction.on_commit(lambda: _artifact_files_delete(names, task_ids))
    return deleted


def _artifact_files_delete(names: list[str], task_ids: list[int]) -> None:
    for name in names:
        default_storage.delete(name)
    for task_id in task_ids:
        # Not a local directory, or never created: nothing to remove.
        with suppress(OSError, NotImplementedError):
            Path(default_storage.path(f"artifacts/{task_id}")).rmdir()
