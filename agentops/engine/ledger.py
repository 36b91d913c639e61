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

from django.conf import settings

from agentops.engine.errors import FailureKind, StepFailure, ToolFailure
from agentops.engine.jsonvalues import Encoded, encoded, exact_json, output_checked, redacted
from agentops.engine.redaction import redacted_cut
from agentops.engine.registry import Tool, ToolContext
from agentops.states import LedgerStatus

logger = logging.getLogger(__name__)


def idempotency_key(*, task_id: int, step_id: int, tool: str, args_digest: str) -> str:
    return f"t{task_id}-s{step_id}-{tool}-{args_digest[:32]}"


def arguments_encoded(arguments: dict[str, Any]) -> Encoded:
    """The arguments serialized once: the digest the key is built on, the JSON the contract
    check reads and (when exact) the bytes their artifact stores."""
    return encoded(arguments)


def arguments_digest(arguments: dict[str, Any]) -> str:
    return arguments_encoded(arguments).sha256


@dataclass(frozen=True)
class Outcome:
    """What the ledger row becomes after a call: succeeded, failed or executed_unknown.

    A `failure` next to `succeeded` means the effect happened but the step cannot go on.
    """

    status: str
    result: dict[str, Any] | None = None
    # The result's JSON, when the call just produced it (stored from these bytes).
    known: Encoded | None = None
    failure: StepFailure | None = None
    how: str = "invoked"


# The recorded result of a call whose output was rejected: the call ran, its output is not kept.
INVALID_OUTPUT_KEY = "$invalid_output"


def invalid_output(reason: str) -> dict[str, Any]:
    return {INVALID_OUTPUT_KEY: redacted_cut(reason, 500)}


def is_invalid_output(result: Any) -> bool:
    return isinstance(result, dict) and INVALID_OUTPUT_KEY in result


def checked_result(tool: Tool, result: Any) -> tuple[dict[str, Any], Encoded]:
    """The tool's result if it is a JSON object PostgreSQL can store, within the size limit and
    the tool's declared result schema, with its JSON (serialized once: sized here, stored from
    it); else ToolFailure (output_invalid or schema_mismatch)."""
    if not isinstance(result, dict):
        raise ToolFailure(
            f"{tool.name} returned {type(result).__name__}, expected a JSON object",
            kind=FailureKind.OUTPUT_INVALID,
        )
    output_checked(
        result, path=f"{tool.name}.result", failure=ToolFailure, source=f"{tool.name}'s output"
    )
    known = exact_json(result)
    size = len(known.data)
    limit = settings.AGENTOPS["TOOL_RESULT_MAX_BYTES"]
    if size > limit:
        raise ToolFailure(
            f"{tool.name} returned {size} bytes of output (limit {limit})",
            kind=FailureKind.OUTPUT_INVALID,
        )
    tool.check_result(result, text=known.data)
    return result, known


def _rejected_output(tool: Tool, failure: ToolFailure) -> Outcome:
    """The call ran and answered, but its output cannot be used. The ledger row is resolved, never
    left pending, and nothing is retried blindly: when the remote can be asked again safely
    (reads, key dedup, a probe) the row is `failed` (a person's retry calls again with the same
    key); otherwise the effect is recorded as `succeeded` with the output replaced by the reason."""
    failure.retryable = False
    failure.detail["effect"] = "the call ran; its output was rejected"
    if tool.side_effect == "read" or tool.idempotent_remote or tool.probe_fn is not None:
        return Outcome(LedgerStatus.FAILED, failure=failure, how="output rejected")
    return Outcome(
        LedgerStatus.SUCCEEDED,
        result=invalid_output(str(failure)),
        failure=failure,
        how="succeeded with rejected output",
    )


def invoke(tool: Tool, ctx: ToolContext, arguments: dict[str, Any]) -> Outcome:
    """Call the tool once with the ledger's key and classify what happened."""
    try:
        raw = tool.fn(ctx, **arguments)
    except ToolFailure as failure:
        if failure.detail.get("maybe_executed"):
            return reconcile(tool, ctx, arguments, cause=failure)
        return Outcome(LedgerStatus.FAILED, failure=failure)
    except Exception as exc:  # a tool's bug must end its step, not crash the worker
        bug = ToolFailure(
            f"{tool.name} raised {type(exc).__name__}: {exc}",
            kind=FailureKind.TOOL_ERROR,
            retryable=False,
            detail={"maybe_executed": True},
        )
        bug.__cause__ = exc  # its class names the failure in traces (`error_type`)
        return reconcile(tool, ctx, arguments, cause=bug)
    try:
        return Outcome(LedgerStatus.SUCCEEDED, *_redacted_result(tool, raw))
    except ToolFailure as failure:
        return _rejected_output(tool, failure)


def _redacted_result(tool: Tool, raw: Any) -> tuple[dict[str, Any], Encoded | None]:
    """The checked result with secrets redacted, and its JSON when redaction changed nothing
    (redaction only replaces strings, so equal means the same JSON)."""
    result, known = checked_result(tool, raw)
    stored = redacted(result)
    return stored, (known if stored == result else None)


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
            found = tool.probe_fn(ctx)
            found = None if found is None else _redacted_result(tool, found)[0]
        except ToolFailure as probe_error:
            logger.warning("probe of %s failed: %s", ctx.idempotency_key, probe_error)
        else:
            if found is not None:
                # The effect happened. If the remote answered in a shape the tool does not
                # understand, the step still stops for a person (who upgrades the adapter).
                mismatch = cause is not None and cause.kind == FailureKind.SCHEMA_MISMATCH
                stop = cause if mismatch else None
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
            # A bug does not go away by itself.
            cause.retryable = cause.kind != FailureKind.TOOL_ERROR
            return Outcome(LedgerStatus.FAILED, failure=cause, how="probe found no effect")
    if tool.idempotent_remote or tool.side_effect == "read":
        if cause is None:
            return invoke(tool, ctx, arguments)
        cause.retryable = cause.kind != FailureKind.TOOL_ERROR
        return Outcome(LedgerStatus.FAILED, failure=cause, how=tool.repeat_safe)
    unknown = ToolFailure(
        f"{tool.name}: cannot tell whether the effect happened (no probe, no key support)",
        kind=FailureKind.SIDE_EFFECT_UNKNOWN,
        retryable=False,
        detail={"cause": cause.as_failure() if cause else None},
    )
    return Outcome(LedgerStatus.EXECUTED_UNKNOWN, failure=unknown, how="cannot tell")
