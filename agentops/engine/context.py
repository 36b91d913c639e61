"""The model's context, rebuilt from durable rows in layers on every call.

Core: system prompt, goal, the current step and the last five exchanges. Earlier work: a summary of
completed steps extracted by rule. The latest tool result verbatim. After a resume, a system note
says the task continues from a checkpoint. Nothing here is persisted: it is derived state.

Exchanges are in the chat-completions format: the assistant's `tool_calls` carry the ids recorded
with the step's model response, and each result is a `tool` message answering its id, so a context
rebuilt after a crash sends the same ids. The prompt is kept under a budget (a fraction of the
model's window, default 50 %): older work is summarized first, then the summary is shortened.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agentops.engine.jsonvalues import canonical_json, digest, is_pointer
from agentops.engine.model import assistant_message, tool_message
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


def call_id(step: Step, call: dict[str, Any], index: int) -> str:
    """The id recorded with the call; responses recorded before ids existed get a stable one."""
    return str(call.get("id") or f"call_s{step.pk}_{index}")


def _engine_calls(step: Step) -> list[dict[str, Any]]:
    """A step the engine ran itself (a fan-out, a handoff) made no model call: it is shown as a
    call of a function named after it, answered with its result, so the model (and a scripted
    agent's `latest_tool_result`) reads its result like a tool's."""
    spec = step.spec or {}
    if step.model_response is not None or step.output is None:
        return []
    if spec.get("fan_out"):
        name = str(spec["fan_out"])
    elif spec.get("handoff"):
        name = f"handoff_to_{spec['handoff']}"
    else:
        return []
    return [{"id": f"call_s{step.pk}_engine", "name": name, "arguments": {}}]


def _exchange(step: Step, *, verbatim: bool) -> list[dict[str, Any]]:
    response = step.model_response or {}
    text = response.get("text", "")
    calls = [{**call, "id": call_id(step, call, i)} for i, call in enumerate(executed_calls(step))]
    calls = calls or _engine_calls(step)
    if not calls:
        return [assistant_message(text, [])] if text else []
    if step.output is None:
        result: Any = f"(no result: step {step.status})"
    else:
        whole = not is_pointer(step.output) and (
            verbatim or len(canonical_json(step.output)) <= RECENT_RESULT_CHARS
        )
        result = step.output if whole else _short(step.output)
    # Every call of the assistant message is answered, as the API requires.
    return [assistant_message(text, calls), *(tool_message(c["id"], result) for c in calls)]


def summary_line(step: Step) -> str:
    """One line of the "earlier work" summary. Each prompt of a long task summarizes every
    older step again: the line is remembered per step while what it is made of is the same."""
    key = (step.status, step.ordinal, step.title)
    sources = (step.output, step.model_response, step.approval)
    cached = _SUMMARIES.get(step.pk)
    if (
        cached is not None
        and cached[0] == key
        and all(a is b for a, b in zip(cached[1], sources, strict=True))
    ):
        return cached[2]
    calls = executed_calls(step)
    tool = calls[0]["name"] if calls else "no tool"
    line = f"Step {step.ordinal + 1} '{step.title}' ({tool}) {step.status}: {_short(step.output)}"
    if step.pk is not None:
        if len(_SUMMARIES) >= SUMMARY_CACHE_SIZE:
            _SUMMARIES.clear()
        # The sources are kept (not their ids): identity means the same recorded values.
        _SUMMARIES[step.pk] = (key, sources, line)
    return line


SUMMARY_CACHE_SIZE = 10_000
_SUMMARIES: dict[int, tuple[tuple[Any, ...], tuple[Any, ...], str]] = {}


@dataclass(frozen=True)
class Context:
    """A built prompt and what it cost: the estimate, the budget, how many completed steps are
    summarized rather than sent whole, and whether even the shortest form is over budget."""

    messages: list[dict[str, Any]]
    tokens: int
    budget: int
    summarized: int
    over_budget: bool
    scale: float = 1.0
    # The unscaled estimate and the prompt digest, from the one canonical form of the messages.
    estimate: int = 0
    digest: str = ""


def budget_for(agent: Agent) -> int:
    """Tokens the prompt may use: a fraction (AGENTOPS_CONTEXT_BUDGET_FRACTION, default 0.5) of
    the model's window (the agent's, else AGENTOPS_CONTEXT_WINDOW_TOKENS)."""
    conf = settings.AGENTOPS
    window = agent.context_window or conf["CONTEXT_WINDOW_TOKENS"]
    return max(1, int(window * conf["CONTEXT_BUDGET_FRACTION"]))


def build_context(
    *,
    agent: Agent,
    task: Task,
    steps: Sequence[Step],
    current: Step | None,
    resumed_at: str | None = None,
    notes: Sequence[str] = (),
    recent: int | None = None,
    budget: int | None = None,
    scale: float = 1.0,
) -> Context:
    """The prompt for `current` (or for planning when None), from the recorded steps, under
    `budget` tokens (default: `budget_for(agent)`).

    `recent` caps how many of the latest exchanges are kept whole (fewer after a context
    overflow). Over budget, older exchanges are summarized first, one at a time; then the
    summary keeps only its latest lines. `scale` corrects the character-based estimate by what
    the provider reported for an earlier prompt (see `calibration`)."""
    budget = budget_for(agent) if budget is None else budget
    done = [
        s
        for s in steps
        if s.status in STEP_DONE and (current is None or s.ordinal < current.ordinal)
    ]
    keep = min(RECENT_EXCHANGES if recent is None else recent, len(done))
    summary_keep: int | None = None
    while True:
        messages = _assemble(
            agent=agent,
            task=task,
            done=done,
            keep=keep,
            summary_keep=summary_keep,
            current=current,
            resumed_at=resumed_at,
            notes=notes,
        )
        text = canonical_json(messages)
        estimate = max(1, len(text) // 4)
        tokens = math.ceil(estimate * scale)
        older = len(done) - keep
        fits = tokens <= budget
        if not fits and keep > 0:
            keep -= 1
        elif not fits and older and (summary_keep is None or summary_keep > 0):
            summary_keep = older // 2 if summary_keep is None else summary_keep // 2
        else:
            return Context(
                messages,
                tokens,
                budget,
                older,
                not fits,
                scale,
                estimate,
                hashlib.sha256(text.encode()).hexdigest(),
            )


def calibration(steps: Sequence[Step], *, before: Step | None = None) -> float:
    """Provider-reported prompt tokens per estimated token, from the latest step (before
    `before`) whose recorded usage has both (1.0 when none has; bounded to 0.25..4)."""
    for step in sorted(steps, key=lambda s: s.ordinal, reverse=True):
        if before is not None and step.ordinal >= before.ordinal:
            continue
        usage = (step.model_response or {}).get("usage") or {}
        reported, estimated = usage.get("prompt_tokens"), usage.get("prompt_estimate")
        if isinstance(reported, int) and isinstance(estimated, int) and reported and estimated:
            return round(min(max(reported / estimated, 0.25), 4.0), 3)
    return 1.0


def build_messages(**kwargs: Any) -> list[dict[str, Any]]:
    """`build_context(...).messages`."""
    return build_context(**kwargs).messages


def _assemble(
    *,
    agent: Agent,
    task: Task,
    done: list[Step],
    keep: int,
    summary_keep: int | None,
    current: Step | None,
    resumed_at: str | None,
    notes: Sequence[str],
) -> list[dict[str, Any]]:
    split = len(done) - keep
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
        lines = [summary_line(s) for s in older]
        if summary_keep is not None and summary_keep < len(lines):
            omitted = len(lines) - summary_keep
            lines = [
                f"({omitted} earlier steps completed; omitted to stay within the context budget)",
                *(lines[len(lines) - summary_keep :] if summary_keep else []),
            ]
        messages.append({"role": "system", "content": "Earlier work:\n" + "\n".join(lines)})
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
    """The digest of a prompt (`Context.digest` is the same, computed while building it)."""
    return digest(messages)
