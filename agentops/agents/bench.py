"""A no-op agent for the checkpoint benchmark: every step is one model call and, by the task's
input `kind`, one tool call that only reads (`read`, the default), one with a side effect
(`effect`), or none (`reply`: the model answers in text). With `fail_every` N, the tool call of
every Nth step fails once (unavailable, retryable) and succeeds on its retry. (`model_seconds`
is the scripted model's: each call takes that long.)

The tools run in-process (no network), so the benchmark measures the runner and its commits: a
read or a reply commits once per step, a side effect twice (its `pending` row before it runs).
"""

from __future__ import annotations

from typing import Any

from agentops.sdk import (
    Agent,
    FailureKind,
    ModelRequest,
    PlanStep,
    ToolContext,
    ToolFailure,
    register_agent,
    tool,
)

MAX_STEPS = 200
# The task input's `kind` -> the tool each step calls (None: a text reply).
KIND_TOOLS = {"read": "bench_echo", "effect": "bench_write", "reply": None}


# The keys whose first call failed (`fail`): their retry succeeds. Per process, like the tools.
_FAILED_ONCE: set[str] = set()


def _fail_once(call: ToolContext) -> None:
    if call.idempotency_key not in _FAILED_ONCE:
        _FAILED_ONCE.add(call.idempotency_key)
        raise ToolFailure("bench: unavailable once", kind=FailureKind.UNAVAILABLE, retryable=True)


@tool(side_effect="read", systems=("bench",))
def bench_echo(call: ToolContext, *, payload: str, n: int, fail: bool = False) -> dict[str, Any]:
    """Return the payload (stands for a tool with a result of that size)."""
    if fail:
        _fail_once(call)
    return {"n": n, "payload": payload}


@tool(side_effect="write", systems=("bench",), idempotent_remote=True)
def bench_write(call: ToolContext, *, payload: str, n: int, fail: bool = False) -> dict[str, Any]:
    """Return the payload (stands for a write of that size, to a remote that honours keys)."""
    if fail:
        _fail_once(call)
    return {"n": n, "payload": payload}


def bench_kind(task_input: dict[str, Any]) -> str:
    kind = str(task_input.get("kind", "read"))
    if kind not in KIND_TOOLS:
        raise ValueError(f"bench kind must be one of {sorted(KIND_TOOLS)}, not {kind!r}")
    return kind


def bench_script(request: ModelRequest) -> dict[str, Any]:
    size = int(request.task_input.get("payload_kb", 2)) * 1024
    payload = (f"step {request.step} " * (size // 7 + 1))[:size]
    name = KIND_TOOLS[bench_kind(request.task_input)]
    if name is None:
        return {"text": payload, "tool_calls": [], "confidence": 1.0}
    arguments: dict[str, Any] = {"payload": payload, "n": request.step}
    every = int(request.task_input.get("fail_every", 0))
    if every and request.step % every == every - 1:
        arguments["fail"] = True
    return {
        "text": "",
        "tool_calls": [{"name": name, "arguments": arguments}],
        "confidence": 1.0,
    }


def bench_plan(task_input: dict[str, Any]) -> list[PlanStep]:
    name = KIND_TOOLS[bench_kind(task_input)]
    steps = min(MAX_STEPS, int(task_input.get("steps", 20)))
    return [PlanStep(f"Echo {i + 1}", name) for i in range(steps)]


register_agent(
    Agent(
        name="bench_noop",
        description="Benchmark: one model call and one tool call (or none) per step.",
        system_prompt="Echo the payload.",
        tools=["bench_echo", "bench_write"],
        plan=bench_plan,
        script=bench_script,
        hidden=True,
    )
)
