"""Typed exceptions of the engine, in one module.

Signals that must stop a worker (a lost lease, a pause) derive from BaseException so that a tool's
or adapter's `except Exception` cannot swallow them. Everything else is an ordinary Exception that
carries the failure layer and kind the recovery advisor works from.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from agentops.engine.redaction import redacted, redacted_cut
from agentops.engine.texts import storable_texts
from agentops.plumbing.tracing import qualified_name
from policies.phrases import Phrase, gettext_noop, shown


class Layer(StrEnum):
    MODEL = "model"
    TOOL = "tool"
    ORCHESTRATION = "orchestration"


class FailureKind(StrEnum):
    """Every failure kind the engine records: the one list (the advisor's table is keyed by it)."""

    RATE_LIMITED = "rate_limited"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"
    OUTPUT_INVALID = "output_invalid"
    CONTEXT_OVERFLOW = "context_overflow"
    BAD_REQUEST = "bad_request"
    SCHEMA_MISMATCH = "schema_mismatch"
    AUTHORIZATION_GAP = "authorization_gap"
    CONFLICT = "conflict"
    SIDE_EFFECT_UNKNOWN = "side_effect_unknown"
    TOOL_ERROR = "tool_error"
    PLANNING_LOOP = "planning_loop"
    LOW_CONFIDENCE = "low_confidence"
    BUDGET_OVERFLOW = "budget_overflow"
    PROCESS_CRASH = "process_crash"
    RETRY_CAP = "retry_cap"
    UNKNOWN_AGENT = "unknown_agent"
    UNKNOWN_TOOL = "unknown_tool"
    CHECKPOINT_MISMATCH = "checkpoint_mismatch"
    CHILD_FAILED = "child_failed"  # a fan-out step's child task ended without succeeding
    UNKNOWN_FAN_OUT = "unknown_fan_out"  # a plan names a fan-out this deploy does not register
    # An MCP server changed a tool (schema or hints) after the task recorded it; call not sent.
    TOOL_SCHEMA_CHANGED = "tool_schema_changed"
    # The task's agent was re-declared (plan, tools or prompt) since the task pinned its version.
    AGENT_CHANGED = "agent_changed"


class Mode(StrEnum):
    """The failure modes of the seed (000) that a failure can be an instance of, plus `budget`
    (tokens or cost used up). Recorded next to the kind when it applies."""

    DURATION = "duration"  # duration overrun: the whole-task time budget ran out
    AUTHORIZATION = "authorization"  # authorization gap: a policy or a service said no
    CONTEXT = "context"  # context exhaustion: the prompt outgrew the model's window
    CONFIDENCE = "confidence"  # confidence collapse: N steps in a row below the agent's floor
    BUDGET = "budget"  # token or cost budget used up


K = FailureKind
# Which kinds each layer records (a kind may occur in more than one layer).
LAYER_KINDS: Mapping[str, frozenset[FailureKind]] = {
    Layer.MODEL: frozenset(
        {
            K.RATE_LIMITED,
            K.TIMEOUT,
            K.UNAVAILABLE,
            K.OUTPUT_INVALID,
            K.CONTEXT_OVERFLOW,
            K.BAD_REQUEST,
        }
    ),
    Layer.TOOL: frozenset(
        {
            K.RATE_LIMITED,
            K.TIMEOUT,
            K.UNAVAILABLE,
            K.OUTPUT_INVALID,
            K.SCHEMA_MISMATCH,
            K.AUTHORIZATION_GAP,
            K.CONFLICT,
            K.BAD_REQUEST,
            K.SIDE_EFFECT_UNKNOWN,
            K.TOOL_ERROR,
            K.TOOL_SCHEMA_CHANGED,
        }
    ),
    Layer.ORCHESTRATION: frozenset(
        {
            K.PLANNING_LOOP,
            K.LOW_CONFIDENCE,
            K.BUDGET_OVERFLOW,
            K.PROCESS_CRASH,
            K.RETRY_CAP,
            K.UNKNOWN_AGENT,
            K.UNKNOWN_TOOL,
            K.CHECKPOINT_MISMATCH,
            K.AUTHORIZATION_GAP,
            K.SIDE_EFFECT_UNKNOWN,
            K.CHILD_FAILED,
            K.UNKNOWN_FAN_OUT,
            K.AGENT_CHANGED,
        }
    ),
}
# Process failures: the infrastructure failed, the agent's work is sound; resuming as is (after a
# wait, or once a deploy is back) is the fix. Every other kind is a logic failure: the proposal,
# the tool's contract, the policy or a budget needs a person's decision.
PROCESS_KINDS = frozenset(
    {
        K.RATE_LIMITED,
        K.TIMEOUT,
        K.UNAVAILABLE,
        K.PROCESS_CRASH,
        K.UNKNOWN_AGENT,
        K.UNKNOWN_TOOL,
        K.UNKNOWN_FAN_OUT,
    }
)


def nature_of(kind: str) -> str:
    """ "process" (resume as is) or "logic" (needs a decision)."""
    return "process" if kind in PROCESS_KINDS else "logic"


def mode_of(kind: str, detail: Mapping[str, object] | None = None) -> str | None:
    """The seed's failure mode this failure is an instance of, or None."""
    if kind == K.AUTHORIZATION_GAP:
        return Mode.AUTHORIZATION
    if kind == K.CONTEXT_OVERFLOW:
        return Mode.CONTEXT
    if kind == K.LOW_CONFIDENCE:
        return Mode.CONFIDENCE
    if kind == K.BUDGET_OVERFLOW:
        budget = (detail or {}).get("budget")
        return Mode.DURATION if budget == "wall_time" else Mode.BUDGET
    return None


class AgentOpsError(Exception):
    """Base of the engine's ordinary errors.

    A refusal a person reads is raised with a `Phrase`: `str(exc)` is the English (logs, a stored
    failure, the record), `exc.message` the same refusal in the reader's language, for a page or
    the API's `detail`."""

    @property
    def message(self) -> str:
        """The error's text in the active language (the request's)."""
        return str(shown(self.args[0])) if self.args else ""


def message_of(exc: BaseException) -> str:
    """What a refusal says to the person who asked: an engine error's `message` (their
    language), any other exception's own text (already theirs, or English where none applies)."""
    return exc.message if isinstance(exc, AgentOpsError) else str(exc)


class UnknownAgent(AgentOpsError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(
            Phrase(
                gettext_noop("unknown agent %(agent)s; registered agents: %(known)s"),
                {"agent": repr(name), "known": ", ".join(known) or "none"},
            )
        )
        self.name = name


class AgentUnavailable(AgentOpsError):
    """The agent is registered but cannot run in this process: a setting it needs is not set
    (`engine.needs`); the message names the agent and each missing setting."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class TransitionRefused(AgentOpsError):
    """The task is not in a status this action applies to (someone else acted first)."""


class StartRefused(AgentOpsError):
    """The person asking to start a task does not hold `agentops.start_task`."""

    def __init__(self, username: str) -> None:
        super().__init__(
            Phrase(
                gettext_noop("%(user)s may not start tasks: that needs the task-starter role"),
                {"user": username},
            )
        )
        self.username = username


class UnknownTool(AgentOpsError):
    def __init__(self, name: str) -> None:
        super().__init__(Phrase(gettext_noop("unknown tool %(tool)s"), {"tool": repr(name)}))
        self.name = name


class NotSerializable(AgentOpsError, ValueError):
    """A value that is about to be persisted is not JSON; the message names its path."""

    def __init__(self, path: str, value: object, reason: str | None = None) -> None:
        super().__init__(f"{path}: {reason or type(value).__name__ + ' is not JSON-serializable'}")
        self.path = path


class CheckpointMismatch(AgentOpsError):
    """The snapshot folded with later events disagrees with the rows."""


class LeaseLost(BaseException):
    """The worker's lease was taken over or revoked: it must stop without writing anything."""


class StepFailure(AgentOpsError):
    """A failure of a model or tool call, classified by layer and kind.

    `retryable` says whether an automatic retry may repeat the call; `retry_after` is the
    remote's hint in seconds, if it gave one.
    """

    layer = "orchestration"
    kind: FailureKind = FailureKind.UNAVAILABLE
    retryable = False

    def __init__(
        self,
        message: str,
        *,
        kind: FailureKind | None = None,
        retryable: bool | None = None,
        retry_after: float | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        if kind is not None:
            # Checked at run time too: a kind read back from a stored failure is a plain str.
            self.kind = FailureKind(kind)
        if retryable is not None:
            self.retryable = retryable
        self.retry_after = retry_after
        self.detail = detail or {}

    @property
    def error_type(self) -> str:
        """The failure's class in traces (`error.type`, low-cardinality): its kind, or, for a
        tool's bug (`tool_error`), the class of the exception the tool raised (its cause)."""
        raised = self.__cause__
        if self.kind == FailureKind.TOOL_ERROR and raised is not None:
            return qualified_name(type(raised))
        return self.kind.value

    def as_failure(self) -> dict[str, Any]:
        # The message and detail quote what the world sent (an exception's text, a remote's
        # body): whatever it holds, the failure is stored, so the stop says why.
        return {
            "layer": self.layer,
            "kind": self.kind.value,
            "nature": nature_of(self.kind),
            "mode": mode_of(self.kind, self.detail),
            "message": storable_texts(redacted_cut(str(self), 2000)),
            "retryable": self.retryable,
            "retry_after": self.retry_after,
            **({"detail": storable_texts(redacted(self.detail))} if self.detail else {}),
        }


class ModelFailure(StepFailure):
    layer = "model"
    retryable = True


class ToolFailure(StepFailure):
    layer = "tool"


class OrchestrationFailure(StepFailure):
    layer = "orchestration"
