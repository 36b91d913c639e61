"""Artifact files kept in PostgreSQL, so that every host reads what any host wrote.

`AGENTOPS_ARTIFACT_STORAGE=postgres` makes this Django's default storage (see settings.py). Why
the database rather than an S3-compatible store (docs/scaling.md argues it at length): it is the
one stateful service every web and worker process already reaches, so a second host needs no new
credentials, bucket or network path; a file is durable when its INSERT returns, before the
checkpoint's statement that points at it, so no committed pointer names a missing file; and a
database backup holds the artifacts with the record that points at them. The cost is
database size and WAL: artifacts are payloads above the threshold (256 KB), and retention deletes
them with their tasks.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.files.base import ContentFile, File
from django.core.files.storage import Storage
from django.db import connection
from django.utils.deconstruct import deconstructible

from agentops.models import StoredFile


@deconstructible(path="agentops.storage.DatabaseStorage")
class DatabaseStorage(Storage):
    """Django's storage API over the `StoredFile` table: one row per file, its bytes in `bytea`.

    Files are written once and never changed (artifact names are content addresses); a name that
    another writer took first with other bytes is saved under an alternative name, as the file
    system storage does."""

    def _open(self, name: str, mode: str = "rb") -> File[Any]:
        if set(mode) - {"r", "b"}:
            raise ValueError(f"{name}: files in the database are read-only, not opened {mode!r}")
        content = StoredFile.objects.filter(name=name).values_list("content", flat=True).first()
        if content is None:
            raise FileNotFoundError(f"{name}: no such file in the database")
        return ContentFile(bytes(content), name=name)

    def _save(self, name: str, content: File[bytes]) -> str:
        data = b"".join(content.chunks())  # Storage.save hands every content over as a File
        while not _inserted(name, data):
            if _holds(name, data):
                return name  # a concurrent writer stored the same bytes under the same name
            name = self.get_alternative_name(*os.path.splitext(name))
        return name

    def exists(self, name: str) -> bool:
        return StoredFile.objects.filter(name=name).exists()

    def size(self, name: str) -> int:
        size = StoredFile.objects.filter(name=name).values_list("size", flat=True).first()
        if size is None:
            raise FileNotFoundError(f"{name}: no such file in the database")
        return size

    def delete(self, name: str) -> None:
        StoredFile.objects.filter(name=name).delete()


def _inserted(name: str, data: bytes) -> bool:
    """Insert the file unless the name is taken (in the caller's transaction, if one is open)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {StoredFile._meta.db_table} (name, content, size, created_at) "
            "VALUES (%s, %s, %s, now()) ON CONFLICT (name) DO NOTHING RETURNING id",
            [name, data, len(data)],
        )
        return cursor.fetchone() is not None


def _holds(name: str, data: bytes) -> bool:
    stored = (
        StoredFile.objects.filter(name=name, size=len(data))
        .values_list("content", flat=True)
        .first()
    )
    return stored is not None and bytes(stored) == data
