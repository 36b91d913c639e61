"""The model's context, rebuilt from durable rows in layers on every call.

Core: system prompt, goal, the current step and the last five exchanges. Earlier work: a summary of
completed steps extracted by rule. The latest tool result verbatim. After a resume, a system note
says the task continues from a checkpoint. Nothing here is persisted: it is derived state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentops.engine.jsonvalues import canonical_json, digest, is_pointer
from agentops.engine.registry import Agent
from agentops.models import Step, Task
from agentops.states import STEP_DONE

RECENT_EXCHANGES = 5
SUMMARY_CHARS = 160
# A recent tool result up to this size is kept whole; the latest one always is.
RECENT_RESULT_CHARS = 2000


def _short(value: Any, limit: int = SUMMARY_CHARS) -> str:
    if is_pointer(value):
        return f"<artifact {value['size']} bytes sha256 {value['sha256'][:12]}>"
    text = canonical_json(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def executed_calls(step: Step) -> list[dict[str, Any]]:
    """The step's tool calls as the ledger ran them: a person's approved (edited) arguments
    replace the model's proposal, marked `edited`, so the model reads what really happened."""
    calls = [dict(c) for c in ((step.model_response or {}).get("tool_calls") or [])]
    approval = step.approval if isinstance(step.approval, dict) else None
    if calls and approval and approval.get("tool") == calls[0].get("name"):
        calls[0]["arguments"] = approval.get("arguments")
        calls[0]["edited"] = bool(approval.get("edited"))
    return calls


def _exchange(step: Step, *, verbatim: bool) -> list[dict[str, Any]]:
    response = step.model_response or {}
    calls = executed_calls(step)
    messages: list[dict[str, Any]] = [
        {"role": "assistant", "content": response.get("text", ""), "tool_calls": calls}
    ]
    if step.output is not None:
        whole = not is_pointer(step.output) and (
            verbatim or len(canonical_json(step.output)) <= RECENT_RESULT_CHARS
        )
        messages.append({"role": "tool", "content": step.output if whole else _short(step.output)})
    return messages


def summary_line(step: Step) -> str:
    calls = executed_calls(step)
    tool = calls[0]["name"] if calls else "no tool"
    return f"Step {step.ordinal + 1} '{step.title}' ({tool}) {step.status}: {_short(step.output)}"


def build_messages(
    *,
    agent: Agent,
    task: Task,
    steps: Sequence[Step],
    current: Step | None,
    resumed_at: str | None = None,
    notes: Sequence[str] = (),
    recent: int | None = None,
) -> list[dict[str, Any]]:
    """The prompt for `current` (or for planning when None), from the recorded steps.

    `recent` overrides how many of the latest exchanges are kept whole (fewer after a context
    overflow, so more of the earlier work is summarized by rule)."""
    done = [
        s
        for s in steps
        if s.status in STEP_DONE and (current is None or s.ordinal < current.ordinal)
    ]
    split = max(len(done) - (RECENT_EXCHANGES if recent is None else recent), 0)
    older, recent_steps = done[:split], done[split:]
    messages: list[dict[str, Any]] = [{"role": "system", "content": agent.system_prompt}]
    if resumed_at:
        messages.append(
            {
                "role": "system",
                "content": f"Note: this task is resumed from a checkpoint ({resumed_at}). "
                "Completed "
                "steps are listed below and must not be repeated.",
            }
        )
    messages.append(
        {
            "role": "user",
            "content": f"Goal: {task.goal}\nInput: {canonical_json(_visible_input(task.input))}",
        }
    )
    if older:
        messages.append(
            {
                "role": "system",
                "content": "Earlier work:\n" + "\n".join(summary_line(s) for s in older),
            }
        )
    for index, step in enumerate(recent_steps):
        messages.extend(_exchange(step, verbatim=index == len(recent_steps) - 1))
    messages.extend({"role": "user", "content": f"Operator note: {note}"} for note in notes)
    if current is None:
        messages.append({"role": "user", "content": "Produce the plan as JSON."})
    else:
        messages.append(
            {
                "role": "user",
                "content": (
                    f"Now do step {current.ordinal + 1} of {task.step_count}: {current.title}"
                ),
            }
        )
    return messages


def _visible_input(task_input: dict[str, Any]) -> dict[str, Any]:
    """Fault-injection settings are for the scripted model and the simulator, not the prompt."""
    return {k: v for k, v in task_input.items() if not k.endswith("_faults")}


def prompt_digest(messages: list[dict[str, Any]]) -> str:
    return digest(messages)
