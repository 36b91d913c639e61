"""Typed exceptions of the engine, in one module.

Signals that must stop a worker (a lost lease, a pause) derive from BaseException so that a tool's
or adapter's `except Exception` cannot swallow them. Everything else is an ordinary Exception that
carries the failure layer and kind the recovery advisor works from.
"""

from __future__ import annotations


class AgentOpsError(Exception):
    """Base of the engine's ordinary errors."""


class UnknownAgent(AgentOpsError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown agent {name!r}; registered agents: {', '.join(known) or 'none'}")
        self.name = name


class UnknownTool(AgentOpsError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown tool {name!r}")
        self.name = name


class NotSerializable(AgentOpsError, ValueError):
    """A value that is about to be persisted is not JSON; the message names its path."""

    def __init__(self, path: str, value: object) -> None:
        super().__init__(f"{path}: {type(value).__name__} is not JSON-serializable")
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
    kind = "unavailable"
    retryable = False

    def __init__(
        self,
        message: str,
        *,
        kind: str | None = None,
        retryable: bool | None = None,
        retry_after: float | None = None,
        detail: dict | None = None,
    ) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind
        if retryable is not None:
            self.retryable = retryable
        self.retry_after = retry_after
        self.detail = detail or {}

    def as_failure(self) -> dict:
        from agentops.engine.jsonvalues import redacted

        return {
            "layer": self.layer,
            "kind": self.kind,
            "message": redacted(str(self)[:2000]),
            "retryable": self.retryable,
            "retry_after": self.retry_after,
            **({"detail": redacted(self.detail)} if self.detail else {}),
        }


class ModelFailure(StepFailure):
    layer = "model"
    retryable = True


class ToolFailure(StepFailure):
    layer = "tool"


class OrchestrationFailure(StepFailure):
    layer = "orchestration"
