"""The durable state of a task: metadata, plan, ledger, event log, snapshots and artifacts, and
its waiting states: the gate a step parks on and the audit record of an autonomous step; and the
rows that keep the record's upkeep (the sweep lease, artifacts kept in PostgreSQL, archived
tasks). API tokens and scope grants, who may act, are in `access`; the fleet's stops in `stops`.

No business logic lives here. Statuses are written only by `agentops.engine.transitions`; every
other write goes through a service. Constraint names follow `<app>_<model>_<rule>`.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from agentops.models.access import ApiToken, ProviderIdentity, ScopeGrant
from agentops.models.stops import FleetStop, StopScope
from agentops.states import (
    AuditStatus,
    GateStatus,
    LedgerStatus,
    Phase,
    StepStatus,
    TaskMode,
    TaskStatus,
)


class Task(models.Model):
    agent = models.CharField(max_length=100)
    goal = models.TextField()
    input = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        max_length=32, choices=TaskStatus.choices, default=TaskStatus.QUEUED, editable=False
    )
    phase = models.CharField(max_length=32, choices=Phase.choices, blank=True, editable=False)
    mode = models.CharField(
        max_length=16, choices=TaskMode.choices, default=TaskMode.FORWARD, editable=False
    )
    current_step = models.PositiveIntegerField(default=0, editable=False)
    step_count = models.PositiveIntegerField(default=0, editable=False)

    lease_epoch = models.BigIntegerField(default=0, editable=False)
    lease_owner = models.CharField(max_length=200, blank=True, editable=False)
    lease_expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    next_run_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_seq = models.BigIntegerField(default=0, editable=False)

    claims = models.PositiveIntegerField(default=0, editable=False)
    recoveries = models.PositiveIntegerField(default=0, editable=False)
    recovery_cap = models.PositiveIntegerField(default=5)
    step_retry_cap = models.PositiveIntegerField(default=3)

    tokens_used = models.PositiveIntegerField(default=0, editable=False)
    token_budget = models.PositiveIntegerField(null=True, blank=True)
    cost_used = models.DecimalField(max_digits=12, decimal_places=6, default=0, editable=False)
    cost_budget = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    wall_time_budget_seconds = models.PositiveIntegerField(null=True, blank=True)
    # Tokens of completed steps that resuming (rather than rerunning from scratch) did not spend.
    tokens_saved = models.PositiveBigIntegerField(default=0, editable=False)

    failure = models.JSONField(null=True, blank=True, editable=False)
    # The version of the agent's declaration the task runs under (`engine/versions.py`): its
    # digest and a short digest per part (plan, tools, prompts). Null: created before versions.
    agent_version = models.JSONField(null=True, blank=True, editable=False)
    # The oversight policy version this task was created under; every step is routed by it.
    policy_version = models.ForeignKey(
        "policies.PolicyVersion",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # A child task: the parent's fan-out step that spawned it, and its place among the siblings.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    parent_step = models.ForeignKey(
        "Step", null=True, blank=True, on_delete=models.CASCADE, related_name="child_tasks"
    )
    fanout_index = models.PositiveIntegerField(null=True, blank=True, editable=False)
    # The W3C traceparent the task's trace hangs from (`agentops.plumbing.tracing`; "" with tracing
    # off).
    trace_context = models.CharField(
        max_length=55, blank=True, default="", db_default="", editable=False
    )
    # Started again from, or forked from a step of, another task (`engine/origins.py`): the
    # original (its later tasks are `again`), how (`restart`, `fork`) and, for a fork, the
    # first step that ran anew (the steps before it are the original's results, referenced).
    origin = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="again"
    )
    origin_kind = models.CharField(max_length=8, blank=True, default="", db_default="")
    origin_step = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now_add=True, editable=False)
    # When the task entered its status (for a stopped task: since when it waits for a person).
    # No index holds `updated_at`, which every commit sets, so a commit that changes no status
    # updates the row in place (a HOT update: no index entries written).
    status_changed_at = models.DateTimeField(auto_now_add=True, editable=False)
    started_at = models.DateTimeField(null=True, blank=True, editable=False)
    finished_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["status", "lease_expires_at"], name="agentops_task_claimable_idx"),
            # The inbox's stopped tasks in their order, and their count in the navigation: a
            # few hundred entries however many tasks there are.
            models.Index(
                fields=["status_changed_at", "id"],
                condition=Q(status=TaskStatus.NEEDS_ATTENTION),
                name="agentops_task_stopped_idx",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=TaskStatus.values), name="agentops_task_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(current_step__lte=models.F("step_count")),
                name="agentops_task_progress_within_plan",
            ),
            # A fan-out step spawns each child once, even when its worker is killed and retried.
            models.UniqueConstraint(
                fields=["parent_step", "fanout_index"],
                condition=Q(parent_step__isnull=False),
                name="agentops_task_child_once_uniq",
            ),
            models.CheckConstraint(
                condition=Q(
                    parent__isnull=True, parent_step__isnull=True, fanout_index__isnull=True
                )
                | Q(parent__isnull=False, parent_step__isnull=False, fanout_index__isnull=False),
                name="agentops_task_child_fields_together",
            ),
        ]

    def __str__(self) -> str:
        return f"Task {self.pk} ({self.agent}: {self.status})"

    @property
    def is_terminal(self) -> bool:
        from agentops.states import TERMINAL

        return self.status in TERMINAL


class Step(models.Model):
    # Indexed by agentops_step_task_ordinal_uniq, which leads with the task.
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="steps", db_index=False)
    ordinal = models.PositiveIntegerField()
    title = models.CharField(max_length=200)
    spec = models.JSONField(default=dict, blank=True)
    depends_on = models.JSONField(default=list, blank=True)
    status = models.CharField(
        max_length=16, choices=StepStatus.choices, default=StepStatus.PENDING, editable=False
    )
    attempts = models.PositiveIntegerField(default=0, editable=False)
    prompt_digest = models.CharField(max_length=64, blank=True, editable=False)
    # Which declaration of the agent (its version digest) and which model ran the step's last
    # attempt; blank for a step that never started (or started before versions were recorded).
    # The database holds the default too: a worker of the previous release inserts steps
    # without these columns during a deploy.
    agent_version = models.CharField(max_length=64, blank=True, editable=False, db_default="")
    model_name = models.CharField(max_length=100, blank=True, editable=False, db_default="")
    model_response = models.JSONField(null=True, blank=True, editable=False)
    output = models.JSONField(null=True, blank=True, editable=False)
    error = models.JSONField(null=True, blank=True, editable=False)
    route = models.CharField(max_length=16, blank=True, editable=False)
    # The number of the version that routed the step (the task's pinned version, or a newer one
    # it was re-routed under after an edit); the task holds the version itself.
    policy_version_number = models.PositiveIntegerField(null=True, blank=True, editable=False)
    policy_rule = models.CharField(max_length=200, blank=True, editable=False)
    # A person's approval of this step's gated action: the arguments approved (possibly edited),
    # their digest, the policy version and rule it was approved under, and who approved it.
    approval = models.JSONField(null=True, blank=True, editable=False)
    started_at = models.DateTimeField(null=True, blank=True, editable=False)
    finished_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["task", "ordinal"]
        constraints = [
            models.UniqueConstraint(
                fields=["task", "ordinal"], name="agentops_step_task_ordinal_uniq"
            ),
            models.CheckConstraint(
                condition=Q(status__in=StepStatus.values), name="agentops_step_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"Step {self.ordinal + 1} of task {self.task_id}: {self.title}"


class ToolCall(models.Model):
    """One row of the side-effect ledger. The idempotency key is committed before the call runs."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="tool_calls")
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="tool_calls")
    tool = models.CharField(max_length=100)
    side_effect = models.CharField(max_length=32)
    args = models.JSONField(default=dict)
    args_digest = models.CharField(max_length=64)
    idempotency_key = models.CharField(max_length=255)
    status = models.CharField(
        max_length=20, choices=LedgerStatus.choices, default=LedgerStatus.PENDING, editable=False
    )
    result = models.JSONField(null=True, blank=True, editable=False)
    error = models.JSONField(null=True, blank=True, editable=False)
    # Set on the rows of a compensating tool: the call they undo (failed tries are kept too).
    # Indexed by agentops_call_compensation_idx, which holds only the rows where it is set.
    compensation_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="compensations",
        db_index=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now_add=True, editable=False)
    # The task's ledger chain (agentops.engine.chains): set by the database when the row's
    # result is fixed (it first becomes succeeded or failed), its place in the chain and the
    # digest of its content and the previous row's digest. Empty while the call is open.
    chain_seq = models.PositiveIntegerField(null=True, blank=True, editable=False)
    digest = models.CharField(max_length=64, blank=True, default="", db_default="", editable=False)

    class Meta:
        ordering = ["task", "id"]
        # The rare statuses pages ask about per task (an unconfirmed call in the inbox, undone
        # calls on the task list): tiny partial indexes instead of a scan of the ledger.
        indexes = [
            models.Index(
                fields=["task"],
                condition=Q(status=LedgerStatus.EXECUTED_UNKNOWN),
                name="agentops_call_unconfirmed_idx",
            ),
            models.Index(
                fields=["task"],
                condition=Q(status=LedgerStatus.COMPENSATED),
                name="agentops_call_undone_idx",
            ),
            # Most rows undo nothing: a full index would add a NULL entry for each of them on
            # every insert and every status change (a ledger update is never HOT: the status is
            # in the partial indexes' conditions).
            models.Index(
                fields=["compensation_of"],
                condition=Q(compensation_of__isnull=False),
                name="agentops_call_compensation_idx",
            ),
        ]
        constraints = [
            # One live row per key; failed tries stay as history and a retry reuses the key.
            models.UniqueConstraint(
                fields=["idempotency_key"],
                condition=~Q(status=LedgerStatus.FAILED),
                name="agentops_toolcall_live_key_uniq",
            ),
            models.CheckConstraint(
                condition=Q(status__in=LedgerStatus.values), name="agentops_toolcall_status_valid"
            ),
            # One row per place in the task's ledger chain (and the index that finds its end).
            models.UniqueConstraint(
                fields=["task", "chain_seq"],
                condition=Q(chain_seq__isnull=False),
                name="agentops_toolcall_chain_uniq",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool} [{self.status}] {self.idempotency_key}"


class Event(models.Model):
    """Append-only task log. `seq` is gapless per task: it is allocated on the task row."""

    # Indexed by agentops_event_task_seq_uniq, which leads with the task.
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="events", db_index=False)
    seq = models.BigIntegerField()
    action = models.CharField(max_length=100)
    step_ordinal = models.PositiveIntegerField(null=True, blank=True)
    payload = models.JSONField(default=dict, blank=True)
    # Most events have no actor (the engine's): the partial index agentops_event_actor_idx
    # holds only the rows a person wrote.
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    actor_label = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # The task's event chain: the digest of this row's content and event seq - 1's digest, set
    # by the database on insert (agentops.engine.chains).
    digest = models.CharField(max_length=64, blank=True, default="", db_default="", editable=False)

    class Meta:
        ordering = ["task", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["task", "seq"], name="agentops_event_task_seq_uniq"),
        ]
        indexes = [
            models.Index(
                fields=["actor"],
                condition=Q(actor__isnull=False),
                name="agentops_event_actor_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.action}"


class Snapshot(models.Model):
    """Full-tier checkpoint: the task's whole state as of event `seq`."""

    # Indexed by agentops_snapshot_task_seq_uniq, which leads with the task.
    task = models.ForeignKey(
        Task, on_delete=models.CASCADE, related_name="snapshots", db_index=False
    )
    seq = models.BigIntegerField()
    state = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    # The task's snapshot chain: the digest of this row's content and the previous snapshot's
    # digest, set by the database on insert (agentops.engine.chains).
    digest = models.CharField(max_length=64, blank=True, default="", db_default="", editable=False)

    class Meta:
        ordering = ["task", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["task", "seq"], name="agentops_snapshot_task_seq_uniq"),
        ]

    def __str__(self) -> str:
        return f"Snapshot of task {self.task_id} at #{self.seq}"


class Artifact(models.Model):
    """A large payload kept in file storage; JSON rows hold a pointer with its size and sha256."""

    task = models.ForeignKey(
        Task, null=True, blank=True, on_delete=models.CASCADE, related_name="artifacts"
    )
    name = models.CharField(max_length=300)
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    content_type = models.CharField(max_length=100, default="application/json")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.size} bytes)"


