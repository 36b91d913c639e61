"""Figures about tasks and steps for the dashboard, the report command and Prometheus.

Read-only selectors over the engine's tables: how many tasks reached their last step, where the
others stopped, and what resuming from checkpoints saved. Tokens saved by resume are computed in
one place (`task_tokens_saved_by_resume`) from the recorded event log, so the definition can be
switched to a recorded figure later without touching its readers.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import QuerySet, Sum

from agentops.models import Task
from agentops.states import TERMINAL, TaskStatus


@dataclass(frozen=True)
class Window:
    """The figures' filter: tasks created in [since, until), optionally of one agent."""

    since: datetime
    until: datetime
    agent: str = ""

    @property
    def days(self) -> float:
        return max((self.until - self.since).total_seconds() / 86400, 1 / 24)


def tasks_in(window: Window) -> QuerySet[Task]:
    tasks = Task.objects.filter(created_at__gte=window.since, created_at__lt=window.until)
    if window.agent:
        tasks = tasks.filter(agent=window.agent)
    return tasks.order_by()


def agent_names() -> list[str]:
    """Every agent that has a task, for the dashboard's filter."""
    return list(Task.objects.order_by("agent").values_list("agent", flat=True).distinct())


# -- completion ----------------------------------------------------------------------------------

# The four ways a task stops between start and finish (seed 000), by the failure kinds that
# record them. Other kinds are not one of the four.
SEED_MODES: dict[str, str] = {
    "budget_overflow": "duration overflow",
    "authorization_gap": "authorization gap",
    "context_overflow": "context exhaustion",
    "low_confidence": "confidence collapse",
}
# Settled tasks have an outcome a person can judge: ended, or stopped for a person.
SETTLED = frozenset({*TERMINAL, TaskStatus.NEEDS_ATTENTION})


@dataclass
class Completion:
    tasks: int = 0
    settled: int = 0
    reached_last_step: int = 0
    in_flight: int = 0
    # 1-based step position -> tasks that stopped there without reaching their last step.
    stopped_at: dict[int, int] = field(default_factory=dict)
    failure_kinds: dict[str, int] = field(default_factory=dict)
    seed_modes: dict[str, int] = field(default_factory=dict)
    by_status: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float | None:
        """Share of settled tasks that reached their last step (None without settled tasks)."""
        return self.reached_last_step / self.settled if self.settled else None


def task_completion(window: Window) -> Completion:
    """Tasks created in the window: how many reached their last step (status `succeeded`), and
    for the settled others, the step they stopped at, their failure kind and seed-000 mode."""
    figures = Completion()
    stopped_at: Counter[int] = Counter()
    kinds: Counter[str] = Counter()
    modes: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    rows = tasks_in(window).values_list("status", "current_step", "step_count", "failure")
    for status, current, count, failure in rows:
        figures.tasks += 1
        statuses[status] += 1
        if status not in SETTLED:
            figures.in_flight += 1
            continue
        figures.settled += 1
        if status == TaskStatus.SUCCEEDED:
            figures.reached_last_step += 1
            continue
        stopped_at[min(current + 1, count) if count else 0] += 1
        kind = (failure or {}).get("kind") or "none recorded"
        kinds[kind] += 1
        modes[SEED_MODES.get(kind, "other")] += 1
    figures.stopped_at = dict(sorted(stopped_at.items()))
    figures.failure_kinds = dict(kinds.most_common())
    figures.seed_modes = dict(modes.most_common())
    figures.by_status = dict(statuses.most_common())
    return figures


# -- resume savings ------------------------------------------------------------------------------

