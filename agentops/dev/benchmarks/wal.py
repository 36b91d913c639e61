"""What a benchmark run wrote, measured: the WAL records between two LSNs of the transactions that
changed this database's own tables (`WalReader`, pg_walinspect through a temporary replication
slot), and the write statements and commits the client sent (`StatementCounter`). The checkpoint
and pages benchmarks measure with them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from django.db import transaction

WRITE = re.compile(
    r"\s*(INSERT|UPDATE|DELETE)\b|\s*WITH\b.*\b(INSERT|UPDATE|DELETE)\b", re.I | re.S
)
BLOCK_REF = re.compile(r"rel \d+/(\d+)/(\d+)")
FIRST_NORMAL_OBJECT_ID = 16384  # PostgreSQL's: every object below it is the system's own


@dataclass(frozen=True)
class WalRecord:
    start: int
    end: int
    xid: int
    resource_manager: str
    record_type: str
    length: int
    fpi: int
    relations: frozenset[tuple[int, int]]


@dataclass
class WalWindow:
    """The WAL a run wrote to this database, read back from the server."""

    records: list[WalRecord]

    @property
    def bytes(self) -> int:
        return sum(r.length for r in self.records)

    @property
    def record_bytes(self) -> int:
        """Bytes without full-page images: those depend on when the last checkpoint ran (other
        databases on the cluster trigger them), not on what the step wrote."""
        return self.bytes - self.fpi_bytes

    @property
    def fpi_bytes(self) -> int:
        return sum(r.fpi for r in self.records)

    def commits(self) -> list[WalRecord]:
        return [
            r
            for r in self.records
            if r.resource_manager == "Transaction" and r.record_type.startswith("COMMIT")
        ]

    def between(self, after: int, upto: int) -> WalWindow:
        return WalWindow([r for r in self.records if after <= r.start < upto])

    def touching(self, relations: set[tuple[int, int]]) -> WalWindow:
        """The records that change one of `relations` (database oid, filenode)."""
        return WalWindow([r for r in self.records if r.relations & relations])

    def without(self, relations: set[tuple[int, int]]) -> WalWindow:
        """The records that change none of `relations` (commits stay)."""
        return WalWindow([r for r in self.records if not r.relations & relations])


class WalReader:
    """LSNs and WAL records of this database, through a raw autocommit connection."""

    def __init__(self, raw: psycopg.Connection) -> None:
        self.raw = raw
        raw.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        row = raw.execute(
            "SELECT oid FROM pg_database WHERE datname = current_database()"
        ).fetchone()
        assert row is not None
        self.dboid = int(row[0])
        # The system catalogs' storage: an ANALYZE (autovacuum's included) writes only there.
        self.catalogs = {
            (self.dboid, int(filenode))
            for (filenode,) in raw.execute(
                "SELECT pg_relation_filenode(oid) FROM pg_class WHERE oid < %s",
                (FIRST_NORMAL_OBJECT_ID,),
            ).fetchall()
            if filenode is not None
        }
        self.note = ""
        # A checkpoint (ours or another database's) may recycle the segments before we read
        # them; a temporary slot keeps them until this session ends.
        try:
            raw.execute(
                "SELECT pg_create_physical_replication_slot(%s, true, true)",
                (f"agentops_bench_{os.getpid()}",),
            )
        except psycopg.Error as exc:
            self.note = (
                f"no replication slot ({exc.diag.message_primary}): a checkpoint during the "
                "run may make its WAL unreadable"
            )

    @classmethod
    def open(cls, raw: psycopg.Connection) -> tuple[WalReader | None, str]:
        try:
            reader = cls(raw)
        except psycopg.Error as exc:
            return (
                None,
                f"bytes not measured: pg_walinspect unavailable ({exc.diag.message_primary})",
            )
        return reader, reader.note

    def lsn(self, *, flushed: bool = False) -> int:
        """Where the next record goes; with `flushed`, how far the WAL is on disk (this ends a
        window: our commits are flushed before they return, and WAL can only be read up to it)."""
        function = "pg_current_wal_flush_lsn" if flushed else "pg_current_wal_insert_lsn"
        row = self.raw.execute(f"SELECT {function}() - '0/0'::pg_lsn").fetchone()
        assert row is not None
        return int(row[0])

    def filenode(self, table: str) -> int:
        row = self.raw.execute("SELECT pg_relation_filenode(%s::regclass)", (table,)).fetchone()
        assert row is not None
        return int(row[0])

    def table_relations(self, table: str) -> set[tuple[int, int]]:
        """A table's storage: its heap, its indexes, its TOAST table and that table's index."""
        rows = self.raw.execute(
            "WITH t AS (SELECT oid, reltoastrelid FROM pg_class WHERE oid = %s::regclass)"
            " SELECT pg_relation_filenode(c.oid) FROM pg_class c, t"
            " WHERE c.oid IN (t.oid, t.reltoastrelid) OR c.oid IN (SELECT indexrelid"
            " FROM pg_index WHERE indrelid IN (t.oid, t.reltoastrelid))",
            (table,),
        ).fetchall()
        return {(self.dboid, int(filenode)) for (filenode,) in rows if filenode is not None}

    def window(self, start: int, end: int) -> WalWindow:
        """Every record in [start, end) (commits and locks included) of the transactions that
        changed one of this database's own relations: what its sessions wrote.

        Left out: other databases' records; the server's housekeeping, which belongs to no
        transaction (vacuum, pruning); and transactions that change only system catalogs. An
        auto-analyze during a run rewrites its tables' statistics (hundreds of KB on this
        schema): a CI run once counted 1,300 bytes more per step in the half it fell in.
        """
        rows = self.raw.execute(
            "SELECT start_lsn - '0/0'::pg_lsn, end_lsn - '0/0'::pg_lsn, xid::text::bigint,"
            " resource_manager, record_type, record_length, fpi_length, coalesce(block_ref, '')"
            " FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)",
            (_lsn_text(start), _lsn_text(end)),
        ).fetchall()
        records = [
            WalRecord(
                start=int(a),
                end=int(b),
                xid=int(xid),
                resource_manager=rm,
                record_type=kind,
                length=int(length),
                fpi=int(fpi or 0),
                relations=frozenset((int(db), int(rel)) for db, rel in BLOCK_REF.findall(refs)),
            )
            for a, b, xid, rm, kind, length, fpi, refs in rows
        ]
        ours = {
            r.xid
            for r in records
            if r.xid
            and any(db == self.dboid and (db, rel) not in self.catalogs for db, rel in r.relations)
        }
        return WalWindow([r for r in records if r.xid in ours])


def _lsn_text(position: int) -> str:
    return f"{position >> 32:X}/{position & 0xFFFFFFFF:X}"


class StatementCounter:
    """Django execute wrapper: counts statements and committed write transactions.

    A write (including a data-modifying WITH) inside an atomic block registers one on_commit
    callback for that transaction (gone if it rolls back); in autocommit mode it is a commit of
    its own.
    """

    def __init__(self) -> None:
        self.statements = 0
        self.commits = 0

    def _committed(self) -> None:
        self.commits += 1

    def __call__(
        self,
        execute: Callable[..., Any],
        sql: str,
        params: Any,
        many: bool,
        context: dict[str, Any],
    ) -> Any:
        self.statements += 1
        result = execute(sql, params, many, context)
        if WRITE.match(sql):
            conn = context["connection"]
            if not conn.in_atomic_block:
                self.commits += 1
            elif not any(func == self._committed for _, func, _ in conn.run_on_commit):
                transaction.on_commit(self._committed, using=conn.alias)
        return result
