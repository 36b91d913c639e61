"""The SQL builder of the one-statement commit: its assignments, inserts and parameters, the
prepared cursor it is sent on, and the artifact ids it reserves. Statement text is made once per
shape (functools.cache), so the server prepares each one once per connection.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal
from typing import Any, cast

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.models import F, Value
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Now
from django.db.models.sql import UpdateQuery

from agentops.models import Artifact


class ClockTimestamp(models.Func):
    """PostgreSQL's `clock_timestamp()`: the time the row is actually written.

    `now()` is the transaction's start: a claim that waited on a lock would be granted a lease
    that had already run out while it waited.
    """

    template = "clock_timestamp()"
    output_field = models.DateTimeField()


class DbTimeAfter(models.ExpressionWrapper):  # type: ignore[type-arg]
    """The database clock plus `seconds` (the one-statement commit writes it without the ORM)."""

    def __init__(self, seconds: float) -> None:
        self.delta = timedelta(seconds=seconds)
        super().__init__(ClockTimestamp() + Value(self.delta), output_field=models.DateTimeField())


def db_time_after(seconds: float) -> Any:
    """The database clock plus `seconds`, as an expression: leases and due times never depend
    on a worker's clock."""
    return DbTimeAfter(seconds)


def lease_deadline() -> Any:
    return db_time_after(settings.AGENTOPS["LEASE_SECONDS"])


class _PreparedCursor(psycopg.Cursor):
    """Server-side parameters, prepared on first use: the hot path's statements are parsed and
    planned once per connection (unless the connections go through a pooler that cannot keep
    prepared statements: `DB_PREPARED_STATEMENTS`, then each is sent unnamed)."""

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        return super().execute(query, params, prepare=settings.AGENTOPS["DB_PREPARED_STATEMENTS"])


@contextmanager
def prepared_cursor() -> Iterator[Any]:
    # The connection itself, not the `connection` proxy (a thread-local lookup per use).
    db: Any = connections[DEFAULT_DB_ALIAS]
    # As Django's own cursors do: a connection a new request or job may find dead (the worker's
    # `close_old_connections` asks for that check) is tested first, and replaced if it is.
    db.close_if_health_check_failed()
    db.ensure_connection()
    raw = db.connection
    if raw.prepare_threshold is None:
        # Django turns automatic preparing off; explicit `prepare=True` needs a threshold set.
        raw.prepare_threshold = PREPARE_THRESHOLD
    # One psycopg cursor per connection (making one copies the adapters map); Django's wrapper
    # around it is made each time, so query logging and execute wrappers apply.
    cursor = _CURSORS.get(raw)
    if cursor is None or cursor.closed:
        cursor = _CURSORS[raw] = _PreparedCursor(raw)
    with db.wrap_database_errors:
        # Django's own wrapping (debug logging, execute wrappers) around a cursor it did not make.
        yield db._prepare_cursor(cursor)


_CURSORS: weakref.WeakKeyDictionary[Any, _PreparedCursor] = weakref.WeakKeyDictionary()