_SAVED_SQL = """
WITH marks AS (
    SELECT task_id, seq, action, (payload ->> 'recovered') = 'true' AS recovered,
           LAG(action) OVER (PARTITION BY task_id ORDER BY seq) AS previous
    FROM agentops_event
    WHERE action IN ('agentops.task.claimed', 'agentops.step.failed', 'agentops.task.failed')
      {task_filter}
), last_recovery AS (
    SELECT task_id, MAX(seq) AS seq
    FROM marks
    WHERE action = 'agentops.task.claimed'
      AND (recovered OR previous IN ('agentops.step.failed', 'agentops.task.failed'))
    GROUP BY task_id
), done AS (
    SELECT DISTINCT e.task_id, e.step_ordinal
    FROM agentops_event e JOIN last_recovery r ON r.task_id = e.task_id
    WHERE e.action = 'agentops.step.completed' AND e.seq < r.seq
), step_usage AS (
    SELECT DISTINCT ON (e.task_id, e.step_ordinal) e.task_id, e.step_ordinal,
           COALESCE((e.payload -> 'usage' ->> 'prompt_tokens')::bigint, 0)
           + COALESCE((e.payload -> 'usage' ->> 'completion_tokens')::bigint, 0) AS tokens
    FROM agentops_event e JOIN last_recovery r ON r.task_id = e.task_id
    WHERE e.action = 'agentops.step.model_result' AND e.seq < r.seq
    ORDER BY e.task_id, e.step_ordinal, e.seq DESC
)
SELECT d.task_id, SUM(u.tokens)
FROM done d JOIN step_usage u ON u.task_id = d.task_id AND u.step_ordinal = d.step_ordinal
GROUP BY d.task_id
"""


def task_tokens_saved_by_resume(task_ids: list[int] | None = None) -> dict[int, int]:
    """Tokens a rerun from scratch would have spent again, per task (tasks without a recovery
    are absent): the recorded model usage of the steps completed before the task's last
    recovery. A recovery is a claim that took over from a holder that died while running, or
    the first claim after a step (or the task) failed, i.e. a backoff retry or a person's
    retry. One query; `task_ids=None` means every task."""
    params: list[Any] = []
    task_filter = ""
    if task_ids is not None:
        if not task_ids:
            return {}
        task_filter = "AND task_id = ANY(%s)"
        params.append(list(task_ids))
    with connection.cursor() as cursor:
        cursor.execute(_SAVED_SQL.format(task_filter=task_filter), params)
        return {task_id: int(tokens or 0) for task_id, tokens in cursor.fetchall()}


def resume_savings_by_agent() -> dict[str, int]:
    """Tokens saved by resume over every task, by agent (for the Prometheus gauge)."""
    saved = task_tokens_saved_by_resume()
    agents = dict(Task.objects.filter(pk__in=list(saved)).values_list("pk", "agent"))
    totals: Counter[str] = Counter()
    for task_id, tokens in saved.items():
        totals[agents.get(task_id, "")] += tokens
    return dict(totals)


def token_cost(tokens: int) -> Decimal:
    """What `tokens` cost at the configured price (the runner's own accounting)."""
    return Decimal(tokens) * Decimal(str(settings.AGENTOPS["COST_PER_1K_TOKENS"])) / 1000


@dataclass(frozen=True)
class ResumeSavings:
    tokens_spent: int
    cost_spent: Decimal
    tokens_saved: int
    cost_saved: Decimal
    tasks_resumed: int

    @property
    def tokens_from_scratch(self) -> int:
        """What the same work would have cost had every recovery rerun its task from scratch."""
        return self.tokens_spent + self.tokens_saved

    @property
    def cost_from_scratch(self) -> Decimal:
        return self.cost_spent + self.cost_saved


def resume_savings(window: Window) -> ResumeSavings:
    tasks = tasks_in(window)
    spent = tasks.aggregate(tokens=Sum("tokens_used"), cost=Sum("cost_used"))
    saved = task_tokens_saved_by_resume(list(tasks.values_list("pk", flat=True)))
    tokens_saved = sum(saved.values())
    return ResumeSavings(
        tokens_spent=int(spent["tokens"] or 0),
        cost_spent=Decimal(spent["cost"] or 0),
        tokens_saved=tokens_saved,
        cost_saved=token_cost(tokens_saved),
        tasks_resumed=len(saved),
    )
