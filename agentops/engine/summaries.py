"""Summaries of earlier work written by the model, beside the rule-based one.

Once a step's prompt summarizes earlier steps by rule (`context`: the steps older than the last
five exchanges, or more under a tight budget), the task's model is asked, before the step's own
model call, to summarize the same steps from the rule-based lines; again each time
AGENTOPS_MODEL_SUMMARY_STEPS more steps are summarized. Its answer is recorded in the step's
`agentops.step.model_result` event (`payload["summary"]`, committed with the step's model result:
no commit of its own), marked `written_by: "model"` with the adapter, the model, the steps it
covers, its usage and its tokens, which count in the task's `tokens_used` and cost. The prompt
keeps the rule-based summary: it is exact and bounded, and a prompt rebuilt after a crash is the
same prompt. People read both side by side on the task page.

The constraint: a summary never fails, stops or slows a task beyond its deadline. It is asked
only when the task's token budget leaves room for it and for the step's own prompt (else it is
recorded `skipped`), within AGENTOPS_MODEL_SUMMARY_TIMEOUT_SECONDS and
AGENTOPS_MODEL_SUMMARY_MAX_TOKENS; any failure (a timeout, an error answer, an adapter that writes
none) is recorded `failed` with its words and the rule-based summary stands alone. Its text is
redacted before it is stored and escaped where it is shown.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django.conf import settings

from agentops.engine import context as ctxbuild
from agentops.engine.errors import ModelFailure
from agentops.engine.model import SummaryRequest, estimate_tokens, get_model_adapter
from agentops.engine.redaction import redacted_cut
from agentops.models import Event
from agentops.states import STEP_DONE

if TYPE_CHECKING:
    from agentops.engine.runstate import RunState
    from agentops.models import Step

logger = logging.getLogger(__name__)

MODEL_RESULT = "agentops.step.model_result"
# The longest summary text stored, whatever the model sent (about SUMMARY_MAX_TOKENS' worth).
TEXT_LIMIT = 4000
WHY_LIMIT = 300
INSTRUCTION = (
    "You summarize an AI agent's earlier work for the agent and for the people who oversee it. "
    "From the steps below, write a short plain-text summary: what was done, the key results "
    "(ids, amounts, names), anything that failed or is still open. Use only facts in the "
    "lines; no advice, no markup."
)


def summary_write(run: RunState, step: Step) -> dict[str, Any] | None:
    """The record of a model-written summary for `step`'s prompt, when one is due (None when
    not): written, skipped for the token budget, or failed with its words. Makes the model call
    (an outbound call: outside any transaction, with the lease's heartbeat armed); raises
    nothing but the signals that stop a worker (a lost lease, a pause)."""
    every = int(settings.AGENTOPS["SUMMARY_EVERY_STEPS"])
    summarized = run.summarized
    if not every or not summarized:
        return None
    if run.summary_through is None:
        run.summary_through = _latest_covered(run.task.pk)
    covered = run.summary_through
    if covered and summarized - covered < every:
        return None
    older = [s for s in run.steps if s.status in STEP_DONE and s.ordinal < step.ordinal]
    older = older[:summarized]
    lines = [ctxbuild.summary_line(s, cache=run.prompts) for s in older]
    messages = [
        {"role": "system", "content": INSTRUCTION},
        {"role": "user", "content": f"Goal: {run.task.goal}\n" + "\n".join(lines)},
    ]
    conf = settings.AGENTOPS
    max_tokens = int(conf["SUMMARY_MAX_TOKENS"])
    record: dict[str, Any] = {
        "written_by": "model",
        "steps": len(older),
        "through_step": older[-1].ordinal + 1 if older else 0,
        "tokens": 0,
    }
    run.summary_through = summarized
    needed = estimate_tokens(messages) + max_tokens + run.prompt_estimate
    budget = run.task.token_budget
    if budget is not None and run.task.tokens_used + needed > budget:
        left = max(0, budget - run.task.tokens_used)
        return {
            **record,
            "status": "skipped",
            "why": f"the task's token budget leaves {left} tokens; the summary and the step's "
            f"prompt need about {needed}",
        }
    adapter = get_model_adapter(run.agent)
    record.update(adapter=adapter.name, model=adapter.model)
    summarize = getattr(adapter, "summarize", None)
    if summarize is None:
        return {**record, "status": "failed", "why": f"the {adapter.name} adapter writes none"}
    request = SummaryRequest(
        agent=run.agent.name,
        task_id=run.task.pk,
        step=step.ordinal,
        messages=messages,
        lines=lines,
        max_tokens=max_tokens,
        timeout=float(conf["SUMMARY_TIMEOUT_SECONDS"]),
        task_input=run.task.input,
    )
    try:
        with run.beat.call():
            response = summarize(request)
    except ModelFailure as failure:
        return {**record, "status": "failed", "why": _why(f"{failure.kind}: {failure}")}
    except Exception as exc:  # a summary never fails the task: whatever the adapter raised
        logger.warning("task %s: the model summary failed: %r", run.task.pk, exc)
        return {**record, "status": "failed", "why": _why(f"{type(exc).__name__}: {exc}")}
    text = response.text.strip()
    usage = {k: int(response.usage.get(k, 0) or 0) for k in ("prompt_tokens", "completion_tokens")}
    tokens = usage["prompt_tokens"] + usage["completion_tokens"]
    if not text:
        return {**record, "status": "failed", "why": "the model wrote no summary", "tokens": tokens}
    # Model output is untrusted: a leaked credential must not reach the database.
    return {
        **record,
        "status": "written",
        "text": redacted_cut(text, TEXT_LIMIT),
        "usage": usage,
        "tokens": tokens,
    }


def _why(words: str) -> str:
    return redacted_cut(words, WHY_LIMIT)


def _latest_covered(task_id: int) -> int:
    """How many steps the task's latest recorded model summary covered (0: none yet)."""
    payload = (
        Event.objects.filter(task_id=task_id, action=MODEL_RESULT, payload__has_key="summary")
        .order_by("-seq")
        .values_list("payload", flat=True)
        .first()
    )
    summary = (payload or {}).get("summary") or {}
    return int(summary.get("steps") or 0)
