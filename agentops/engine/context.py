"""The model's context, rebuilt from durable rows in layers on every call.

Core: system prompt, goal, the current step and the last five exchanges. Earlier work: a summary of
completed steps extracted by rule. The latest tool result verbatim, up to its budget. After a
resume, a system note says the task continues from a checkpoint. Nothing here is persisted: it is
derived state.

The model reads values, never storage pointers: a result or a response stored as an artifact is
read back (`excerpts.stored_value`), and a result longer than its budget is given as an excerpt
headed by how to read more with the built-in `read_result` tool (`excerpts`), which the prompt then
offers (`Context.reads`); what it gave of each result is in `Context.results`.

Exchanges are in the chat-completions format: the assistant's `tool_calls` carry the ids recorded
with the step's model response, and each result is a `tool` message answering its id, so a context
rebuilt after a crash sends the same ids. The prompt is kept under a budget (a fraction of the
model's window, default 50 %): older work is summarized first, then the summary is shortened.

What building a prompt makes (a step's exchange, its summary line) is reused by the next prompts
through a `PromptCache`: the runner holds one per time slice and drops it when the slice ends,
and it is bounded by bytes, so a worker keeps nothing of the tasks it advanced before.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import math
import operator
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from types import MappingProxyType
from typing import Any, TypeVar

from django.conf import settings

from agentops.engine.excerpts import (
    READ_TOOL,
    Given,
    result_given,
    result_json,
    stored_value,
    value_budget,
)
from agentops.engine.jsonvalues import canonical_json
from agentops.engine.model import assistant_message, loaded_response, tool_message
from agentops.engine.promptcache import PromptCache, recalled, remembered, text_bytes
from agentops.engine.registry import Agent
from agentops.models import Step, Task
from agentops.states import STEP_DONE

T = TypeVar("T")

RECENT_EXCHANGES = 5
SUMMARY_CHARS = 160
# A recent tool result of up to this many bytes of JSON is kept whole, a longer one is given as
# an excerpt of SUMMARY_CHARS bytes; the latest one is kept whole up to `value_budget()`.
RECENT_RESULT_BYTES = 2000
EARLIER_WORK = (
    f"Earlier work (each result in at most {SUMMARY_CHARS} characters; the {READ_TOOL} tool "
    "reads more of a step's result):\n"
)


def _shortened(text: str, limit: int = SUMMARY_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def executed_calls(
    step: Step, known: Mapping[int, Any] = MappingProxyType({})
) -> list[dict[str, Any]]:
    """The step's tool calls as the ledger ran them: a person's approved (edited) arguments
    replace the model's proposal, marked `edited`, so the model reads what really happened.
    A response or arguments stored as an artifact are read back (or taken from `known`, values
    by artifact id)."""
    response = _response(step, known)
    calls = [dict(c) for c in (response.get("tool_calls") or [])]
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


# A message of a prompt, its canonical JSON, and the sha256 of that text (the prompt's digest is
# made of its messages' digests: see `prompt_digest`).
Message = tuple[dict[str, Any], str, bytes]


def _message(message: dict[str, Any], text: str | None = None) -> Message:
    """`message` with its canonical JSON (`text`, when made already) and that text's digest."""
    text = canonical_json(message) if text is None else text
    return message, text, hashlib.sha256(text.encode()).digest()


