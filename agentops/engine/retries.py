"""Retry policy: how long a failed step waits before its next try, and when it has had its tries.

Decisions only; the runner commits what they decide. Attempts are counted before execution (a
crash loop counts too), so a step at its cap is stopped before it starts again.
"""

from __future__ import annotations

from django.conf import settings

from agentops.engine.errors import FailureKind, OrchestrationFailure, StepFailure, UnknownTool
from agentops.engine.registry import Tool, get_tool, is_fan_out
from agentops.models import Step, Task, ToolCall
from agentops.plumbing.outages import exponential_backoff
from agentops.states import LedgerStatus


def backoff_seconds(attempt: int, retry_after: float | None, base: float | None = None) -> float:
    """Exponential backoff with jitter, never sooner than the remote's Retry-After."""
    conf = settings.AGENTOPS
    base = float(conf["BACKOFF_BASE_SECONDS"]) if base is None else base
    delay = exponential_backoff(attempt, base=base, cap=float(conf["BACKOFF_MAX_SECONDS"]))
    return max(delay, retry_after or 0.0)


def attempt_cap(task: Task, tool: Tool | None) -> int:
    """How many tries a step that calls `tool` gets: the task's cap, or the tool's own
    (`max_attempts`) when it declares a lower one."""
    cap = task.step_retry_cap
    if tool is not None and tool.max_attempts is not None:
        cap = min(cap, tool.max_attempts)
    return cap


def step_tool(step: Step) -> Tool | None:
    """The registered tool a step calls: the one its recorded model response proposed (the
    refund's plan names `issue_refund`, the model may call `issue_refund_legacy`), else its
    plan's; None for a step without one (or a tool this deploy does not register: the step
    stops for that on its own)."""
    name = None
    if isinstance(step.model_response, dict):
        calls = step.model_response.get("tool_calls") or []
        name = calls[0].get("name") if calls and isinstance(calls[0], dict) else None
    name = name or (step.spec or {}).get("tool")
    if not isinstance(name, str):
        return None
    try:
        return get_tool(name)
    except UnknownTool:
        return None


def retry_delay(
    failure: StepFailure, *, attempts: int, task: Task, tool: Tool | None = None
) -> float | None:
    """Seconds to wait before the next try of a step that failed after `attempts` tries, or
    None when it is not retried (the failure is not retryable, or the step is at its cap: the
    task's, or the tool's own if lower). The tool's `backoff_base` replaces the setting's."""
    if not (failure.retryable and attempts < attempt_cap(task, tool)):
        return None
    return backoff_seconds(attempts, failure.retry_after, tool.backoff_base if tool else None)


def at_cap(task: Task, step: Step) -> bool:
    """The step has had all its tries (`attempt_cap`: its tool's own cap counts). A fan-out
    step is claimed again each time its children wake it; its children have their own caps."""
    return step.attempts >= attempt_cap(task, step_tool(step)) and not is_fan_out(step)


def cap_failure(task: Task, step: Step) -> StepFailure:
    """The failure that stops a task whose step is at its cap, carrying the step's last one.
    A step with none (its error is cleared when a try starts) had a last try that did not
    finish: its worker stopped mid-step, a process crash (`unfinished` in the detail). Tests
    that kill no worker fail on one (tests/conftest.py): an error the engine does not classify
    is recorded on the step it interrupts (`TaskRun.escaped`), and is the last failure here."""
    last = step.error or {}
    tool = step_tool(step)
    cap = attempt_cap(task, tool)
    whose = f"tool {tool.name}'s own cap" if tool and cap < task.step_retry_cap else "cap"
    attempted = f"step {step.ordinal + 1} was attempted {step.attempts} times ({whose} {cap})"
    detail = {"step": step.ordinal, "last_failure": last or None, "attempt_cap": cap}
    if not last:
        return OrchestrationFailure(
            f"{attempted}; its last try did not finish: its worker stopped mid-step (killed, "
            "out of memory, or an error in the worker's log)",
            kind=FailureKind.PROCESS_CRASH,
            retryable=False,
            detail={**detail, "unfinished": True},
        )
    return OrchestrationFailure(
        f"{attempted}; last failure: {last.get('message', last.get('kind'))}",
        kind=FailureKind(last.get("kind", FailureKind.RETRY_CAP)),
        retryable=False,
        detail=detail,
    )


def has_failed_try(step: Step) -> bool:
    """The step's tool call failed before (a retryable failure): the retry re-issues that call
    with the same key instead of routing the action again."""
    return ToolCall.objects.filter(
        step=step, compensation_of__isnull=True, status=LedgerStatus.FAILED
    ).exists()
