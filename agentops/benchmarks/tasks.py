"""What the benchmarks share: a raw connection to the database, and removing what a benchmark
created (its tasks, their rows and their artifact files)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg
from django.core.files.storage import default_storage
from django.db import connection

from agentops.models import Artifact, Task


def bench_tasks_delete(task_ids: list[int]) -> None:
    """Delete the benchmark's tasks, their rows (cascade) and their artifact files."""
    for name in Artifact.objects.filter(task_id__in=task_ids).values_list("name", flat=True):
        default_storage.delete(name)
    Task.objects.filter(pk__in=task_ids).delete()
    for task_id in task_ids:
        # Not a local directory, or never created: nothing to remove.
        with suppress(OSError, NotImplementedError):
            Path(default_storage.path(f"artifacts/{task_id}")).rmdir()


@contextmanager
def raw_postgres(dbname: str | None = None) -> Iterator[psycopg.Connection]:
    """An autocommit psycopg connection to Django's database (or to `dbname` on its server),
    outside the ORM."""
    conf = connection.settings_dict
    raw = psycopg.connect(
        dbname=dbname or conf["NAME"],
        user=conf["USER"],
        password=conf["PASSWORD"] or None,
        host=conf["HOST"] or None,
        port=conf["PORT"] or None,
        autocommit=True,
    )
    try:
        yield raw
    finally:
        raw.close()
