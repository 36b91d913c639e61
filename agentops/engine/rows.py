"""Model instances from the rows of a hand-written statement, for the engine's hot reads.

The runner reads a task's rows once per claim. Building those queries through the ORM costs more
CPU than running them, so these few reads are plain SQL (sent prepared, see `transitions`), and
their rows become model instances here: every column is converted exactly as the ORM converts it
(JSON columns arrive as text and are decoded by their field), and the instance is made by
`Model.from_db`, as a queryset makes it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import connection, models

M = TypeVar("M", bound=models.Model)

Converter = Callable[[Any, Any, Any], Any]


@functools.cache
def _layout(model: type[models.Model]) -> tuple[list[str], list[tuple[int, Converter, Any]]]:
    """The model's attribute names in column order, and the converters of the columns that
    have any (with the column expression the ORM passes them)."""
    fields = model._meta.concrete_fields
    converters = []
    for index, field in enumerate(fields):
        column = field.get_col(model._meta.db_table)
        # The backend's converters, then the field's: the order a queryset applies them in.
        for converter in [
            *connection.ops.get_db_converters(column),
            *column.get_db_converters(connection),
        ]:
            converters.append((index, converter, column))
    return [field.attname for field in fields], converters


@functools.cache
def columns(model: type[models.Model], alias: str | None = None) -> str:
    """The select list of every concrete column, in the order `instance` reads them."""
    table = alias or model._meta.db_table
    return ", ".join(f'"{table}"."{field.column}"' for field in model._meta.concrete_fields)


def instance(model: type[M], row: Sequence[Any]) -> M:
    """A `model` instance from a row selected with `columns(model)` (extra columns after them
    are ignored)."""
    names, converters = _layout(model)
    values = list(row[: len(names)])
    for index, converter, column in converters:
        values[index] = converter(values[index], column, connection)
    return model.from_db(connection.alias, names, values)
