"""The side-effect ledger: idempotency keys, and invoking a tool so that no effect repeats.

The key is derived from the recorded model response (task + step + tool + canonical-args digest),
so every retry of a step reuses it. A `pending` row is committed before the tool runs; when the
outcome is unclear the tool's probe, or the remote's key support, decides; when neither can, the
call is `executed_unknown` and never retried automatically.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from agentops.engine.errors import StepFailure, ToolFailure
from agentops.engine.jsonvalues import digest, redacted, validated
from agentops.engine.registry import Tool, ToolContext
from agentops.states import LedgerStatus

logger = logging.getLogger(__name__)


def idempotency_key(*, task_id: int, step_id: int, tool: str, args_digest: str) -> str:
    return f"t{task_id}-s{step_id}-{tool}-{args_digest[:32]}"


def arguments_digest(arguments: dict[str, Any]) -> str:
    return digest(arguments)


@dataclass(frozen=True)
class Outcome:
    """What the ledger row becomes after a call: succeeded, failed or executed_unknown.

    A `failure` next to `succeeded` means the effect happened but the step cannot go on.
    """

    status: str
    result: dict[str, Any] | None = None
    failure: StepFailure | None = None
    how: str = "invoked"


def invoke(tool: Tool, ctx: ToolContext, arguments: dict[str, Any]) -> Outcome:
    """Call the tool once with the ledger's key and classify what happened."""
    try:
        result = redacted(tool.fn(ctx, **arguments))
        if not isinstance(result, dict):
            raise ToolFailure(
                f"{tool.name} returned {type(result).__name__}, expected an object",
                kind="schema_mismatch",
                detail={"maybe_executed": True},
            )
        validated(result, f"{tool.name}.result")
        return Outcome(LedgerStatus.SUCCEEDED, result=result)
    except ToolFailure as failure:
        if failure.detail.get("maybe_executed"):
            return reconcile(tool, ctx, arguments, cause=failure)
        return Outcome(LedgerStatus.FAILED, failure=failure)


def reconcile(
    tool: Tool, ctx: ToolContext, arguments: dict[str, Any], *, cause: StepFailure | None
) -> Outcome:
    """The effect may or may not have happened: probe, or lean on the remote's key dedup.

    Probe says done: succeeded with the remote's result. Probe says not done: failed, retryable
    with the same key. No probe but the remote honours keys (or the tool only reads): calling again
    is safe. Neither: executed_unknown, for a human to confirm.
    """
    if tool.probe_fn is not None:
        try:
            found = redacted(tool.probe_fn(ctx))
        except ToolFailure as probe_error:
            logger.warning("probe of %s failed: %s", ctx.idempotency_key, probe_error)
        else:
            if found is not None:
                # The effect happened. If the remote answered in a shape the tool does not
                # understand, the step still stops for a person (who upgrades the adapter).
                stop = cause if cause is not None and cause.kind == "schema_mismatch" else None
                return Outcome(
                    LedgerStatus.SUCCEEDED,
                    result=found,
                    failure=stop,
                    how="probe found the effect",
                )
            if cause is None:
                # A pending row left by a dead worker, and the remote has no such effect:
                # the call never landed, so make it now (with the same key).
                return invoke(tool, ctx, arguments)
            cause.retryable = True
            return Outcome(LedgerStatus.FAILED, failure=cause, how="probe found no effect")
    if tool.idempotent_remote or tool.side_effect == "read":
        if cause is None:
            return invoke(tool, ctx, arguments)
        cause.retryable = True
        return Outcome(LedgerStatus.FAILED, failure=cause, how="remote deduplicates by key")
    unknown = ToolFailure(
        f"{tool.name}: cannot tell whether the effect happened (no probe, no key support)",
        kind="side_effect_unknown",
        retryable=False,
        detail={"cause": cause.as_failure() if cause else None},
    )
    return Outcome(LedgerStatus.EXECUTED_UNKNOWN, failure=unknown, how="cannot tell")
