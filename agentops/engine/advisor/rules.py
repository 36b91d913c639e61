"""The recovery advisor's one table (`RULES`): the first row matching a `Situation` says what a
person should do with a stopped task, and why. docs/recovery.md renders it.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentops.engine.advisor.situation import (
    RESTARTABLE,
    SKIPPABLE,
    TRANSIENT,
    Action,
    Band,
    Risk,
    Situation,
)
from agentops.engine.errors import FailureKind
from policies.phrases import gettext_noop


@dataclass(frozen=True)
class Rule:
    """One row of the table. A condition left as None matches anything."""

    name: str
    action: Action
    # A message id with named placeholders (the Situation's facts); `advise` makes it a Phrase.
    rationale: str
    kinds: frozenset[str] | None = None
    layers: frozenset[str] | None = None
    risks: frozenset[Risk] | None = None
    side_effects: frozenset[str] | None = None
    band: Band | None = None
    stuck: bool | None = None
    task_cap_reached: bool | None = None
    compensable: bool | None = None
    irreversible: bool | None = None
    rolling_back: bool | None = None
    # The service named the one scope it refused the call for.
    scope_named: bool | None = None
    repairable: bool | None = None
    # Commands and names the rationale quotes, by placeholder: kept as written in any language
    # (a page shows them in translate="no").
    quoted: tuple[tuple[str, str], ...] = ()

    def matches(self, s: Situation) -> bool:
        return (
            (self.kinds is None or s.kind in self.kinds)
            and (self.layers is None or s.layer in self.layers)
            and (self.risks is None or s.risk in self.risks)
            and (self.side_effects is None or s.side_effect in self.side_effects)
            and (self.band is None or s.band == self.band)
            and (self.stuck is None or s.stuck == self.stuck)
            and (self.task_cap_reached is None or s.task_cap_reached == self.task_cap_reached)
            and (self.compensable is None or s.compensable == self.compensable)
            and (self.irreversible is None or s.irreversible == self.irreversible)
            and (self.rolling_back is None or s.rolling_back == self.rolling_back)
            and (self.scope_named is None or (s.missing_scope is not None) == self.scope_named)
            and (self.repairable is None or s.repairable == self.repairable)
        )


def _set(*values: str) -> frozenset[str]:
    return frozenset(values)


def _kinds(*kinds: FailureKind) -> frozenset[FailureKind]:
    """A row's failure kinds: members of the one enum, so a row cannot name a kind that is not
    recorded (mypy checks it)."""
    return frozenset(kinds)


_A = Action
K = FailureKind
# First match wins; the last row matches everything. docs/recovery.md renders this table.
RULES: tuple[Rule, ...] = (
    Rule(
        "rollback-unfinished",
        _A.ROLLBACK,
        gettext_noop(
            "A rollback stopped part-way; fix the cause and roll back again, or abort: moving "
            "forward would redo what was already undone."
        ),
        rolling_back=True,
    ),
    Rule(
        "side-effect-unknown",
        _A.CONFIRM,
        gettext_noop(
            "A call may have taken effect and the service cannot be asked; confirm whether it "
            "happened before anything else runs."
        ),
        kinds=_kinds(K.SIDE_EFFECT_UNKNOWN),
    ),
    Rule(
        "checkpoint-mismatch",
        _A.RETRY,
        gettext_noop(
            "The rows disagree with the event log, so resuming as is could act on a wrong state; "
            "see where (%(verify)s), rebuild them from the log (%(restore)s), then retry; "
            "abort if the log itself is wrong."
        ),
        kinds=_kinds(K.CHECKPOINT_MISMATCH),
        quoted=(
            ("verify", "manage.py checkpoint verify"),
            ("restore", "manage.py checkpoint restore"),
        ),
    ),
    Rule(
        "crash-resume",
        _A.RETRY,
        gettext_noop(
            "The worker stopped mid-step (killed, or the step's try raised an error the engine "
            "does not handle: the stop's message says which, the worker's log has the traceback); "
            "once the cause is fixed, resume from the last checkpoint: completed steps and "
            "recorded effects are not repeated."
        ),
        kinds=_kinds(K.PROCESS_CRASH),
        task_cap_reached=False,
    ),
    Rule(
        "crash-loop-late",
        _A.RETRY,
        gettext_noop(
            "The task crashed its worker %(recoveries)s times, but %(percent)s%% is done; fix the "
            "cause (memory, time limit) and resume rather than start over."
        ),
        kinds=_kinds(K.PROCESS_CRASH),
        band=Band.LATE,
    ),
    Rule(
        "crash-loop-undo",
        _A.ROLLBACK,
        gettext_noop(
            "The task crashed its worker %(recoveries)s times (cap %(recovery_cap)s) at "
            "%(percent)s%% done; undo its effects and start again once the cause is fixed."
        ),
        kinds=_kinds(K.PROCESS_CRASH),
        compensable=True,
        irreversible=False,
    ),
    Rule(
        "crash-loop",
        _A.ABORT,
        gettext_noop(
            "The task crashed its worker %(recoveries)s times (cap %(recovery_cap)s) at "
            "%(percent)s%% done; another resume would likely crash again, so abort and restart "
            "once fixed."
        ),
        kinds=_kinds(K.PROCESS_CRASH),
    ),
    Rule(
        "policy-deny-undo",
        _A.ROLLBACK,
        gettext_noop(
            "The policy forbids this action, so a retry would be denied again; undo the effects so "
            "far and end the task, or change the policy first."
        ),
        kinds=_kinds(K.AUTHORIZATION_GAP),
        layers=_set("orchestration"),
        compensable=True,
        irreversible=False,
    ),
    Rule(
        "policy-deny",
        _A.ABORT,
        gettext_noop(
            "The policy forbids this action, so a retry would be denied again; abort, or change "
            "the policy and then retry."
        ),
        kinds=_kinds(K.AUTHORIZATION_GAP),
        layers=_set("orchestration"),
    ),
    Rule(
        "early-undo-restart",
        _A.ROLLBACK,
        gettext_noop(
            "Only %(percent)s%% done and everything so far can be undone (%(kind)s); roll back and "
            "start a new task rather than repair this one."
        ),
        kinds=RESTARTABLE,
        stuck=True,
        band=Band.EARLY,
        compensable=True,
        irreversible=False,
    ),
    Rule(
        "early-restart",
        _A.ABORT,
        gettext_noop(
            "Only %(percent)s%% done and nothing to undo (%(kind)s); abort and start a new task "
            "rather than repair this one."
        ),
        kinds=RESTARTABLE,
        stuck=True,
        band=Band.EARLY,
        compensable=False,
        irreversible=False,
    ),
    Rule(
        "budget-late",
        _A.RETRY,
        gettext_noop(
            "The budget ran out at %(percent)s%% done; extend it and resume: finishing is cheaper "
            "than starting over."
        ),
        kinds=_kinds(K.BUDGET_OVERFLOW),
        band=Band.LATE,
    ),
    Rule(
        "budget-undo",
        _A.ROLLBACK,
        gettext_noop(
            "The budget ran out at only %(percent)s%% done; undo the effects so far, or extend the "
            "budget and retry if the goal is worth it."
        ),
        kinds=_kinds(K.BUDGET_OVERFLOW),
        compensable=True,
        irreversible=False,
    ),
    Rule(
        "budget",
        _A.ABORT,
        gettext_noop(
            "The budget ran out at only %(percent)s%% done; abort, or extend the budget and retry "
            "if the goal is worth it."
        ),
        kinds=_kinds(K.BUDGET_OVERFLOW),
    ),
    Rule(
        "unknown-tool",
        _A.RETRY,
        gettext_noop(
            "A recorded call names a tool the workers no longer register (a deploy removed or "
            "renamed it); deploy it and retry: the ledger row is intact."
        ),
        kinds=_kinds(K.UNKNOWN_TOOL),
    ),
    Rule(
        "unknown-fan-out",
        _A.RETRY,
        gettext_noop(
            "The plan names a fan-out the workers do not register (a deploy removed or renamed "
            "it); deploy it and retry: the children already spawned are kept."
        ),
        kinds=_kinds(K.UNKNOWN_FAN_OUT),
    ),
    Rule(
        "child-failed",
        _A.ROLLBACK,
        gettext_noop(
            "A child task ended without succeeding (aborted or rolled back), so this step cannot "
            "collect its results; roll back to undo the family's effects, or abort to keep them."
        ),
        kinds=_kinds(K.CHILD_FAILED),
        compensable=True,
        irreversible=False,
    ),
    Rule(
        "child-failed-irreversible",
        _A.ABORT,
        gettext_noop(
            "A child task ended without succeeding, so this step cannot collect its results; "
            "nothing here can be undone automatically: abort and settle the effects by hand."
        ),
        kinds=_kinds(K.CHILD_FAILED),
    ),
    Rule(
        "agent-changed",
        _A.RETRY,
        gettext_noop(
            "The agent was re-declared while the task ran (its plan, tools or prompt changed); "
            "read what changed, then retry to go on under the new declaration (each step records "
            "its version), or abort to keep the old one's work as it is."
        ),
        kinds=_kinds(K.AGENT_CHANGED),
    ),
    Rule(
        "unknown-agent",
        _A.RETRY,
        gettext_noop(
            "The agent is not registered on the workers (a deploy removed or renamed it); deploy "
            "it and retry: the checkpoint is intact."
        ),
        kinds=_kinds(K.UNKNOWN_AGENT),
    ),
    Rule(
        "model-transient",
        _A.RETRY,
        gettext_noop(
            "The model provider failed transiently (%(kind)s, attempt %(attempts)s of "
            "%(attempt_cap)s); retry with backoff: only this model call is repeated."
        ),
        kinds=TRANSIENT,
        layers=_set("model"),
    ),
    Rule(
        "late-skip",
        _A.SKIP,
        gettext_noop(
            "At %(percent)s%% done a failing %(side_effect)s step (%(kind)s) should not hold the "
            "task; skip it and do it by hand, or retry once the cause is fixed."
        ),
        kinds=SKIPPABLE,
        side_effects=_set("read", "notify"),
        band=Band.LATE,
        stuck=True,
    ),
    Rule(
        "tool-output-invalid",
        _A.RETRY,
        gettext_noop(
            "The tool ran but returned output that cannot be stored (%(kind)s); fix the tool, then "
            "retry: its ledger row is resolved, so nothing runs twice behind your back."
        ),
        kinds=_kinds(K.OUTPUT_INVALID, K.TOOL_ERROR),
        layers=_set("tool"),
    ),
    Rule(
        "model-refused",
        _A.ABORT,
        gettext_noop(
            "The model server refused the request itself (4xx); a retry would send the same "
            "request, so fix the model settings (name, key, adapter) and retry, or abort."
        ),
        kinds=_kinds(K.BAD_REQUEST),
        layers=_set("model"),
    ),
    Rule(
        "output-invalid",
        _A.RETRY,
        gettext_noop(
            "The model's reply was malformed (attempt %(attempts)s of %(attempt_cap)s); retry with "
            "a repair prompt."
        ),
        kinds=_kinds(K.OUTPUT_INVALID),
    ),
    Rule(
        "context-overflow",
        _A.RETRY,
        gettext_noop(
            "The conversation outgrew the model's context window; retry with earlier work "
            "summarized."
        ),
        kinds=_kinds(K.CONTEXT_OVERFLOW),
    ),
    Rule(
        "tool-rate-limited",
        _A.RETRY,
        gettext_noop(
            "The service is throttling calls; retry after its Retry-After with the same "
            "idempotency key: nothing runs twice."
        ),
        kinds=_kinds(K.RATE_LIMITED),
        layers=_set("tool"),
    ),
    Rule(
        "tool-unreachable-read",
        _A.RETRY,
        gettext_noop(
            "A low-risk call (%(kind)s) did not complete; repeating it changes nothing remotely."
        ),
        kinds=_kinds(K.TIMEOUT, K.UNAVAILABLE),
        layers=_set("tool"),
        risks=frozenset({Risk.LOW}),
    ),
    Rule(
        "tool-unreachable-write",
        _A.RETRY,
        gettext_noop(
            "The %(side_effect)s call failed after it was sent (%(kind)s); the probe or the "
            "service's key dedup rules out a double effect, so retry with the same key."
        ),
        kinds=_kinds(K.TIMEOUT, K.UNAVAILABLE),
        layers=_set("tool"),
    ),
    Rule(
        "schema-mismatch",
        _A.RETRY,
        gettext_noop(
            "The service answered in an unexpected shape; upgrade the tool adapter, then retry: "
            "the same key makes the service replay rather than act twice."
        ),
        kinds=_kinds(K.SCHEMA_MISMATCH),
    ),
    Rule(
        "missing-scope",
        _A.GRANT,
        gettext_noop(
            "The service refused the call for lack of scope %(missing_scope)s; grant exactly that "
            "scope to this task for a bounded time, and the step continues under it (no other step "
            "runs again)."
        ),
        kinds=_kinds(K.AUTHORIZATION_GAP),
        layers=_set("tool"),
        scope_named=True,
    ),
    Rule(
        "tool-schema-changed",
        _A.ABORT,
        gettext_noop(
            "The MCP server changed a tool after this task began relying on it, and the call was "
            "not sent; review the change, then abort and start a new task under the new schema (or "
            "skip the step if the task no longer needs the tool)."
        ),
        kinds=_kinds(K.TOOL_SCHEMA_CHANGED),
    ),
    Rule(
        "tool-forbidden",
        _A.RETRY,
        gettext_noop(
            "The service refused the call for lack of permission; grant the scope or reroute, then "
            "retry."
        ),
        kinds=_kinds(K.AUTHORIZATION_GAP),
        layers=_set("tool"),
    ),
    Rule(
        "plan-repair",
        _A.REPAIR,
        gettext_noop(
            "The agent's approach is what failed (%(kind)s), and a retry would repeat it; repair "
            "the plan (tell the step what to do differently, add or remove a step, or switch "
            "strategy), then retry: completed steps and their effects stay as they are."
        ),
        kinds=_kinds(K.PLANNING_LOOP, K.LOW_CONFIDENCE, K.CONFLICT, K.BAD_REQUEST),
        layers=_set("tool", "orchestration"),
        repairable=True,
    ),
    Rule(
        "planning-loop",
        _A.RETRY,
        gettext_noop(
            "The agent kept proposing the same action; edit the plan or the step's instructions, "
            "then retry."
        ),
        kinds=_kinds(K.PLANNING_LOOP),
    ),
    Rule(
        "low-confidence",
        _A.RETRY,
        gettext_noop(
            "The model's confidence stayed below the agent's floor for several steps in a row "
            "(confidence collapse); add guidance to the step, then retry."
        ),
        kinds=_kinds(K.LOW_CONFIDENCE),
    ),
    Rule(
        "rejected-undo",
        _A.ROLLBACK,
        gettext_noop(
            "The service rejected the recorded request (%(kind)s) and a retry would send it again; "
            "undo the effects so far and start over."
        ),
        kinds=_kinds(K.BAD_REQUEST, K.CONFLICT),
        compensable=True,
        irreversible=False,
    ),
    Rule(
        "rejected",
        _A.ABORT,
        gettext_noop(
            "The service rejected the recorded request (%(kind)s) and a retry would send it again; "
            "abort and start over."
        ),
        kinds=_kinds(K.BAD_REQUEST, K.CONFLICT),
    ),
    Rule(
        "retry-cap",
        _A.RETRY,
        gettext_noop(
            "The step used up its %(attempt_cap)s attempts; read its last error and retry once the "
            "cause is fixed."
        ),
        kinds=_kinds(K.RETRY_CAP),
    ),
    Rule(
        "default",
        _A.ABORT,
        gettext_noop(
            "Unrecognised failure (%(layer)s: %(kind)s); inspect the step's error and abort unless "
            "you know a retry is safe."
        ),
    ),
)