class _Exchange:
    """A completed step's exchange: the assistant turn and the results answering its calls
    (whole up to the value budget when the exchange is the latest, else up to
    RECENT_RESULT_BYTES; an excerpt beyond), each message with its canonical JSON. Made once
    per step and kept while the step's recorded values are the same (see
    `_exchange_messages`): an exchange is in the prompts of the next five steps, the latest
    of them whole, so both forms are made at once and `weight` is fixed from then on. Values
    stored as artifacts are read back here, once."""

    def __init__(self, step: Step, known: Mapping[int, Any]) -> None:
        response = _response(step, known)
        text = response.get("text", "")
        calls = [
            {**call, "id": call_id(step, call, i)}
            for i, call in enumerate(executed_calls(step, known))
        ]
        calls = calls or _engine_calls(step)
        self.ids = [str(c["id"]) for c in calls]
        assistant = assistant_message(text, calls)
        self.assistant: list[Message] = [_message(assistant)] if calls or text else []
        # The output is serialized once for its size, its excerpts and its summary line (its
        # canonical JSON only when it is given whole); its text is kept with the tool messages
        # made from it (for the step's summary line, below).
        output, artifact = stored_value(step.output, known)
        data = result_json(output) if step.output is not None else None
        output_text = data.decode() if data is not None else None
        # The step's summary line, made once the step leaves the recent exchanges, reads it.
        self.output_text = output_text
        self._given: dict[bool, Given | None] = {True: None, False: None}
        if data is not None:
            number, budget = step.ordinal + 1, value_budget()
            given = functools.partial(result_given, output, data, number=number, artifact=artifact)
            self._given[True] = given(limit=budget, excerpt=budget)
            short = min(RECENT_RESULT_BYTES, budget)
            # Within the shorter limit, within the longer one: the same form, made once.
            self._given[False] = (
                self._given[True]
                if len(data) <= short
                else given(limit=short, excerpt=min(SUMMARY_CHARS, budget))
            )
        whole = self._made(step, verbatim=True)
        # The two forms differ only when a result is too long to keep whole (in the shorter).
        differ = self._given[False] is not self._given[True]
        self._messages = {
            True: whole,
            False: self._made(step, verbatim=False) if differ else whole,
        }
        self.weight = text_bytes(
            chain(
                (text for made in self._messages.values() for _, text, _ in made),
                [output_text or ""],
            )
        )

    def messages(self, *, verbatim: bool) -> list[Message]:
        return self._messages[verbatim]

    def given(self, *, verbatim: bool) -> dict[str, Any] | None:
        """What the record says of the result the form's tool messages give (None: none)."""
        given = self._given[verbatim]
        return given.entry if given is not None and self.ids else None

    def _made(self, step: Step, *, verbatim: bool) -> list[Message]:
        if not self.ids:
            return self.assistant
        content, content_text = _result(step, self._given[verbatim])
        # Every call of the assistant message is answered, as the API requires.
        return [
            *self.assistant,
            *(
                _message(tool_message(id, content), _tool_message_text(id, content_text))
                for id in self.ids
            ),
        ]


def _response(step: Step, known: Mapping[int, Any]) -> dict[str, Any]:
    """The step's recorded model response as the model gave it ({} for none)."""
    response = loaded_response(step.model_response, lambda v: stored_value(v, known)[0])
    return response if isinstance(response, dict) else {}


def _result(step: Step, given: Given | None) -> tuple[Any, str]:
    """The result a step's tool messages carry (what `given` gives of its output), and its
    canonical JSON."""
    if given is None:
        content = f"(no result: step {step.status})"
        return content, canonical_json(content)
    return given.content, given.text


def _tool_message_text(call_id: str, content_text: str) -> str:
    """`canonical_json(tool_message(call_id, content))` from the content's canonical JSON
    (sorted, the keys are content, role, tool_call_id): the result is not serialized again."""
    return f'{{"content":{content_text},"role":"tool","tool_call_id":{canonical_json(call_id)}}}'


def _exchange_messages(
    cache: PromptCache, step: Step, *, verbatim: bool
) -> tuple[list[Message], dict[str, Any] | None]:
    """The messages of a completed step's exchange (`_Exchange`), with their canonical JSON,
    and what the record says of the result they give."""
    exchange = remembered(
        cache,
        *_exchange_slot(step),
        lambda: _Exchange(step, cache.artifacts),
        lambda made: made.weight,
    )
    return exchange.messages(verbatim=verbatim), exchange.given(verbatim=verbatim)


def _exchange_slot(step: Step) -> tuple[tuple[str, int], tuple[Any, ...], tuple[Any, ...]]:
    """Where `cache` keeps a step's exchange, and what it is made of (see `_remembered`)."""
    return (
        ("exchange", step.pk),
        (step.status, step.ordinal),
        (step.output, step.model_response, step.approval, step.spec),
    )


def summary_line(step: Step, *, cache: PromptCache | None = None) -> str:
    """One line of the "earlier work" summary. Each prompt of a long task summarizes every
    older step again: the line is remembered per step in `cache` while what it is made of is
    the same."""
    cache = PromptCache() if cache is None else cache
    return remembered(
        cache,
        ("summary", step.pk),
        (step.status, step.ordinal, step.title),
        (step.output, step.model_response, step.approval),
        lambda: _summary_line(step, cache),
        sys.getsizeof,
    )


def _summary_line(step: Step, cache: PromptCache) -> str:
    calls = executed_calls(step, cache.artifacts)
    tool = calls[0]["name"] if calls else "no tool"
    # The step's exchange, when the cache still has it, serialized its output already (looked
    # at without making it the most recently used: the summary does not send it).
    exchange = recalled(cache, *_exchange_slot(step), touch=False)
    if exchange is not None and exchange.output_text is not None:
        text = exchange.output_text
    else:
        text = result_json(stored_value(step.output, cache.artifacts)[0]).decode()
    output = _shortened(text)
    return f"Step {step.ordinal + 1} '{step.title}' ({tool}) {step.status}: {output}"


# What an "earlier work" line is made of (`summary_line`), read in one call per step.
_LINE_OF = operator.attrgetter("status", "ordinal", "title", "output", "model_response", "approval")


