"""Retry policy: how long a failed step waits before its next try, and when it has had its tries.

Decisions only; the runner commits what they decide. Attempts are counted before execution (a
crash loop counts too), so a step at its cap is stopped before it starts again.
"""

from __future__ import annotations

from django.conf import settings

from agentops.engine import children
from agentops.engine.errors import FailureKind, OrchestrationFailure, StepFailure
from agentops.engine.registry import Tool
from agentops.models import Step, Task, ToolCall
from agentops.outages import exponential_backoff
from agentops.states import LedgerStatus


def backoff_seconds(attempt: int, retry_after: float | None, base: float | None = None) -> float:
    """Exponential backoff with jitter, never sooner than the remote's Retry-After."""
    conf = settings.AGENTOPS
    base = float(conf["BACKOFF_BASE_SECONDS"]) if base is None else base
    delay = exponential_backoff(attempt, base=base, cap=float(conf["BACKOFF_MAX_SECONDS"]))
    return max(delay, retry_after or 0.0)


def retry_delay(
    failure: StepFailure, *, attempts: int, task: Task, tool: Tool | None = None
) -> float | None:
    """Seconds to wait before the next try of a step that failed after `attempts` tries, or
    None when it is not retried (the failure is not retryable, or the step is at its cap: the
    task's, or the tool's own if lower)."""
    cap = task.step_retry_cap
    if tool is not None and tool.max_attempts is not None:
        cap = min(cap, tool.max_attempts)
    if not (failure.retryable and attempts < cap):
        return None
    return backoff_seconds(attempts, failure.retry_after, tool.backoff_base if tool else None)


def at_cap(task: Task, step: Step) -> bool:
    """The step has had all its tries. A fan-out step is claimed again each time its children
    wake it; its children have their own caps."""
    return step.attempts >= task.step_retry_cap and not children.is_fan_out(step)


def cap_failure(task: Task, step: Step) -> StepFailure:
    """The failure that stops a task whose step is at its cap, carrying the step's last one.
    A step with none (its error is cleared when a try starts) had a last try that did not
    finish: its worker stopped mid-step. Tests fail on "none recorded" (tests/conftest.py): an
    error the engine does not classify must not end a try unrecorded."""
    last = step.error or {}
    unfinished = (
        "none recorded: the last try did not finish (its worker stopped mid-step: killed, out "
        "of memory, or an error in the worker's log)"
    )
    return OrchestrationFailure(
        f"step {step.ordinal + 1} was attempted {step.attempts} times (cap "
        f"{task.step_retry_cap}); last failure: {last.get('message', unfinished)}",
        kind=FailureKind(last.get("kind", FailureKind.RETRY_CAP)),
        retryable=False,
        detail={"step": step.ordinal, "last_failure": last or None},
    )


def has_failed_try(step: Step) -> bool:
    """The step's tool call failed before (a retryable failure): the retry re-issues that call
    with the same key instead of routing the action again."""
    return ToolCall.objects.filter(
        step=step, compensation_of__isnull=True, status=LedgerStatus.FAILED
    ).exists()