class Gate(models.Model):
    """A step parked for a person's decision: the proposed action bound to its arguments digest
    and the policy version that gated it. Opened in the runner's fenced transaction, so a gate is
    open exactly while its task waits at it; at most one open gate per step. Its status moves only
    along `GATE_TRANSITIONS` (`agentops.engine.gates.gate_transition`). Who decided and their
    feedback are kept on the row too (one record per decision, shown on the gate panel)."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="gates")
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="gates")
    status = models.CharField(max_length=16, choices=GateStatus.choices, default=GateStatus.OPEN)
    # The proposed action in its canonical record: tool, arguments as the ledger would run them,
    # their digest, and whether a person had already edited them.
    tool = models.CharField(max_length=100)
    side_effect = models.CharField(max_length=32, blank=True)
    arguments = models.JSONField()
    args_digest = models.CharField(max_length=64)
    edited = models.BooleanField(default=False)
    amount = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    confidence = models.FloatField(null=True, blank=True)
    # Why: the policy version and rule that gated it.
    policy_version = models.ForeignKey(
        "policies.PolicyVersion", null=True, on_delete=models.PROTECT, related_name="+"
    )
    policy_version_number = models.PositiveIntegerField(null=True)
    rule = models.CharField(max_length=200)
    reasons = models.JSONField(default=list)
    approver_group = models.CharField(max_length=150, default="operators")
    # Who, and how many, must approve: the name of its strategy class in
    # `agentops.engine.approvals` (so far the one kind: one person of the approver group). The
    # database holds the default too, so a row written without the column (a worker of the
    # previous release during a deploy, a bulk insert) is of that kind.
    approval_kind = models.CharField(
        max_length=40, default="one_approver", db_default="one_approver"
    )
    # A kind that wants more than one approval (`two_approvers`) keeps the ones given so far
    # here, each {"by", "user_id", "args_digest", "at"}, and names where the second comes from
    # (empty: the approver group again). An edit between approvals replaces the list.
    second_approver_group = models.CharField(max_length=150, blank=True, default="", db_default="")
    approvals = models.JSONField(
        default=list, blank=True, db_default=models.Value([], models.JSONField())
    )
    timeout_action = models.CharField(max_length=16, default="reject")
    escalate_to = models.CharField(max_length=150, blank=True)
    due_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    feedback = models.TextField(blank=True)
    # What a person approved: the arguments the ledger runs (differ from `arguments` when edited)
    # and their digest. Empty until the gate is approved.
    approved_arguments = models.JSONField(null=True, blank=True)
    approved_digest = models.CharField(max_length=64, blank=True)
    # A rejection that also ended the task (reject and stop): "abort" or "rollback".
    stopped_with = models.CharField(max_length=16, blank=True)

    class Meta:
        ordering = ["due_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["step"],
                condition=Q(status=GateStatus.OPEN),
                name="agentops_gate_one_open_per_step",
            ),
            models.CheckConstraint(
                condition=Q(status__in=GateStatus.values), name="agentops_gate_status_valid"
            ),
        ]
        indexes = [
            # Also the inbox's open gates in their order and their count in the navigation.
            models.Index(fields=["status", "due_at"], name="agentops_gate_open_due_idx"),
        ]

    def __str__(self) -> str:
        return f"Gate {self.pk} on task {self.task_id}: {self.tool} ({self.status})"


class AuditItem(models.Model):
    """An autonomous decision queued for after-the-fact review (audit lane, or sampled auto)."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="audit_items")
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="+")
    tool_call = models.OneToOneField(ToolCall, on_delete=models.CASCADE, related_name="audit_item")
    agent = models.CharField(max_length=100)
    tool = models.CharField(max_length=100)
    route = models.CharField(max_length=16)
    sampled = models.BooleanField(default=False)
    rule = models.CharField(max_length=200)
    policy_version_number = models.PositiveIntegerField(null=True)
    status = models.CharField(
        max_length=16, choices=AuditStatus.choices, default=AuditStatus.PENDING
    )
    note = models.TextField(blank=True)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=AuditStatus.values), name="agentops_audititem_status_valid"
            ),
        ]
        indexes = [
            # The queue's two lists, each newest first (scanned backwards): the items to review
            # (this index, which also counts them for the navigation), then the reviewed ones.
            models.Index(fields=["status", "created_at"], name="agentops_audititem_status_idx"),
            models.Index(
                fields=["created_at", "id"],
                condition=~Q(status=AuditStatus.PENDING),
                name="agentops_audit_reviewed_idx",
            ),
            # The filter menus: a loose index scan lists the distinct triples.
            models.Index(fields=["agent", "tool", "rule"], name="agentops_audit_choices_idx"),
        ]

    def __str__(self) -> str:
        return f"Audit {self.pk}: {self.tool} ({self.status})"