def _earlier_lines(cache: PromptCache, task: Task, older: list[Step]) -> list[str]:
    """`summary_line` of each step in `older`. A long task's prompt adds about one older step
    per step: the lines of the steps summarized last time are reused when each value they were
    made of is the same object as then (compared in one pass in C, not a call per step)."""
    made = list(chain.from_iterable(map(_LINE_OF, older)))
    cached = cache.get(("earlier", task.pk)) if task.pk is not None else None
    lines: list[str] = []
    lines_bytes = 0
    if (
        cached is not None
        and len(cached[0]) <= len(made)
        and all(map(operator.is_, cached[0], made))
    ):
        lines, lines_bytes = list(cached[1]), cached[2]
    new = [summary_line(step, cache=cache) for step in older[len(lines) :]]
    lines += new
    if task.pk is not None:
        # The lines are counted here as well as in their own entries: either may outlive the
        # other. `made` holds the rows' values (the run's), not counted.
        lines_bytes += text_bytes(new)
        weight = sys.getsizeof(made) + sys.getsizeof(lines) + lines_bytes
        cache.put(("earlier", task.pk), (made, lines, lines_bytes), weight)
    return lines


@dataclass(frozen=True)
class Context:
    """A built prompt and what it cost: the estimate, the budget, how many completed steps are
    summarized rather than sent whole, and whether even the shortest form is over budget.
    `results`: what it gave of each result stored as an artifact or cut short (the record's
    `excerpts.Given` entries); `reads`: it cut a result short (an excerpt or the summary), so
    the model is offered the `read_result` tool."""

    messages: list[dict[str, Any]]
    tokens: int
    budget: int
    summarized: int
    over_budget: bool
    scale: float = 1.0
    # The unscaled estimate and the prompt digest, from the one canonical form of the messages.
    estimate: int = 0
    digest: str = ""
    results: tuple[dict[str, Any], ...] = ()
    reads: bool = False


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
    cache: PromptCache | None = None,
) -> Context:
    """The prompt for `current` (or for planning when None), from the recorded steps, under
    `budget` tokens (default: `budget_for(agent)`), reusing what earlier prompts of the run made
    through `cache` (default: one for this prompt only).

    `recent` caps how many of the latest exchanges are kept whole (fewer after a context
    overflow). Over budget, older exchanges are summarized first, one at a time; then the
    summary keeps only its latest lines. `scale` corrects the character-based estimate by what
    the provider reported for an earlier prompt (see `calibration`)."""
    budget = budget_for(agent) if budget is None else budget
    cache = PromptCache() if cache is None else cache
    done = [
        s
        for s in steps
        if s.status in STEP_DONE and (current is None or s.ordinal < current.ordinal)
    ]
    keep = min(RECENT_EXCHANGES if recent is None else recent, len(done))
    summary_keep: int | None = None
    while True:
        assembled, given = _assemble(
            cache,
            agent=agent,
            task=task,
            done=done,
            keep=keep,
            summary_keep=summary_keep,
            current=current,
            resumed_at=resumed_at,
            notes=notes,
        )
        # The length of `canonical_json(messages)`: a list's canonical form is its items'
        # joined by commas in brackets, so each message is serialized once (the recent
        # exchanges once per step, not per prompt) and the prompt's text is never joined.
        estimate = max(1, (sum(len(text) for _, text, _ in assembled) + len(assembled) + 1) // 4)
        tokens = math.ceil(estimate * scale)
        older = len(done) - keep
        fits = tokens <= budget
        if not fits and keep > 0:
            keep -= 1
        elif not fits and older and (summary_keep is None or summary_keep > 0):
            summary_keep = older // 2 if summary_keep is None else summary_keep // 2
        else:
            return Context(
                [dict(message) for message, _, _ in assembled],
                tokens,
                budget,
                older,
                not fits,
                scale,
                estimate,
                _digest_of(digest for _, _, digest in assembled),
                tuple(e for e in given if "artifact" in e or e["given"] == "excerpt"),
                any(e["given"] == "excerpt" for e in given) or older > 0,
            )


def calibration(
    steps: Sequence[Step],
    *,
    before: Step | None = None,
    known: Mapping[int, Any] = MappingProxyType({}),
) -> float:
    """Provider-reported prompt tokens per estimated token, from the latest step (before
    `before`) whose recorded usage has both (1.0 when none has; bounded to 0.25..4). A response
    stored as an artifact is read back (or taken from `known`, as `executed_calls` does)."""
    for step in _newest_first(steps, before=before):
        if step.model_response is None:
            continue
        usage = _response(step, known).get("usage") or {}
        reported, estimated = usage.get("prompt_tokens"), usage.get("prompt_estimate")
        if isinstance(reported, int) and isinstance(estimated, int) and reported and estimated:
            return round(min(max(reported / estimated, 0.25), 4.0), 3)
    return 1.0


_ORDINAL = operator.attrgetter("ordinal")


def _newest_first(steps: Sequence[Step], *, before: Step | None) -> Iterable[Step]:
    """The steps before `before` (all when None), the latest first. The runner's steps are in
    plan order: then they are neither sorted nor all visited (a long plan's later steps)."""
    ordinals = list(map(_ORDINAL, steps))
    if all(map(operator.lt, ordinals, ordinals[1:])):
        end = len(steps) if before is None else bisect.bisect_left(ordinals, before.ordinal)
        return reversed(steps[:end])
    return (
        s
        for s in sorted(steps, key=_ORDINAL, reverse=True)
        if before is None or s.ordinal < before.ordinal
    )


def build_messages(**kwargs: Any) -> list[dict[str, Any]]:
    """`build_context(...).messages`."""
    return build_context(**kwargs).messages


def _assemble(
    cache: PromptCache,
    *,
    agent: Agent,
    task: Task,
    done: list[Step],
    keep: int,
    summary_keep: int | None,
    current: Step | None,
    resumed_at: str | None,
    notes: Sequence[str],
) -> tuple[list[Message], list[dict[str, Any]]]:
    """The prompt's messages, each with its canonical JSON, and what the record says of each
    result they give (`_Exchange.given`)."""
    split = len(done) - keep
    older, recent_steps = done[:split], done[split:]
    assembled = [_system_message(agent.system_prompt)]
    if resumed_at:
        note = {
            "role": "system",
            "content": f"Note: this task is resumed from a checkpoint ({resumed_at}). "
            "Completed "
            "steps are listed below and must not be repeated.",
        }
        assembled.append(_message(note))
    assembled.append(_goal_message(cache, task))
    if older:
        lines = _earlier_lines(cache, task, older)
        if summary_keep is not None and summary_keep < len(lines):
            omitted = len(lines) - summary_keep
            lines = [
                f"({omitted} earlier steps completed; omitted to stay within the context budget)",
                *(lines[len(lines) - summary_keep :] if summary_keep else []),
            ]
        summary = {"role": "system", "content": EARLIER_WORK + "\n".join(lines)}
        assembled.append(_message(summary))
    given: list[dict[str, Any]] = []
    for index, step in enumerate(recent_steps):
        messages, entry = _exchange_messages(cache, step, verbatim=index == len(recent_steps) - 1)
        assembled += messages
        if entry is not None:
            given.append(entry)
    last: list[dict[str, Any]] = [
        {"role": "user", "content": f"Operator note: {note}"} for note in notes
    ]
    if current is None:
        last.append({"role": "user", "content": "Produce the plan as JSON."})
    else:
        last.append(
            {
                "role": "user",
                "content": step_line(current, task.step_count),
            }
        )
    assembled += [_message(m) for m in last]
    return assembled, given


@functools.lru_cache(maxsize=64)
def _system_message(prompt: str) -> Message:
    """The agent's system prompt as the first message, with its canonical JSON (the same in
    every prompt of every task of the agent; the caller copies the message it sends)."""
    return _message({"role": "system", "content": prompt})


def step_line(step: Step, step_count: int) -> str:
    """The prompt's last line: the step to do now, with its instruction when it has one."""
    line = f"Now do step {step.ordinal + 1} of {step_count}: {step.title}"
    instruction = (step.spec or {}).get("instruction")
    if isinstance(instruction, str) and instruction:
        line += f". Instruction: {instruction}"
    return line


def _goal_message(cache: PromptCache, task: Task) -> Message:
    """The goal and the visible input, with its canonical JSON (the same in every prompt)."""

    def make() -> Message:
        content = f"Goal: {task.goal}\nInput: {canonical_json(_visible_input(task.input))}"
        return _message({"role": "user", "content": content})

    return remembered(
        cache,
        ("goal", task.pk),
        (),
        (task.goal, task.input),
        make,
        lambda made: text_bytes((made[0]["content"], made[1])),
    )


def _visible_input(task_input: dict[str, Any]) -> dict[str, Any]:
    """Fault-injection settings are for the scripted model and the simulator, not the prompt."""
    return {k: v for k, v in task_input.items() if not k.endswith("_faults")}


def prompt_digest(messages: list[dict[str, Any]]) -> str:
    """The digest of a prompt: the sha256 of its messages' sha256s, each of the message's
    canonical JSON, in order (`Context.digest` is the same, computed while building it). Any
    change to any message, or to their order, changes it; a message repeated in the next
    prompts (the recent exchanges, the goal) is hashed once, not once per prompt."""
    return _digest_of(hashlib.sha256(canonical_json(m).encode()).digest() for m in messages)


def _digest_of(message_digests: Iterable[bytes]) -> str:
    return hashlib.sha256(b"".join(message_digests)).hexdigest()
