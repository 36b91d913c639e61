"""The checkpoint benchmark's report: the medians of its pairs (a floor run and a task run each),
the ratios to the floor, and the table `manage.py bench checkpoint` prints. The measurement is
`checkpoint.py`'s.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection


@dataclass
class Pair:
    """One repeat: a floor run and a task run, with what the WAL and the hook saw."""

    task_id: int
    task_seconds: float
    task_cpu_seconds: float
    floor_seconds: float
    floor_rows: int
    statements: int
    hook_commits: int
    task_wal: tuple[int, int] | None = None
    floor_wal: tuple[int, int] | None = None
    figures: dict[str, Any] = field(default_factory=dict)


def median_of(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def ratio_to_floor(task_ms: list[float], floor_ms: list[float]) -> float | None:
    """The median of the per-pair ratios (each pair's run over its own floor), ours and the
    peers' alike: drift on a shared machine hits both sides of each ratio."""
    return rounded(median_of([t / f for t, f in zip(task_ms, floor_ms, strict=True)]), 2)


def report_of(
    pairs: list[Pair], *, steps: int, payload_kb: int, notes: list[str]
) -> dict[str, Any]:
    def per_step_ms(seconds: float, count: int) -> float:
        return seconds * 1000 / count

    def figure(key: str) -> float | None:
        return median_of([p.figures.get(key) for p in pairs])

    task_ms = [per_step_ms(p.task_seconds, steps) for p in pairs]
    floor_ms = [per_step_ms(p.floor_seconds, p.floor_rows) for p in pairs]
    if all("wal_commits" in p.figures for p in pairs):
        commits = median_of([p.figures["wal_commits"] / steps for p in pairs])
        source = "WAL commit records"
    else:
        commits = median_of([p.hook_commits / steps for p in pairs])
        source = "statement hook"
    for p in pairs:
        if "interval_note" in p.figures:
            notes.append(f"task {p.task_id}: {p.figures['interval_note']}")
    first, last = figure("bytes_per_step_first"), figure("bytes_per_step_last")
    step_first, step_last = figure("step_bytes_per_step_first"), figure("step_bytes_per_step_last")
    return {
        "benchmark": "checkpoint",
        "backend": connection.vendor,
        "steps": steps,
        "payload_kb": payload_kb,
        "repeat": len(pairs),
        "per_step_ms": rounded(median_of(task_ms)),
        "floor_per_step_ms": rounded(median_of(floor_ms)),
        "ratio_to_floor": ratio_to_floor(task_ms, floor_ms),
        "bytes_per_step_first": rounded(first, 0),
        "bytes_per_step_last": rounded(last, 0),
        "last_to_first": rounded(last / first if first and last else None, 2),
        "step_bytes_per_step_first": rounded(step_first, 0),
        "step_bytes_per_step_last": rounded(step_last, 0),
        "step_last_to_first": rounded(
            step_last / step_first if step_first and step_last else None, 3
        ),
        "client_cpu_ms_per_step": rounded(
            median_of([per_step_ms(p.task_cpu_seconds, steps) for p in pairs])
        ),
        "commits_per_step": rounded(commits, 2),
        "commits_source": source,
        "statements_per_step": rounded(median_of([p.statements / steps for p in pairs]), 1),
        "wal_bytes_per_step": rounded(figure("wal_bytes_per_step"), 0),
        "wal_fpi_bytes_per_step": rounded(figure("wal_fpi_bytes_per_step"), 0),
        "fpi_bytes_per_step_first": rounded(figure("fpi_bytes_per_step_first"), 0),
        "fpi_bytes_per_step_last": rounded(figure("fpi_bytes_per_step_last"), 0),
        "floor_bytes_per_step": rounded(figure("floor_bytes_per_step"), 0),
        "runs": [
            {
                "task_ms_per_step": rounded(t),
                "client_cpu_ms_per_step": rounded(per_step_ms(p.task_cpu_seconds, steps)),
                "floor_ms_per_step": rounded(f),
                "statements": p.statements,
                "hook_commits": p.hook_commits,
                **{k: rounded(v, 1) if isinstance(v, float) else v for k, v in p.figures.items()},
            }
            for p, t, f in zip(pairs, task_ms, floor_ms, strict=True)
        ],
        "notes": notes,
    }


def checkpoint_table(report: dict[str, Any]) -> str:
    keys = [
        "per_step_ms",
        "client_cpu_ms_per_step",
        "floor_per_step_ms",
        "ratio_to_floor",
        "bytes_per_step_first",
        "bytes_per_step_last",
        "last_to_first",
        "step_bytes_per_step_first",
        "step_bytes_per_step_last",
        "step_last_to_first",
        "commits_per_step",
        "statements_per_step",
        "wal_bytes_per_step",
        "floor_bytes_per_step",
    ]
    lines = [
        f"checkpoint bench: {report['steps']} steps, {report['payload_kb']} KB payload, "
        f"{report['backend']}, median of {report['repeat']}, kind {report.get('kind', 'read')}",
        *(f"  {key:<22} {report[key]}" for key in keys),
        *(
            f"  {key:<22} {report[key]}"
            for key in ("dispatch_ms_per_job", "worker_ms_per_job", "in_process_ms_per_job")
            if key in report
        ),
        f"  commits from {report['commits_source']}",
        *(
            f"  kind {kind:<7} per_step_ms {k['per_step_ms']:<7} ratio_to_floor "
            f"{k['ratio_to_floor']:<6} (target <= {k['target_ratio_to_floor']}) "
            f"client_cpu_ms_per_step {k['client_cpu_ms_per_step']:<7} commits_per_step "
            f"{k['commits_per_step']}"
            for kind, k in report.get("kinds", {}).items()
        ),
        *(
            f"  peer {peer['peer']:<17} ratio_to_floor {peer['ratio_to_floor']:<6} "
            f"per_step_ms {peer['per_step_ms']:<7} client_cpu_ms_per_step "
            f"{peer['client_cpu_ms_per_step']:<7} ({peer['version']})"
            for peer in report.get("peers", [])
        ),
        *(
            [
                f"  ratio_to_best_peer     {report['ratio_to_best_peer']} ({report['best_peer']}); "
                f"per_step_to_best_peer {report['per_step_to_best_peer']}"
            ]
            if "peers" in report
            else []
        ),
        *(f"  note: {note}" for note in [*report["notes"], report.get("dispatch_note")] if note),
    ]
    return "\n".join(lines)
