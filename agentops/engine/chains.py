"""The record's hash chains, read back: is each chain whole, and what are its heads?

The database writes the chains (agentops 0031, reviews 0022): each task's events (by seq), its
snapshots (by seq) and its ledger rows once their result is fixed (by `chain_seq`), and the
decision log (by `chain_seq`); a row's digest is `agentops_chain_digest(previous row's digest,
<table>_content(row))`. Checking a chain asks the same functions again for every row, so a
row whose content changed, a row deleted from the middle (a gap in the places, or the next row
no longer following), and a final ledger row left out of its chain are each named by the first
row where they show.

Someone able to switch the triggers off (a superuser, `session_replication_role = replica`) can
rewrite a row and every digest after it, so the chain is whole again. The heads
(`chain_heads`: each chain's last place and digest) kept somewhere else catch that: compared
later (`heads_compare`), the row at a kept place no longer has the kept digest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection

from agentops.models import ArchivedTask, Event, Snapshot, ToolCall

# name: (table, the column that orders the chain, its content function, the row's words)
_TASK_CHAINS = {
    "events": (Event._meta.db_table, "seq", "agentops_event_content", "event"),
    "snapshots": (Snapshot._meta.db_table, "seq", "agentops_snapshot_content", "snapshot"),
    "ledger": (ToolCall._meta.db_table, "chain_seq", "agentops_toolcall_content", "ledger row"),
}
DECISION_LOG = "decisions"
_DECISION_TABLE = "reviews_decision"
# Ledger rows whose result is fixed: each has a place in the chain.
_FINAL_LEDGER = ("succeeded", "failed", "compensated")


@dataclass(frozen=True)
class ChainBreak:
    """Where a chain stops holding: `chain` is events, snapshots, ledger or decisions, `task_id`
    None for the decision log, `place` the row's seq or chain place, `row` its id."""

    chain: str
    task_id: int | None
    place: int | None
    row: int | None
    why: str

    def __str__(self) -> str:
        return f"{_chain_words(self.chain, self.task_id)}: {self.why}"

    def as_json(self) -> dict[str, Any]:
        return {
            "chain": self.chain,
            "task": self.task_id,
            "place": self.place,
            "row": self.row,
            "why": self.why,
        }


def _chain_words(chain: str, task_id: int | None) -> str:
    return "the decision log" if task_id is None else f"task {task_id}'s {chain}"


