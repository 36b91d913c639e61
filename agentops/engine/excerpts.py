"""What the model is given of a recorded result: the value itself, or an excerpt and how to read
more; never a storage pointer.

A result above the artifact threshold is stored as an artifact and its row keeps a pointer
(`jsonvalues.offloaded`); the threshold is a storage decision and changes nothing the model reads.
A result whose JSON is within the prompt's budget for it is given in full, whatever it is stored
as; a longer one is given as its first bytes, after a line that says which bytes of how many it
shows and how to read more: the built-in `read_result` tool. The engine answers that tool itself,
inside the step's model call (`proposals.ask_model`), from the recorded rows; it is offered only
to a prompt that cut a result short and is never an agent's tool, so it has no ledger row, no
route and no side effect. Sizes and offsets are bytes of the result's JSON as an artifact stores
it (`result_json`: sorted keys, compact, UTF-8), cut at character boundaries. What a prompt gave
of each result (`given` entries) is recorded with the step's start; the reads a step made, with
its model result.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, TypeGuard

from django.conf import settings

from agentops.engine.errors import FailureKind, ModelFailure
from agentops.engine.jsonvalues import ARTIFACT_KEY, canonical_json, is_pointer, json_bytes, loaded
from agentops.engine.model import (
    ModelRequest,
    ModelResponse,
    assistant_message,
    estimate_tokens,
    tool_message,
)
from agentops.engine.registry import READ_RESULT_TOOL
from agentops.models import Step
from agentops.states import STEP_DONE

READ_TOOL = READ_RESULT_TOOL
# Reads one step's model call may make before its proposal; past it the reply is invalid output.
MAX_READS = 8

READ_TOOL_SCHEMA: dict[str, Any] = {
    "name": READ_TOOL,
    "description": (
        "Read more of a step's result that this conversation shows only in part: the bytes "
        "of its JSON text from `offset` on (at most `length` of them)."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "step": {"type": "integer", "minimum": 1, "description": "The step's number."},
            "offset": {"type": "integer", "minimum": 0, "description": "The first byte."},
            "length": {"type": "integer", "minimum": 1, "description": "At most this many."},
        },
        "required": ["step", "offset"],
        "additionalProperties": False,
    },
}


def value_budget() -> int:
    """Bytes of a result's JSON the latest exchange gives in full (AGENTOPS_CONTEXT_VALUE_BYTES);
    also the most one read returns."""
    return int(settings.AGENTOPS["CONTEXT_VALUE_BYTES"])


@dataclass(frozen=True)
class Given:
    """What a tool message carries of a step's result (`content`, with its canonical JSON
    `text`), and what the record says of it (`entry`: the step's number, `given` "full" or
    "excerpt", the `bytes` given and, for an excerpt, `of` how many; `artifact`: the id of the
    artifact the result is stored in, if it is)."""

    content: Any
    text: str
    entry: dict[str, Any]


def stored_value(
    stored: Any, known: Mapping[int, Any] = MappingProxyType({})
) -> tuple[Any, int | None]:
    """A recorded value as it was given (an artifact's pointer read back, or taken from `known`,
    values by artifact id), and its artifact's id (None for a value kept in its row)."""
    if not is_pointer(stored):
        return stored, None
    artifact = int(stored[ARTIFACT_KEY])
    return (known[artifact] if artifact in known else loaded(stored)), artifact


def result_json(value: Any) -> bytes:
    """The JSON of a result as excerpts and reads count it: as an artifact stores it (sorted
    keys, compact; `jsonvalues.json_bytes`, fast for a value of few parts however long)."""
    return json_bytes(value)


def result_given(
    value: Any, data: bytes, *, number: int, limit: int, excerpt: int, artifact: int | None
) -> Given:
    """The result `value` of step `number` (its `result_json`, `data`): whole when `data` has
    at most `limit` bytes, else an excerpt of at most `excerpt` bytes headed by how to read
    more."""
    entry: dict[str, Any] = {"step": number}
    if artifact is not None:
        entry["artifact"] = artifact
    if len(data) <= limit:
        full = {**entry, "given": "full", "bytes": len(data)}
        return Given(value, canonical_json(value), full)
    start, end, part = _cut(data, 0, excerpt)
    content = f"Excerpt: {_range_line(number, start, end, len(data))}\n{part}"
    entry.update(given="excerpt", bytes=end - start, of=len(data))
    return Given(content, canonical_json(content), entry)


