"""The fault matrix: every fault mode of the payments service against a tool whose remote
honours idempotency keys and offers a probe, and against a legacy tool with neither.

Real worker processes, real HTTP. Each fault applies to every call, so retryable faults run the
step exactly up to its cap. Nothing may be re-executed blindly: at most one effect per key.

No case kills a process: one worker and one sweeper serve every case of the module on an xdist
worker (`matrix`), started once instead of twice per case (a start costs some 3.5 s of CPU for
Django and the app's imports). Each case's task settles before the case ends, and its rows and
Redis keys are emptied before the next case begins.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from agentops.dev.sim.models import Effect
from agentops.dev.sim.services import fault_set
from agentops.engine import task_create
from agentops.models import Step, Task, ToolCall
from agentops.states import LedgerStatus, StepStatus, TaskStatus
from tests.conftest import Processes, process_env, process_settings, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.crash]

REFUND = 3
SETTLED = {TaskStatus.SUCCEEDED, TaskStatus.NEEDS_ATTENTION}
WORKER_ENV = {"AGENTOPS_TOOL_TIMEOUT_SECONDS": "0.8"}
DELAY = {"timeout_before": 1.2, "execute_then_timeout": 1.2, "slow": 0.3, "429": 0.0}

# mode: (task status, ledger status of the live row, refund attempts, effects, failure kind)
# `issue_refund` declares its own cap of 2 tries (docs/agents.md); the legacy tool has the
# task's 3.
KEYED = {
    "ok": (TaskStatus.SUCCEEDED, LedgerStatus.SUCCEEDED, 1, 1, None),
    "429": (TaskStatus.NEEDS_ATTENTION, None, 2, 0, "rate_limited"),
    "5xx_before": (TaskStatus.NEEDS_ATTENTION, None, 2, 0, "unavailable"),
    "timeout_before": (TaskStatus.NEEDS_ATTENTION, None, 2, 0, "timeout"),
    "execute_then_timeout": (TaskStatus.SUCCEEDED, LedgerStatus.SUCCEEDED, 1, 1, None),
    "execute_then_5xx": (TaskStatus.SUCCEEDED, LedgerStatus.SUCCEEDED, 1, 1, None),
    "slow": (TaskStatus.SUCCEEDED, LedgerStatus.SUCCEEDED, 1, 1, None),
    "schema_change": (TaskStatus.NEEDS_ATTENTION, LedgerStatus.SUCCEEDED, 1, 1, "schema_mismatch"),
    "forbidden": (TaskStatus.NEEDS_ATTENTION, None, 1, 0, "authorization_gap"),
    # The request arrives twice: the remote performs it once (same key) and answers both.
    "duplicate": (TaskStatus.SUCCEEDED, LedgerStatus.SUCCEEDED, 1, 1, None),
}
LEGACY = {
    "ok": (TaskStatus.SUCCEEDED, LedgerStatus.SUCCEEDED, 1, 1, None),
    "429": (TaskStatus.NEEDS_ATTENTION, None, 3, 0, "rate_limited"),
    "5xx_before": (
        TaskStatus.NEEDS_ATTENTION,
        LedgerStatus.EXECUTED_UNKNOWN,
        1,
        0,
        "side_effect_unknown",
    ),
    "timeout_before": (
        TaskStatus.NEEDS_ATTENTION,
        LedgerStatus.EXECUTED_UNKNOWN,
        1,
        0,
        "side_effect_unknown",
    ),
    "execute_then_timeout": (
        TaskStatus.NEEDS_ATTENTION,
        LedgerStatus.EXECUTED_UNKNOWN,
        1,
        1,
        "side_effect_unknown",
    ),
    "execute_then_5xx": (
        TaskStatus.NEEDS_ATTENTION,
        LedgerStatus.EXECUTED_UNKNOWN,
        1,
        1,
        "side_effect_unknown",
    ),
    "slow": (TaskStatus.SUCCEEDED, LedgerStatus.SUCCEEDED, 1, 1, None),
    "schema_change": (
        TaskStatus.NEEDS_ATTENTION,
        LedgerStatus.EXECUTED_UNKNOWN,
        1,
        1,
        "side_effect_unknown",
    ),
    "forbidden": (TaskStatus.NEEDS_ATTENTION, None, 1, 0, "authorization_gap"),
}
CASES = [("refund", mode, expected) for mode, expected in KEYED.items()] + [
    ("refund_legacy", mode, expected) for mode, expected in LEGACY.items()
]


@pytest.fixture(scope="module")
def matrix(
    sim_server: str, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Processes]:
    """The worker and the sweeper every case of this module shares; killed after the last."""
    log_dir = tmp_path_factory.mktemp("fault-matrix")
    with django_db_blocker.unblock():
        procs = Processes(process_env(sim_server, log_dir), log_dir)
    procs.worker(extra_env=WORKER_ENV)
    procs.sweeper(interval=0.2)
    yield procs
    procs.stop_all()


@pytest.fixture
def processes(matrix: Processes, redis_clean: None, settings: Any, sim_server: str) -> Processes:
    """The shared worker and sweeper, both still running, on an empty database and Redis."""
    process_settings(settings, sim_server)
    assert [child.poll() for child in matrix.children] == [None, None]
    return matrix


@pytest.mark.parametrize(
    ("operation", "mode", "expected"), CASES, ids=[f"{op}-{mode}" for op, mode, _ in CASES]
)
def test_fault_matrix(processes, operation, mode, expected):
    status, live_status, attempts, effects, kind = expected
    fault_set(service="payments", operation=operation, mode=mode, delay=DELAY.get(mode, 0.0))
    task_input = {
        "order_id": "A1001",
        **({"refund_api": "legacy"} if "legacy" in operation else {}),
    }
    task = task_create(agent="refund", goal=f"Refund ({mode})", input=task_input)

    task = wait_for(
        lambda: (t := Task.objects.get(pk=task.pk)).status in SETTLED and t,
        timeout=60,
        message=f"the task to settle under {mode}",
    )

    step = Step.objects.get(task=task, ordinal=REFUND)
    rows = list(ToolCall.objects.filter(step=step).order_by("id"))
    sent = Counter(Effect.objects.filter(operation=operation).values_list("request_key", flat=True))
    assert task.status == status, task.failure
    assert step.attempts == attempts
    assert len(rows) == attempts  # one ledger row per try ...
    assert len({row.idempotency_key for row in rows}) == 1  # ... all with the same key
    assert sum(sent.values()) == effects
    assert max(sent.values(), default=0) <= 1
    if live_status is None:
        assert {row.status for row in rows} == {LedgerStatus.FAILED}
    else:
        assert rows[-1].status == live_status
    if kind is not None:
        assert task.failure["kind"] == kind
        assert step.status == StepStatus.FAILED
    if live_status == LedgerStatus.EXECUTED_UNKNOWN:
        time.sleep(1.5)  # the sweeper runs every 0.2 s: nothing may retry the unknown call
        assert ToolCall.objects.filter(step=step).count() == 1
        assert Effect.objects.filter(operation=operation).count() == effects
        assert Task.objects.get(pk=task.pk).status == TaskStatus.NEEDS_ATTENTION


@pytest.mark.parametrize(
    ("operation", "live_status", "task_status"),
    [
        ("refund", LedgerStatus.SUCCEEDED, TaskStatus.SUCCEEDED),
        ("refund_legacy", LedgerStatus.EXECUTED_UNKNOWN, TaskStatus.NEEDS_ATTENTION),
    ],
)
def test_a_response_to_another_request_is_not_trusted(
    processes, operation, live_status, task_status
):
    other = {"refund_id": "R-SOMEONE-ELSE", "order_id": "Z9", "amount": "1.00", "status": "done"}
    Effect.objects.create(
        service="payments",
        operation=operation,
        idempotency_key="someone-else" if operation == "refund" else None,
        request_key="someone-else",
        request_digest="0" * 64,
        request={},
        response=other,
    )
    fault_set(service="payments", operation=operation, mode="out_of_order", count=1)
    task_input = {
        "order_id": "A1001",
        **({"refund_api": "legacy"} if "legacy" in operation else {}),
    }
    task = task_create(agent="refund", goal="Refund (out of order)", input=task_input)

    task = wait_for(
        lambda: (t := Task.objects.get(pk=task.pk)).status in SETTLED and t,
        timeout=60,
        message="the task to settle after an out-of-order response",
    )
    row = ToolCall.objects.filter(step__task=task, step__ordinal=REFUND).order_by("id").last()
    ours = Effect.objects.filter(operation=operation).exclude(request_key="someone-else")

    assert task.status == task_status, task.failure
    assert row.status == live_status
    assert ours.count() == 1
    if live_status == LedgerStatus.SUCCEEDED:
        # The recorded result is ours, found by the probe, not the other caller's answer.
        assert row.result["refund_id"] != "R-SOMEONE-ELSE"
        assert row.result == ours.get().response