class SweepLease(models.Model):
    """Who sweeps now: one row (id 1), claimed by a sweeper for one sweep
    (`agentops.engine.sweeper`).

    A lease in a row, not a PostgreSQL advisory lock: a session's lock stays on whichever server
    connection took it, which a pooler in transaction mode hands to other clients, so its unlock
    would land elsewhere and the lock leak. A sweeper that dies while it sweeps holds the lease
    until it runs out."""

    holder = models.CharField(max_length=200, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"sweep lease of {self.holder or 'nobody'} until {self.expires_at}"


class StoredFile(models.Model):
    """An artifact's bytes, when artifacts are kept in PostgreSQL
    (`AGENTOPS_ARTIFACT_STORAGE=postgres`, `agentops.storage.DatabaseStorage`): every host that
    reaches the database reads them, and they are backed up and restored with the record."""

    name = models.CharField(max_length=300, unique=True)
    content = models.BinaryField()
    size = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.size} bytes)"


class ArchivedTask(models.Model):
    """A task that retention archived and then removed from the database: where it went. A
    request for it is answered 410 with this, not 404 as for a task that never was."""

    task_id = models.BigIntegerField(primary_key=True)
    # Who started it (no foreign key: the user may go too), for the same visibility as the task.
    created_by_id = models.BigIntegerField(null=True)
    archive = models.CharField(max_length=1000)
    archived_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"task {self.task_id}, archived to {self.archive}"


__all__ = [
    "ApiToken",
    "ArchivedTask",
    "Artifact",
    "AuditItem",
    "Event",
    "FleetStop",
    "Gate",
    "ProviderIdentity",
    "ScopeGrant",
    "Snapshot",
    "Step",
    "StopScope",
    "StoredFile",
    "SweepLease",
    "Task",
    "ToolCall",
]
