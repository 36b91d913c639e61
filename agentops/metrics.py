"""Figures about tasks and steps for the dashboard, the report command and Prometheus.

Read-only selectors over the engine's tables: how many tasks reached their last step, where the
others stopped, and what resuming from checkpoints saved. Tokens saved by resume have one
definition, the runner's (`TaskRun._tokens_saved_by_resume`, recorded on each recovery in
`Task.tokens_saved`): every figure here reads that column.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.db.models import Count, Q, QuerySet, Sum
from prometheus_client.core import GaugeMetricFamily, Metric

from agentops.engine.costs import token_cost
from agentops.engine.errors import FailureKind
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
    FailureKind.BUDGET_OVERFLOW: "duration overflow",
    FailureKind.AUTHORIZATION_GAP: "authorization gap",
    FailureKind.CONTEXT_OVERFLOW: "context exhaustion",
    FailureKind.LOW_CONFIDENCE: "confidence collapse",
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


def task_tokens_saved_by_resume(task_ids: list[int] | None = None) -> dict[int, int]:
    """Tokens saved by resume per task, as the runner recorded them (tasks that saved none are
    absent); `task_ids=None` means every task. One query."""
    tasks = Task.objects.filter(tokens_saved__gt=0)
    if task_ids is not None:
        tasks = tasks.filter(pk__in=task_ids)
    return dict(tasks.values_list("pk", "tokens_saved"))


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
    """Spent and saved by resume over the window's tasks (one query)."""
    figures = tasks_in(window).aggregate(
        tokens=Sum("tokens_used"),
        cost=Sum("cost_used"),
        saved=Sum("tokens_saved"),
        resumed=Count("pk", filter=Q(tokens_saved__gt=0)),
    )
    tokens_saved = int(figures["saved"] or 0)
    return ResumeSavings(
        tokens_spent=int(figures["tokens"] or 0),
        cost_spent=Decimal(figures["cost"] or 0),
        tokens_saved=tokens_saved,
        cost_saved=token_cost(tokens_saved),
        tasks_resumed=figures["resumed"],
    )


def tasks_state_metrics() -> Iterable[Metric]:
    """The Prometheus gauges of the tasks' state: tasks by status and agent, and tokens, cost and
    tokens saved by resume per agent (registered by `agentops.apps`, read on every scrape)."""
    tasks = GaugeMetricFamily(
        "agentops_tasks", "Tasks by status and agent.", labels=["status", "agent"]
    )
    tokens = GaugeMetricFamily("agentops_tokens_spent", "Tokens spent, by agent.", labels=["agent"])
    cost = GaugeMetricFamily("agentops_cost_spent", "Cost spent, by agent.", labels=["agent"])
    saved = GaugeMetricFamily(
        "agentops_tokens_saved_by_resume",
        "Tokens a rerun from scratch would have spent again, as the runner recorded them on "
        "each recovery (Task.tokens_saved; see docs/metrics.md).",
        labels=["agent"],
    )
    rows = (
        Task.objects.order_by()
        .values("status", "agent")
        .annotate(
            n=Count("id"),
            tokens=Sum("tokens_used"),
            cost=Sum("cost_used"),
            saved=Sum("tokens_saved"),
        )
    )
    per_agent: dict[str, list[float]] = {}
    for row in rows:
        tasks.add_metric([row["status"], row["agent"]], row["n"])
        figures = per_agent.setdefault(row["agent"], [0.0, 0.0, 0.0])
        figures[0] += float(row["tokens"] or 0)
        figures[1] += float(row["cost"] or 0)
        figures[2] += float(row["saved"] or 0)
    for agent, (agent_tokens, agent_cost, agent_saved) in sorted(per_agent.items()):
        tokens.add_metric([agent], agent_tokens)
        cost.add_metric([agent], agent_cost)
        if agent_saved:
            saved.add_metric([agent], agent_saved)
    yield from (tasks, tokens, cost, saved)