def read_answer(steps: Sequence[Step], arguments: Any) -> tuple[str, dict[str, Any]]:
    """The engine's answer to a `read_result` call: the text the tool message carries, and what
    the record says of the read (`step`, `offset`, `bytes`, `of`; or the `refused` reason). A
    call the engine cannot answer (no such step, no result, a bad offset) is answered with why,
    for the model to correct: it is not a failure of the step."""
    parsed = _read_arguments(arguments)
    if isinstance(parsed, str):
        return _refused(None, parsed)
    number, offset, length = parsed
    step = next((s for s in steps if s.ordinal == number - 1), None)
    if step is None or step.status not in STEP_DONE or step.output is None:
        return _refused(number, f"step {number} has no recorded result")
    value, _ = stored_value(step.output)
    data = result_json(value)
    if offset > len(data):
        return _refused(number, f"offset {offset} is past the result's end ({len(data)} bytes)")
    budget = value_budget() if length is None else min(length, value_budget())
    start, end, part = _cut(data, offset, budget)
    entry = {"step": number, "offset": start, "bytes": end - start, "of": len(data)}
    return f"Read: {_range_line(number, start, end, len(data))}\n{part}", entry


def _refused(number: int | None, reason: str) -> tuple[str, dict[str, Any]]:
    """The answer to a read the engine cannot make, and its record (`step`: its number when it
    is one; nothing else the model wrote is recorded)."""
    return f"{READ_TOOL} refused: {reason}", {"step": number, "refused": reason}


def _read_arguments(arguments: Any) -> tuple[int, int, int | None] | str:
    """A read's step number, offset and length (None: the budget), or why they are refused."""
    args = arguments if isinstance(arguments, dict) else {}
    number, offset, length = args.get("step"), args.get("offset", 0), args.get("length")
    if not _whole(number) or number < 1:
        return "`step` must be a step's number (1 or more)"
    if not _whole(offset) or offset < 0:
        return "`offset` must be a byte offset (0 or more)"
    if length is not None and (not _whole(length) or length < 1):
        return "`length` must be a number of bytes (1 or more)"
    return number, offset, length


def _whole(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _range_line(number: int, start: int, end: int, size: int) -> str:
    """Which bytes are shown, and how to read on (or that this is the end)."""
    shown = f"bytes {start}-{end} of the {size} bytes of step {number}'s result (JSON)"
    if end >= size:
        return f"{shown}; this is its end."
    more = canonical_json({"step": number, "offset": end})
    return f"{shown}. To read more, call {READ_TOOL} with {more}."


def _cut(data: bytes, offset: int, length: int) -> tuple[int, int, str]:
    """The bytes of `data` from `offset` (moved forward to a character's start) for at most
    `length` bytes (ended at a character's end): their range and their text."""
    start = offset
    while start < len(data) and _continues(data[start]):
        start += 1
    end = min(len(data), start + max(length, 1))
    while start < end < len(data) and _continues(data[end]):
        end -= 1
    if end == start and start < len(data):
        # `length` is shorter than the character at `start`: give that one character whole.
        end = start + 1
        while end < len(data) and _continues(data[end]):
            end += 1
    return start, end, data[start:end].decode()


def _continues(byte: int) -> bool:
    """The byte is inside a UTF-8 character, not at its start."""
    return byte & 0xC0 == 0x80


@dataclass
class Reading:
    """One step's model call, which may read on (`read_result`) before it proposes: the engine
    answers each read in the conversation and asks again, at most MAX_READS times. Keeps what
    the record says of each read (`entries`) and the usage of the replies that asked for one
    (`usage`, `estimate`: the engine's estimate of their prompts)."""

    steps: Sequence[Step]
    entries: list[dict[str, Any]] = field(default_factory=list)
    usage: Counter[str] = field(default_factory=Counter)
    estimate: int = 0

    @staticmethod
    def read_call(response: ModelResponse) -> dict[str, Any] | None:
        """The reply's call when it is a read (a reply has at most one call)."""
        calls = response.tool_calls
        return calls[0] if calls and calls[0]["name"] == READ_TOOL else None

    def answered(
        self, request: ModelRequest, response: ModelResponse, call: dict[str, Any]
    ) -> ModelRequest:
        """`request` continued with the read `call` and the engine's answer; ModelFailure
        (output_invalid, retried with the repair note) past MAX_READS."""
        if len(self.entries) >= MAX_READS:
            raise ModelFailure(
                f"the model asked to read more than {MAX_READS} times in one step",
                kind=FailureKind.OUTPUT_INVALID,
            )
        text, entry = read_answer(self.steps, call.get("arguments"))
        self.entries.append(entry)
        self.usage.update(response.usage)
        self.estimate += request.prompt_estimate or estimate_tokens(request.messages)
        messages = [
            *request.messages,
            assistant_message(response.text, [call]),
            tool_message(str(call["id"]), text),
        ]
        return replace(request, messages=messages, prompt_estimate=estimate_tokens(messages))

    def total_usage(self, response: ModelResponse, prompt_estimate: int) -> dict[str, int]:
        """The step's usage: the final reply's and the reads' (`prompt_estimate`: the final
        prompt's estimate), as the step records it."""
        usage = Counter(self.usage)
        usage.update(response.usage)
        return {**usage, "prompt_estimate": self.estimate + prompt_estimate}
