from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentops.engine.advisor import (
    KINDS,
    RULES,
    Action,
    LedgerView,
    Risk,
    Situation,
    StepView,
    advise,
    preview,
    risk_of,
    situation_from,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "recovery.md"

S = Situation
# One situation per row of RULES, each chosen so that this row (and no earlier one) matches.
ROW_CASES: dict[str, tuple[Situation, Action]] = {
    "rollback-unfinished": (
        S("authorization_gap", "tool", "write", 0.5, compensable=True, rolling_back=True),
        Action.ROLLBACK,
    ),
    "side-effect-unknown": (
        S("side_effect_unknown", "orchestration", "financial", 0.6, compensable=True),
        Action.CONFIRM,
    ),
    "checkpoint-mismatch": (S("checkpoint_mismatch", "orchestration", None, 0.9), Action.RETRY),
    "crash-resume": (
        S("process_crash", "orchestration", "write", 0.1, task_recoveries=2),
        Action.RETRY,
    ),
    "crash-loop-late": (
        S("process_crash", "orchestration", "write", 0.8, task_recoveries=6, compensable=True),
        Action.RETRY,
    ),
    "crash-loop-undo": (
        S("process_crash", "orchestration", "write", 0.5, task_recoveries=6, compensable=True),
        Action.ROLLBACK,
    ),
    "crash-loop": (
        S(
            "process_crash",
            "orchestration",
            "write",
            0.5,
            task_recoveries=6,
            compensable=True,
            irreversible=True,
        ),
        Action.ABORT,
    ),
    "policy-deny-undo": (
        S("authorization_gap", "orchestration", "financial", 0.9, compensable=True),
        Action.ROLLBACK,
    ),
    "policy-deny": (S("authorization_gap", "orchestration", "financial", 0.9), Action.ABORT),
    "early-undo-restart": (
        S("planning_loop", "orchestration", "write", 0.1, compensable=True),
        Action.ROLLBACK,
    ),
    "early-restart": (
        S("output_invalid", "model", "read", 1 / 20, step_attempts=3, step_retry_cap=3),
        Action.ABORT,
    ),
    "budget-late": (S("budget_overflow", "orchestration", "write", 0.8), Action.RETRY),
    "budget-undo": (
        S("budget_overflow", "orchestration", "write", 0.4, compensable=True),
        Action.ROLLBACK,
    ),
    "budget": (S("budget_overflow", "orchestration", "write", 0.1), Action.ABORT),
    "unknown-tool": (S("unknown_tool", "orchestration", None, 0.5), Action.RETRY),
    "unknown-fan-out": (S("unknown_fan_out", "orchestration", None, 0.3), Action.RETRY),
    "child-failed": (
        S("child_failed", "orchestration", None, 0.3, compensable=True),
        Action.ROLLBACK,
    ),
    "child-failed-irreversible": (S("child_failed", "orchestration", None, 0.3), Action.ABORT),
    "agent-changed": (S("agent_changed", "orchestration", "write", 0.5), Action.RETRY),
    "unknown-agent": (S("unknown_agent", "orchestration", None, 0.5), Action.RETRY),
    "model-transient": (
        S("rate_limited", "model", "read", 0.9, step_attempts=3, step_retry_cap=3),
        Action.RETRY,
    ),
    "late-skip": (
        S(
            "unavailable",
            "tool",
            "notify",
            0.8,
            step_attempts=3,
            step_retry_cap=3,
            irreversible=True,
        ),
        Action.SKIP,
    ),
    "tool-output-invalid": (S("output_invalid", "tool", "financial", 0.5), Action.RETRY),
    "model-refused": (S("bad_request", "model", None, 0.5), Action.ABORT),
    "output-invalid": (
        S("output_invalid", "model", "read", 0.1, step_attempts=1, step_retry_cap=3),
        Action.RETRY,
    ),
    "context-overflow": (
        S("context_overflow", "model", "write", 0.5, step_attempts=3, step_retry_cap=3),
        Action.RETRY,
    ),
    "tool-rate-limited": (
        S("rate_limited", "tool", "financial", 0.5, step_attempts=3, step_retry_cap=3),
        Action.RETRY,
    ),
    "tool-unreachable-read": (S("timeout", "tool", "read", 0.5), Action.RETRY),
    "tool-unreachable-write": (
        S("timeout", "tool", "financial", 0.8, step_attempts=3, step_retry_cap=3),
        Action.RETRY,
    ),
    "schema-mismatch": (S("schema_mismatch", "tool", "write", 0.5), Action.RETRY),
    "missing-scope": (
        S("authorization_gap", "tool", "financial", 0.5, missing_scope="payments:credit"),
        Action.GRANT,
    ),
    "tool-schema-changed": (S("tool_schema_changed", "tool", "write", 0.5), Action.ABORT),
    "tool-forbidden": (S("authorization_gap", "tool", "financial", 0.5), Action.RETRY),
    "plan-repair": (S("conflict", "tool", "financial", 0.5, repairable=True), Action.REPAIR),
    "planning-loop": (S("planning_loop", "orchestration", "write", 0.8), Action.RETRY),
    "low-confidence": (S("low_confidence", "orchestration", "financial", 0.5), Action.RETRY),
    "rejected-undo": (
        S("bad_request", "tool", "financial", 0.5, compensable=True),
        Action.ROLLBACK,
    ),
    "rejected": (S("conflict", "tool", "financial", 0.5, irreversible=True), Action.ABORT),
    "retry-cap": (
        S("retry_cap", "orchestration", "write", 0.5, step_attempts=3, step_retry_cap=3),
        Action.RETRY,
    ),
    "default": (S("cosmic_ray", "process", "write", 0.5), Action.ABORT),
}


@pytest.mark.parametrize("row", [rule.name for rule in RULES])
def test_each_row_of_the_table_recommends_its_action(row):
    situation, expected = ROW_CASES[row]

    recommendation = advise(situation)

    assert recommendation.rule == row
    assert recommendation.action == expected
    assert recommendation.options[0] == expected
    assert "\n" not in recommendation.rationale
    assert "{" not in recommendation.rationale
    assert recommendation.rationale.endswith(".")


def test_every_row_has_a_case_and_every_case_a_row():
    assert [rule.name for rule in RULES] == list(ROW_CASES)
    assert len({rule.name for rule in RULES}) == len(RULES)


def test_the_last_row_matches_anything():
    assert RULES[-1].name == "default"
    assert RULES[-1].matches(S("", "", None, 0.0))


@pytest.mark.parametrize(
    ("layer", "kind"),
    sorted((layer, kind) for layer, kinds in KINDS.items() for kind in kinds),
    ids=lambda value: value,
)
@pytest.mark.parametrize("progress", [0.05, 0.5, 0.9], ids=["early", "middle", "late"])
def test_no_failure_kind_of_the_engine_falls_to_the_default_row(layer, kind, progress):
    for side_effect in (None, "read", "notify", "write", "financial"):
        for capped in (False, True):
            situation = S(
                kind,
                layer,
                side_effect,
                progress,
                step_attempts=3 if capped else 1,
                task_recoveries=6 if capped else 1,
                compensable=capped,
            )
            assert advise(situation).rule != "default", situation


def test_progress_decides_between_restart_and_finishing_for_the_same_failure():
    early = advise(S("planning_loop", "orchestration", "read", 1 / 20))
    late_read = advise(S("planning_loop", "orchestration", "read", 16 / 20))
    late_write = advise(S("planning_loop", "orchestration", "write", 16 / 20))

    assert (early.action, early.rule) == (Action.ABORT, "early-restart")
    assert (late_read.action, late_read.rule) == (Action.SKIP, "late-skip")
    assert (late_write.action, late_write.rule) == (Action.RETRY, "planning-loop")
    assert "5%" in early.rationale
    assert "80%" in late_read.rationale


def test_nothing_is_restarted_early_once_an_effect_cannot_be_undone():
    recommendation = advise(S("planning_loop", "orchestration", "write", 0.1, irreversible=True))

    assert recommendation.rule == "planning-loop"
    assert recommendation.action == Action.RETRY


def test_a_failure_the_engine_still_retries_is_not_restarted_early():
    below_cap = advise(S("output_invalid", "model", None, 0.1, step_attempts=1))
    at_cap = advise(S("output_invalid", "model", None, 0.1, step_attempts=3))

    assert below_cap.action == Action.RETRY
    assert at_cap.action == Action.ABORT


def test_unknown_effect_offers_only_confirm_or_abort():
    recommendation = advise(S("side_effect_unknown", "tool", "financial", 0.5, compensable=True))

    assert recommendation.options == (Action.CONFIRM, Action.ABORT)


def test_rollback_is_offered_only_when_something_can_be_compensated():
    without = advise(S("schema_mismatch", "tool", "write", 0.5))
    with_effects = advise(S("schema_mismatch", "tool", "write", 0.5, compensable=True))

    assert without.options == (Action.RETRY, Action.SKIP, Action.ABORT)
    assert with_effects.options == (Action.RETRY, Action.SKIP, Action.ROLLBACK, Action.ABORT)


def test_rationale_names_the_counters():
    recommendation = advise(
        S("rate_limited", "model", None, 0.5, step_attempts=3, step_retry_cap=3)
    )

    assert "attempt 3 of 3" in recommendation.rationale
    assert "rate limited" in recommendation.rationale


@pytest.mark.parametrize(
    ("side_effect", "risk"),
    [
        ("read", Risk.LOW),
        ("write", Risk.MEDIUM),
        ("notify", Risk.MEDIUM),
        ("financial", Risk.HIGH),
        (None, Risk.LOW),
        ("teleport", Risk.LOW),
    ],
)
def test_risk_comes_from_the_side_effect_class(side_effect, risk):
    assert risk_of(side_effect) == risk


def test_docs_table_lists_the_rows_in_order_with_their_actions():
    rows = re.findall(
        r"^\|\s*\d+\s*\|\s*`([a-z-]+)`\s*\|.*\|\s*\*\*(\w+)\*\*\s*\|\s*$",
        DOC.read_text(),
        flags=re.MULTILINE,
    )

    assert rows == [(rule.name, rule.action.value) for rule in RULES]


# -- previews ----------------------------------------------------------------------------------

TRIP_STEPS = (
    StepView(0, "Search flights", "succeeded"),
    StepView(1, "Book flight", "succeeded"),
    StepView(2, "Charge card", "succeeded"),
    StepView(3, "Email confirmation", "succeeded"),
    StepView(4, "Book hotel", "failed"),
    StepView(5, "Send itinerary", "pending"),
)
TRIP_LEDGER = (
    LedgerView("k-search", "flights_search", "succeeded", "read", compensable=False),
    LedgerView("k-flight", "flights_book", "succeeded", "write", compensable=True),
    LedgerView("k-charge", "payments_charge", "succeeded", "financial", compensable=True),
    LedgerView("k-email", "email_send", "succeeded", "notify", compensable=False),
    LedgerView("k-hotel", "hotels_book", "failed", "write", compensable=True),
)


def _keys(rows):
    return [row.key for row in rows]


def _ordinals(steps):
    return [step.ordinal for step in steps]


def test_preview_retry_runs_the_failed_step_and_the_rest():
    result = preview(Action.RETRY, TRIP_STEPS, TRIP_LEDGER)

    assert _ordinals(result.runs) == [4, 5]
    assert result.skipped == ()
    assert result.compensated == ()
    assert _keys(result.kept) == ["k-flight", "k-charge", "k-email"]
    assert _keys(result.not_undoable) == ["k-email"]


def test_preview_skip_marks_the_failed_step_and_runs_the_rest():
    result = preview("skip", TRIP_STEPS, TRIP_LEDGER)

    assert _ordinals(result.skipped) == [4]
    assert _ordinals(result.runs) == [5]
    assert result.compensated == ()


def test_preview_rollback_compensates_in_reverse_order_and_lists_what_stays():
    result = preview(Action.ROLLBACK, TRIP_STEPS, TRIP_LEDGER)

    assert result.runs == ()
    assert _keys(result.compensated) == ["k-charge", "k-flight"]
    assert _keys(result.not_undoable) == ["k-email"]
    assert _keys(result.kept) == ["k-email"]
    assert "payments_charge, flights_book" in result.summary
    assert "cannot be undone automatically: email_send" in result.summary


def test_preview_abort_runs_nothing_and_keeps_every_effect():
    result = preview(Action.ABORT, TRIP_STEPS, TRIP_LEDGER)

    assert result.runs == ()
    assert result.skipped == ()
    assert result.compensated == ()
    assert _keys(result.kept) == ["k-flight", "k-charge", "k-email"]


def test_preview_rollback_skips_effects_already_compensated_and_the_compensations():
    ledger = (
        LedgerView("k-flight", "flights_book", "compensated", "write", compensable=True),
        LedgerView(
            "k-cancel",
            "flights_cancel",
            "succeeded",
            "write",
            compensable=False,
            compensates="k-flight",
        ),
        LedgerView("k-charge", "payments_charge", "succeeded", "financial", compensable=True),
    )

    result = preview(Action.ROLLBACK, TRIP_STEPS, ledger)

    assert _keys(result.compensated) == ["k-charge"]
    assert result.not_undoable == ()


def test_preview_lists_unconfirmed_calls():
    ledger = (
        *TRIP_LEDGER[:4],
        LedgerView("k-hotel", "hotels_book", "executed_unknown", "write", compensable=True),
    )

    result = preview(Action.ROLLBACK, TRIP_STEPS, ledger)

    assert _keys(result.unconfirmed) == ["k-hotel"]
    assert "k-hotel" not in _keys(result.compensated)
    assert "Unconfirmed: hotels_book" in result.summary


def test_preview_refuses_confirm():
    with pytest.raises(ValueError, match="confirm"):
        preview(Action.CONFIRM, TRIP_STEPS, TRIP_LEDGER)


def test_situation_from_views_counts_progress_and_effects():
    situation = situation_from(
        failure={"layer": "tool", "kind": "unavailable", "retryable": True},
        side_effect="write",
        steps=TRIP_STEPS,
        ledger=TRIP_LEDGER,
        step_attempts=3,
        step_retry_cap=3,
        task_recoveries=0,
        task_recovery_cap=5,
    )

    assert situation.progress == pytest.approx(4 / 6)
    assert situation.compensable is True
    assert situation.irreversible is True
    assert advise(situation).rule == "tool-unreachable-write"


def test_an_action_reviewers_rejected_twice_is_not_recommended_for_retry():
    # The failure engine/decisions.py records when reviewers reject the same action twice.
    loop = {
        "layer": "orchestration",
        "kind": "planning_loop",
        "retryable": False,
        "detail": {"args_digest": "d", "rejections": 2},
    }

    def advised(ledger):
        return advise(
            situation_from(
                failure=loop,
                side_effect="financial",
                steps=TRIP_STEPS,
                ledger=ledger,
                step_attempts=0,
                step_retry_cap=3,
                task_recoveries=0,
                task_recovery_cap=5,
            )
        )

    stuck = advised(TRIP_LEDGER)
    assert (stuck.action, stuck.rule) == (Action.ABORT, "people-rejected")
    assert "rejected this action 2 times" in stuck.rationale
    assert Action.RETRY in stuck.options
    undoable = advised(tuple(row for row in TRIP_LEDGER if row.compensable))
    assert (undoable.action, undoable.rule) == (Action.ROLLBACK, "people-rejected-undo")


def test_situation_from_a_capped_step_judges_the_layer_of_its_last_failure():
    capped = {
        "layer": "orchestration",
        "kind": "rate_limited",
        "retryable": False,
        "detail": {"step": 4, "last_failure": {"layer": "model", "kind": "rate_limited"}},
    }

    situation = situation_from(
        failure=capped,
        side_effect="write",
        steps=TRIP_STEPS,
        ledger=TRIP_LEDGER,
        step_attempts=3,
        step_retry_cap=3,
        task_recoveries=0,
        task_recovery_cap=5,
    )

    assert situation.layer == "model"
    assert advise(situation).rule == "model-transient"


def test_every_kind_the_code_raises_is_in_the_one_enum_and_every_rule_names_real_kinds():
    from agentops.engine.errors import LAYER_KINDS, FailureKind

    root = Path(__file__).resolve().parents[2] / "agentops"
    raised = {
        kind
        for path in root.rglob("*.py")
        for kind in re.findall(r'kind="([a-z_]+)"', path.read_text())
    }
    assert raised <= set(FailureKind)
    assert {str(k) for kinds in LAYER_KINDS.values() for k in kinds} == set(FailureKind)
    for rule in RULES:
        assert rule.kinds is None or rule.kinds <= set(FailureKind), rule.name


def test_no_row_is_dead_every_row_is_the_first_match_of_some_recorded_failure():
    from itertools import product

    hit = {
        advise(
            S(
                kind,
                layer,
                side_effect,
                progress,
                step_attempts=3 if capped else 1,
                task_recoveries=6 if capped else 1,
                compensable=effects[0],
                irreversible=effects[1],
                rolling_back=rolling_back,
                missing_scope=scope,
                repairable=repairable,
            )
        ).rule
        for layer, kinds in KINDS.items()
        for (
            kind,
            progress,
            side_effect,
            capped,
            effects,
            rolling_back,
            scope,
            repairable,
        ) in product(
            kinds,
            (0.05, 0.5, 0.9),
            (None, "read", "notify", "write", "financial"),
            (False, True),
            ((False, False), (True, False), (True, True)),
            (False, True),
            (None, "payments:credit"),
            (False, True),
        )
    }
    assert hit == {rule.name for rule in RULES} - {"default"}
