"""What the benchmarks share: a raw connection to the database, and removing what a benchmark
created (its tasks, their rows and their artifact files)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from django.core.management.base import CommandError
from django.db import connection
from psycopg import sql

from agentops.plumbing.dburl import database_url
from agentops.retention import tasks_erase


def bench_tasks_delete(task_ids: list[int]) -> None:
    """Delete the benchmark's scratch tasks, their rows and their artifact files (through the
    one path the record's triggers let delete)."""
    tasks_erase(task_ids)


@contextmanager
def raw_postgres(dbname: str | None = None) -> Iterator[psycopg.Connection]:
    """An autocommit psycopg connection to Django's database (or to `dbname` on its server),
    outside the ORM, with the same options (TLS and the rest) as Django's."""
    raw = psycopg.connect(database_url(connection.settings_dict, name=dbname), autocommit=True)
    try:
        yield raw
    finally:
        raw.close()


# PostgreSQL cuts longer names short: two scratch databases could then be one.
DATABASE_NAME_MAX = 63


def scratch_database_name(suffix: str) -> str:
    """`<name>_<suffix>`, beside Django's database; CommandError when PostgreSQL would cut it."""
    name = f"{connection.settings_dict['NAME']}_{suffix}"
    if len(name.encode()) > DATABASE_NAME_MAX:
        raise CommandError(
            f"the scratch database name {name!r} is longer than PostgreSQL's "
            f"{DATABASE_NAME_MAX} bytes: use a database with a shorter name"
        )
    return name


def database_recreate(name: str) -> None:
    """Drop the database `name` (closing its connections) and create it empty."""
    with raw_postgres("postgres") as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def database_drop(name: str) -> None:
    with raw_postgres("postgres") as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