def prepared_rows(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """The rows of a read sent as a prepared statement: the runner's reads once per claim,
    which the ORM would spend more CPU building than the server spends running."""
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        return cast(list[tuple[Any, ...]], cursor.fetchall())


# Only queries sent with `prepare=True` are prepared: Django's own cursors bind client-side.
PREPARE_THRESHOLD = 1_000_000


def _quote(name: str) -> str:
    return f'"{name}"'


def assignments(
    model: type[models.Model], fields: dict[str, Any], params: list[Any], json_text: JsonTexts
) -> str:
    """`"col" = ...` for each field, its value as a parameter (typed by the column) or, for
    `Now()`, `F(name) + n` and other expressions, as SQL. The text is made once per shape (the
    fields and the kind of each value); only another expression is compiled each time."""
    shape: list[tuple[str, str | None]] = []
    compiled: dict[str, str] = {}
    for name, value in fields.items():
        kind = _kind(name, value)
        shape.append((name, kind))
        if kind == "after":
            params.append(value.delta)
        elif kind == "increment":
            params.append(value.rhs.value)
        elif kind == "value":
            params.append(db_value(_column(model, name)[0], value, json_text))
        elif kind is None:
            compiled[name] = _compiled(model, name, value, params)
    if not compiled:
        return _sets_sql(model, tuple(shape))
    return ", ".join(
        compiled[name] if kind is None else _sets_sql(model, ((name, kind),))
        for name, kind in shape
    )


# Values of these exact types are parameters, never expressions.
_PLAIN_VALUES = frozenset({type(None), bool, int, float, str, dict, list, Decimal})


def _kind(name: str, value: Any) -> str | None:
    """How a field's value is written: the statement's clock (`now`), the database clock plus
    an interval (`after`), an increment of the column (`increment`: tokens, cost), a parameter
    (`value`), or None for another expression (compiled by the ORM)."""
    if value.__class__ in _PLAIN_VALUES:
        return "value"
    if isinstance(value, Now):
        return "now"
    if isinstance(value, DbTimeAfter):
        return "after"
    if (
        isinstance(value, CombinedExpression)
        and value.connector == "+"
        and isinstance(value.lhs, F)
        and isinstance(value.rhs, Value)
        and value.lhs.name == name
    ):
        return "increment"
    if hasattr(value, "resolve_expression"):
        return None
    return "value"


@functools.cache
def _sets_sql(model: type[models.Model], shape: tuple[tuple[str, str | None], ...]) -> str:
    table = model._meta.db_table
    sets = []
    for name, kind in shape:
        _, column, cast_type = _column(model, name)
        if kind == "now":
            sets.append(f"{column} = STATEMENT_TIMESTAMP()")
        elif kind == "after":
            sets.append(f"{column} = clock_timestamp() + CAST(%s AS interval)")
        elif kind == "increment":
            sets.append(f'{column} = "{table}".{column} + CAST(%s AS {cast_type})')
        else:
            sets.append(f"{column} = CAST(%s AS {cast_type})")
    return ", ".join(sets)


def _compiled(model: type[models.Model], name: str, value: Any, params: list[Any]) -> str:
    """`"col" = <expression>` for an expression the statement has no shape for."""
    _, column, cast_type = _column(model, name)
    query = UpdateQuery(model)
    compiler = query.get_compiler(connection=connection)
    resolved = value.resolve_expression(query, allow_joins=False, for_save=True)
    sql, expression_params = compiler.compile(resolved)
    params.extend(expression_params)
    return f"{column} = CAST({sql} AS {cast_type})"


@functools.cache
def _column(model: type[models.Model], name: str) -> tuple[Any, str, str]:
    """A model field, its quoted column and the type its parameters are cast to."""
    model_field = cast(Any, model._meta.get_field(name))
    return model_field, _quote(model_field.column), model_field.cast_db_type(connection)


def db_value(model_field: Any, value: Any, json_text: JsonTexts) -> Any:
    """The parameter for `value` in `model_field`'s column, as `get_db_prep_save` gives it,
    except that JSON is sent as its text and a status (a str enum) as a plain str: psycopg
    dumps those without an adapter lookup each (the statement casts every parameter to its
    column's type, so PostgreSQL reads the same value)."""
    if value is None:
        return None
    if isinstance(model_field, models.JSONField):
        return json_text(value)
    kind = type(value)
    if kind is int or kind is bool:
        # What `get_db_prep_save` gives an integer, key or boolean column; the cast to the
        # column's type reads it in any other column as PostgreSQL would read its text.
        return value
    if isinstance(value, str):
        return str.__str__(value)
    return model_field.get_db_prep_save(value, connection)


class JsonTexts:
    """The JSON texts of one commit's values, by identity: a value stored in two columns (a
    step's output that is also its call's result) is serialized once."""

    def __init__(self) -> None:
        # The values are kept with their texts, so an id is not reused while it is here.
        self._texts: dict[int, tuple[Any, str]] = {}

    def __call__(self, value: Any) -> str:
        known = self._texts.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        text = json_text_of(value)
        if isinstance(value, (dict, list)):
            self._texts[id(value)] = (value, text)
        return text

    def remember(self, value: Any, data: bytes) -> None:
        """`value`'s JSON is `data` (made already, to size it): the commit sends that."""
        if isinstance(value, (dict, list)):
            self._texts[id(value)] = (value, data.decode())


def json_text_of(value: Any) -> str:
    """A JSON value as the text its jsonb parameter is sent as (what psycopg's `Jsonb` sends:
    `json.dumps`, without the spaces)."""
    return _JSONB_TEXT(value)


# `json.dumps(value, separators=(",", ":"))` makes this encoder on every call: made once.
_JSONB_TEXT = json.JSONEncoder(separators=(",", ":")).encode


@functools.cache
def one_of(statuses: frozenset[str]) -> str:
    """`IN (...)` of the statuses as SQL literals: they come from the transition tables, so the
    statement text stays one per shape (prepared once) and needs no array parameter."""
    if not statuses:
        return "IS NULL AND FALSE"
    if not all(status.isidentifier() for status in statuses):
        raise ValueError(f"not a status: {sorted(statuses)}")
    return f"IN ({', '.join(repr(str.__str__(status)) for status in sorted(statuses))})"


@functools.cache
def insert_shape(
    model: type[models.Model], refers: tuple[str, str] | None = None
) -> tuple[str, list[Any]]:
    """`INSERT` of a new row joined to the fence (creation times from the statement's clock),
    and the fields whose values are its parameters, in order. `refers`: (a foreign key, the
    name of another part of the statement that inserts the row it names): the key is that
    row's id, and the row is inserted only with it."""
    columns, values, inserted = [], [], []
    for model_field in model._meta.concrete_fields:
        if model_field.primary_key:
            continue
        _, column, cast_type = _column(model, model_field.name)
        columns.append(column)
        if getattr(model_field, "auto_now_add", False):
            values.append("STATEMENT_TIMESTAMP()")
            continue
        if refers is not None and model_field.name == refers[0]:
            values.append(f'{refers[1]}."id"')
            continue
        values.append(f"CAST(%s AS {cast_type})")
        inserted.append(model_field)
    joined = "fence" if refers is None else f"fence, {refers[1]}"
    sql = (
        f'INSERT INTO "{model._meta.db_table}" ({", ".join(columns)}) '
        f'SELECT {", ".join(values)} FROM {joined} RETURNING "id"'
    )
    return sql, inserted


@functools.cache
def artifact_insert() -> str:
    """`INSERT` of an artifact row with a reserved id, joined to the fence."""
    table = Artifact._meta.db_table
    names = ("id", "task", "name", "size", "sha256")
    columns = [_column(Artifact, name) for name in names]
    values = ", ".join(f"CAST(%s AS {cast_type})" for _, _, cast_type in columns)
    content_type = Artifact._meta.get_field("content_type").get_default()
    return (
        f'INSERT INTO "{table}" ({", ".join(column for _, column, _ in columns)}, '
        '"content_type", "created_at") '
        f"SELECT {values}, '{content_type}', STATEMENT_TIMESTAMP() FROM fence RETURNING \"id\""
    )


# Artifact ids are reserved from the table's sequence this many at a time, per process and
# database: one round trip per block instead of one per artifact. An id left unused is a gap in
# the sequence, as a rolled-back INSERT leaves.
ARTIFACT_ID_BLOCK = 128
_ARTIFACT_IDS: dict[str, list[int]] = {}
# The web tier's threads share a process's ids.
_ARTIFACT_IDS_LOCK = threading.Lock()
# A forked child (gunicorn's workers, RQ's work horses) reserves its own.
os.register_at_fork(after_in_child=_ARTIFACT_IDS.clear)


def artifact_id_reserved() -> int:
    """An id from the artifact table's sequence that no other row will take."""
    database = connections[DEFAULT_DB_ALIAS].settings_dict["NAME"]
    with _ARTIFACT_IDS_LOCK:
        free = _ARTIFACT_IDS.setdefault(database, [])
        if not free:
            sql = (
                "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s) "
                "ORDER BY 1 DESC"
            )
            table = Artifact._meta.db_table
            free.extend(row[0] for row in prepared_rows(sql, [table, ARTIFACT_ID_BLOCK]))
        return free.pop()