def _rows(table: str, order: str, content: str, where: str, params: list[Any]) -> list[Any]:
    """Every chained row in order: its id, place, stored digest, the digest its content and
    the previous row's stored digest give, and the previous row's place."""
    sql = (
        f'SELECT r."id", r."{order}", r."digest", agentops_chain_digest(lag(r."digest") OVER w, '
        f'{content}(r)), lag(r."{order}") OVER w FROM "{table}" r WHERE {where} '
        f'WINDOW w AS (ORDER BY r."{order}") ORDER BY r."{order}"'
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def _first_break(
    chain: str, task_id: int | None, rows: list[Any], words: str, gapless: bool
) -> ChainBreak | None:
    """The first row of `rows` (from `_rows`) where the chain does not hold. `gapless`: its
    places are 1, 2, 3, ... (events, ledger rows, decisions); snapshots' are not."""
    expected_place = 1
    for row_id, place, digest, recomputed, previous in rows:
        if gapless and place != expected_place:
            missing = (
                f"#{expected_place}"
                if place == expected_place + 1
                else f"#{expected_place} to #{place - 1}"
            )
            return ChainBreak(
                chain, task_id, place, row_id, f"{words} {missing} missing before #{place}"
            )
        expected_place = place + 1
        if digest != recomputed:
            why = (
                f"{words} #{place}'s content does not give its digest"
                if previous is None
                else f"{words} #{place} does not follow from #{previous}: one of them was changed"
            )
            return ChainBreak(chain, task_id, place, row_id, why)
    return None


def task_chain_breaks(task_id: int) -> list[ChainBreak]:
    """The first break of each of the task's chains (none when all three hold)."""
    breaks = []
    for chain, (table, order, content, words) in _TASK_CHAINS.items():
        rows = _rows(
            table, order, content, f'r."task_id" = %s AND r."{order}" IS NOT NULL', [task_id]
        )
        found = _first_break(chain, task_id, rows, words, gapless=chain != "snapshots")
        if found is not None:
            breaks.append(found)
    unchained = (
        ToolCall.objects.filter(task_id=task_id, status__in=_FINAL_LEDGER, chain_seq__isnull=True)
        .order_by("id")
        .first()
    )
    if unchained is not None and not any(b.chain == "ledger" for b in breaks):
        breaks.append(
            ChainBreak(
                "ledger",
                task_id,
                None,
                unchained.pk,
                f"ledger row {unchained.pk} is {unchained.status} but not in the chain",
            )
        )
    return breaks


def decision_log_break() -> ChainBreak | None:
    """The decision log's first break, or None when it holds."""
    rows = _rows(
        _DECISION_TABLE,
        "chain_seq",
        "reviews_decision_content",
        'r."chain_seq" IS NOT NULL',
        [],
    )
    return _first_break(DECISION_LOG, None, rows, "decision", gapless=True)


def chain_heads() -> dict[str, Any]:
    """Every chain's head, to keep somewhere else: `{"decisions": [place, digest] | None,
    "tasks": {task id: {chain: [place, digest]}}}`."""
    heads: dict[str, Any] = {"decisions": None, "tasks": {}}
    with connection.cursor() as cursor:
        for chain, (table, order, _, _) in _TASK_CHAINS.items():
            cursor.execute(
                f'SELECT DISTINCT ON ("task_id") "task_id", "{order}", "digest" FROM "{table}" '
                f'WHERE "{order}" IS NOT NULL ORDER BY "task_id", "{order}" DESC'
            )
            for task_id, place, digest in cursor.fetchall():
                heads["tasks"].setdefault(str(task_id), {})[chain] = [place, digest]
        cursor.execute(
            f'SELECT "chain_seq", "digest" FROM "{_DECISION_TABLE}" '
            'WHERE "chain_seq" IS NOT NULL ORDER BY "chain_seq" DESC LIMIT 1'
        )
        last = cursor.fetchone()
        heads["decisions"] = list(last) if last else None
    return heads


def heads_compare(kept: dict[str, Any], *, task_id: int | None = None) -> list[ChainBreak]:
    """Where the chains no longer reach the `kept` heads (from `chain_heads`): the row at a kept
    place is gone or has another digest. Tasks kept but since archived and erased by retention
    are not counted. `task_id`: that task's chains only (and not the decision log)."""
    breaks = []
    tasks = kept.get("tasks", {})
    for key in [str(task_id)] if task_id is not None else sorted(tasks, key=int):
        for chain, head in tasks.get(key, {}).items():
            table, order, _, words = _TASK_CHAINS[chain]
            found = _head_break(chain, int(key), table, order, words, head)
            if found is not None:
                breaks.append(found)
    if task_id is None and kept.get("decisions"):
        found = _head_break(
            DECISION_LOG, None, _DECISION_TABLE, "chain_seq", "decision", kept["decisions"]
        )
        if found is not None:
            breaks.append(found)
    return breaks


def _head_break(
    chain: str, task_id: int | None, table: str, order: str, words: str, head: list[Any]
) -> ChainBreak | None:
    place, digest = int(head[0]), str(head[1])
    where, params = f'"{order}" = %s', [place]
    if task_id is not None:
        if _erased(task_id):
            return None
        where, params = f'"task_id" = %s AND {where}', [task_id, place]
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT "id", "digest" FROM "{table}" WHERE {where}', params)
        found = cursor.fetchone()
    if found is None:
        return ChainBreak(chain, task_id, place, None, f"{words} #{place}, a kept head, is gone")
    if found[1] != digest:
        return ChainBreak(
            chain,
            task_id,
            place,
            found[0],
            f"{words} #{place} no longer has the kept digest: the chain was rewritten up to it",
        )
    return None


def _erased(task_id: int) -> bool:
    return ArchivedTask.objects.filter(task_id=task_id).exists()
