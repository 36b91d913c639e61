"""`manage.py bench pages`: server time of the operator pages over a database of N tasks.

The benchmark creates a scratch database beside the configured one (`<name>_pages`, dropped at
the end), migrates it, and seeds N tasks with a realistic mix in a few set-based statements
(`INSERT … SELECT … generate_series`, triggers off for the seeding session only; the one place
outside the transition code that writes statuses, into its own scratch database, with the values
taken from the status enums): mostly
succeeded tasks of 5 to 30 steps, some running, queued, scheduled for a retry or paused, a few
hundred awaiting approval with an open gate, as many stopped in needs_attention (half of them
with an unconfirmed tool call), aborted and rolled-back ones; one ledger row per started step
(a few with a failed attempt before), about 24 events per task, audit items for the audited steps
(the newest 5% still to review), approved gates with their decisions, claims on half of what
waits. It then VACUUM ANALYZEs, as autovacuum would have.

Each page is requested through Django's test client (the whole middleware stack, DEBUG off) as
the role that reads it: the inbox (and its 5-second poll) as an operator, the audit queue as an
auditor, a task page, a gate panel and the task list as an operator. After a few unmeasured
warm-up requests, every request is timed; the report gives p50 and p95 in milliseconds (of the
whole request through the client, and of the server's part: inside the WSGI handler, as gunicorn
calls it, without the client building the request and reading the response), the
queries each request ran (the same for every repeat, or the report says so) and the response
bytes; then each polled page's unchanged poll (`agentops.dev.benchmarks.polls`). Performance
belongs here, printed as figures; the tests check that it runs and counts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from math import gcd
from typing import Any

from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.db.models import Count
from django.test import Client
from django.test.utils import override_settings
from django.urls import reverse

from agentops.dev.benchmarks.polls import server_times, unchanged_polls, unchanged_polls_lines
from agentops.dev.benchmarks.tasks import (
    database_drop,
    database_recreate,
    raw_postgres,
    scratch_database_name,
)
from agentops.dev.benchmarks.timing import measure_page
from agentops.models import AuditItem, Event, Gate, Step, Task, ToolCall
from agentops.states import (
    TERMINAL,
    AuditStatus,
    GateStatus,
    LedgerStatus,
    Phase,
    StepStatus,
    TaskStatus,
)

PASSWORD = "bench-pages"  # users of a scratch database, dropped at the end

# The mix, in parts per 10,000 tasks (at least one task each), taken in this order from a
# permutation of the ids, so every status is spread over the whole id range and the counts are
# exact (`mix_counts`); the rest succeeded.
MIX: tuple[tuple[str, int], ...] = (
    (TaskStatus.AWAITING_APPROVAL, 40),
    (TaskStatus.NEEDS_ATTENTION, 40),
    (TaskStatus.RUNNING, 200),
    (TaskStatus.QUEUED, 100),
    (TaskStatus.RETRY_SCHEDULED, 50),
    (TaskStatus.PAUSED, 20),
    (TaskStatus.ABORTED, 200),
    (TaskStatus.ROLLED_BACK, 100),
)


@dataclass(frozen=True)
class CurrentStep:
    """What a task in a given status holds at its current step (`cur`): the one place the seed
    ties the task's phase, its steps', ledger rows' and gates' statuses to the task's status
    (the seed's statements read these columns of the plan, never a task status)."""

    status: str = StepStatus.PENDING
    phase: str = ""
    complete: bool = False  # every step is done (`cur` is past the last one)
    stopped: bool = False  # its tool call failed: a failed step with an error and a ledger row
    gated: bool = False  # waiting at a gate: the step is routed to it
    undone: bool = False  # a rollback compensated its financial calls


CURRENT_STEP: dict[str, CurrentStep] = {
    TaskStatus.SUCCEEDED: CurrentStep(phase=Phase.STEP_COMPLETE, complete=True),
    TaskStatus.NEEDS_ATTENTION: CurrentStep(
        StepStatus.FAILED, phase=Phase.AFTER_TOOL_CALL, stopped=True
    ),
    TaskStatus.AWAITING_APPROVAL: CurrentStep(
        StepStatus.RUNNING, phase=Phase.MODEL_RESULT, gated=True
    ),
    TaskStatus.RUNNING: CurrentStep(StepStatus.RUNNING, phase=Phase.BEFORE_MODEL_CALL),
    TaskStatus.ROLLED_BACK: CurrentStep(undone=True),
}


def _current_step_rows() -> str:
    """`VALUES` rows of every task status, its `CurrentStep` and whether it is terminal, for
    the plan to join."""
    return ", ".join(
        f"('{status}', '{shape.status}', '{shape.phase}', {shape.complete}, {shape.stopped}, "
        f"{shape.gated}, {shape.undone}, {status in TERMINAL})"
        for status in TaskStatus.values
        for shape in [CURRENT_STEP.get(status, CurrentStep())]
    )


TOOLS = (
    ("lookup_order", "read"),
    ("check_eligibility", "read"),
    ("track_shipment", "read"),
    ("issue_refund", "financial"),
    ("email_customer", "notify"),
)
# Tasks are spread over this many days before now.
SPAN_DAYS = 30


def _table(model_name: str) -> str:
    """The table of the model called `model_name`, whichever app owns it."""
    for model in apps.get_models():
        if model.__name__ == model_name:
            return str(model._meta.db_table)
    raise LookupError(model_name)


@contextmanager
def scratch_database(*, keep: bool = False) -> Iterator[str]:
    """Point the default connection at a new, migrated `<name>_pages` database; drop it after
    (with `keep`, leave it for a look at the plans; the next run drops it first).

    The same move the test runner makes for its test database: the connection's NAME changes
    for the duration, and the content-type cache (ids differ between databases) is cleared on
    the way in and out."""
    conf = connection.settings_dict
    original = conf["NAME"]
    scratch = scratch_database_name("pages")
    connection.close()
    database_recreate(scratch)
    conf["NAME"] = scratch
    ContentType.objects.clear_cache()
    try:
        call_command("migrate", verbosity=0, interactive=False)
        yield scratch
    finally:
        connection.close()
        conf["NAME"] = original
        ContentType.objects.clear_cache()
        if not keep:
            database_drop(scratch)


def _permutation_step(n: int) -> int:
    """A multiplier coprime with n: i * step mod n visits every residue once."""
    step = 7919
    while gcd(step, n) != 1:
        step += 2
    return step


def mix_counts(tasks: int) -> dict[str, int]:
    """How many of `tasks` tasks the mix puts in each status: at least one of each."""
    counts = {status: max(1, round(tasks * parts / 10_000)) for status, parts in MIX}
    counts[TaskStatus.SUCCEEDED] = tasks - sum(counts.values())
    if counts[TaskStatus.SUCCEEDED] < 1:
        raise ValueError(f"{tasks} tasks are too few for the mix (at least {len(MIX) + 1})")
    return counts


def _status_case(tasks: int) -> str:
    """SQL CASE mapping the task's place `v` in a permutation of 0..tasks-1 to its status."""
    whens, upto = [], 0
    for status, count in mix_counts(tasks).items():
        if status == TaskStatus.SUCCEEDED:
            continue
        upto += count
        whens.append(f"WHEN v < {upto} THEN '{status}'")
    return f"CASE {' '.join(whens)} ELSE '{TaskStatus.SUCCEEDED}' END"


def _seed_sql(tables: dict[str, str], tasks: int) -> list[str]:
    """The seeding statements, in order; parameters %(n)s, %(step)s, %(span)s, %(starter)s,
    %(operator)s. Step ids are task * 32 + ordinal and a step's ledger row is step * 2 (its
    failed attempt, when it has one, step * 2 + 1), so no statement reads ids back."""
    t = tables
    tools = ", ".join(f"({k}, '{name}', '{effect}')" for k, (name, effect) in enumerate(TOOLS))
    return [
        # The plan of every task: status, steps, progress, events, times.
        f"""
        CREATE TEMP TABLE bench_plan AS
        SELECT i AS id, status, steps,
               CASE WHEN shape.complete THEN steps ELSE steps / 2 END AS cur,
               created, i > %(n)s * 0.95 AS recent,
               shape.step_status AS cur_status, shape.phase, shape.complete, shape.stopped,
               shape.gated, shape.undone, shape.terminal
        FROM (
            SELECT i, {_status_case(tasks)} AS status, 5 + (i * 7) %% 26 AS steps,
                   now() - make_interval(secs => (%(n)s - i)::bigint * %(span)s / %(n)s + 60)
                       AS created
            FROM generate_series(1, %(n)s) AS i,
                 LATERAL (SELECT (i::bigint * %(step)s) %% %(n)s AS v) AS p
        ) AS plan
        JOIN (VALUES {_current_step_rows()})
            AS shape(status, step_status, phase, complete, stopped, gated, undone, terminal)
            USING (status)
        """,
        "ALTER TABLE bench_plan ADD COLUMN events int",
        "UPDATE bench_plan SET events = 3 + cur + cur / 5",
        "CREATE TEMP TABLE bench_tool (k int, tool text, side_effect text)",
        f"INSERT INTO bench_tool VALUES {tools}",
        f"""
        INSERT INTO {t["Task"]} (id, agent, goal, input, status, phase, mode, current_step,
            step_count, lease_epoch, lease_owner, last_seq, claims, recoveries, recovery_cap,
            step_retry_cap, tokens_used, cost_used, tokens_saved, failure, created_at,
            updated_at, status_changed_at, started_at, finished_at, created_by_id)
        SELECT id, 'refund', 'Refund order A' || id || ': parcel arrived damaged, customer '
                || 'asks for the money back', jsonb_build_object('order_id', 'A' || id),
            status, phase, 'forward', cur, steps, 1, '', events, 1, 0, 5, 3, cur * 900,
            cur * 0.002, 0,
            CASE WHEN stopped THEN jsonb_build_object(
                'kind', 'tool_timeout', 'layer', 'tool',
                'message', 'issue_refund timed out after 30 s', 'step', cur) END,
            created, created + make_interval(secs => cur * 20),
            created + make_interval(secs => cur * 20), created,
            CASE WHEN terminal THEN created + make_interval(secs => cur * 20) END,
            %(starter)s
        FROM bench_plan
        """,
        # Steps: done before `cur`; the current one running, failed or waiting; then pending.
        f"""
        INSERT INTO {t["Step"]} (id, task_id, ordinal, title, spec, depends_on, status,
            attempts, prompt_digest, model_response, output, error, route, policy_version_number,
            policy_rule, started_at, finished_at)
        SELECT p.id * 32 + o, p.id, o, initcap(replace(bt.tool, '_', ' ')), '{{}}', '[]',
            CASE WHEN o < p.cur THEN '{StepStatus.SUCCEEDED}'
                 WHEN o > p.cur THEN '{StepStatus.PENDING}'
                 ELSE p.cur_status END,
            CASE WHEN o <= p.cur THEN 1 ELSE 0 END,
            CASE WHEN o <= p.cur THEN md5(p.id || ':' || o) ELSE '' END,
            CASE WHEN o <= p.cur THEN jsonb_build_object(
                'text', 'Calling ' || bt.tool || ' for order A' || p.id,
                'tool_calls', jsonb_build_array(jsonb_build_object('name', bt.tool,
                    'arguments', jsonb_build_object('order_id', 'A' || p.id))),
                'confidence', 0.92, 'usage', jsonb_build_object('prompt_tokens', 700,
                    'completion_tokens', 200)) END,
            CASE WHEN o < p.cur THEN jsonb_build_object('ok', true,
                'summary', bt.tool || ' done for order A' || p.id) END,
            CASE WHEN o = p.cur AND p.stopped
                THEN jsonb_build_object('kind', 'tool_timeout', 'message', 'timed out after 30 s')
                END,
            CASE WHEN o > p.cur THEN ''
                 WHEN o = p.cur AND p.gated THEN 'gate'
                 WHEN bt.tool = 'issue_refund' AND p.id %% 2 = 0 THEN 'audit'
                 ELSE 'auto' END,
            CASE WHEN o <= p.cur THEN 1 END,
            CASE WHEN o <= p.cur THEN 'default' ELSE '' END,
            CASE WHEN o <= p.cur THEN p.created + make_interval(secs => o * 20) END,
            CASE WHEN o < p.cur THEN p.created + make_interval(secs => o * 20 + 15) END
        FROM bench_plan AS p CROSS JOIN LATERAL generate_series(0, p.steps - 1) AS o
        JOIN bench_tool AS bt ON bt.k = o %% 5
        """,
        # One ledger row per step that reached its tool call; a stopped task's is unconfirmed
        # for half of them; about 1% of steps have a failed attempt with the same key before it.
        f"""
        INSERT INTO {t["ToolCall"]} (id, task_id, step_id, tool, side_effect, args,
            args_digest, idempotency_key, status, result, error, created_at, updated_at)
        SELECT (p.id * 32 + o) * 2 + attempt, p.id, p.id * 32 + o, bt.tool, bt.side_effect,
            jsonb_build_object('order_id', 'A' || p.id), md5('args' || p.id || ':' || o),
            p.id || ':' || o || ':' || bt.tool,
            CASE WHEN attempt = 1 THEN '{LedgerStatus.FAILED}'
                 WHEN o = p.cur AND p.id %% 2 = 0 THEN '{LedgerStatus.EXECUTED_UNKNOWN}'
                 WHEN o = p.cur THEN '{LedgerStatus.FAILED}'
                 WHEN p.undone AND bt.side_effect = 'financial'
                     THEN '{LedgerStatus.COMPENSATED}'
                 ELSE '{LedgerStatus.SUCCEEDED}' END,
            CASE WHEN attempt = 0 AND o < p.cur THEN jsonb_build_object('ok', true) END,
            CASE WHEN attempt = 1 OR o = p.cur THEN jsonb_build_object('kind', 'tool_timeout') END,
            p.created + make_interval(secs => o * 20 + 5 - attempt),
            p.created + make_interval(secs => o * 20 + 10 - attempt)
        FROM bench_plan AS p CROSS JOIN LATERAL generate_series(0, p.steps - 1) AS o
        JOIN bench_tool AS bt ON bt.k = o %% 5
        CROSS JOIN generate_series(0, 1) AS attempt
        WHERE (o < p.cur OR (o = p.cur AND p.stopped))
          AND (attempt = 0 OR (p.id + o) %% 97 = 0)
        """,
        # About 24 events per task: created, claimed, a start and a completion per step, a
        # snapshot every 5 steps, then the last word.
        f"""
        INSERT INTO {t["Event"]} (task_id, seq, action, step_ordinal, payload, actor_label,
            created_at)
        SELECT p.id, s,
            CASE WHEN s = 1 THEN 'agentops.task.created'
                 WHEN s = 2 THEN 'agentops.task.claimed'
                 WHEN s = p.events THEN 'agentops.task.' || p.status
                 WHEN s %% 6 = 0 THEN 'agentops.snapshot.written'
                 ELSE 'agentops.step.completed' END,
            CASE WHEN s > 2 AND s < p.events THEN least((s - 3) * p.steps / p.events,
                p.steps - 1) END,
            jsonb_build_object('phase', 'step_complete', 'tokens', 900,
                'note', 'order A' || p.id || ' step event ' || s),
            CASE WHEN s = 1 THEN 'bench_starter' ELSE 'worker' END,
            p.created + make_interval(secs => s * 10)
        FROM bench_plan AS p CROSS JOIN LATERAL generate_series(1, p.events) AS s
        """,
        # Audit items for the audited steps' calls; the newest 5% still to review.
        f"""
        INSERT INTO {t["AuditItem"]} (task_id, step_id, tool_call_id, agent, tool, route,
            sampled, rule, policy_version_number, status, note, reviewed_at, reviewed_by_id,
            created_at)
        SELECT c.task_id, c.step_id, c.id, 'refund', c.tool, 'audit', false,
            'refunds_audited', 1,
            CASE WHEN p.recent THEN '{AuditStatus.PENDING}' WHEN c.id %% 50 = 0
                THEN '{AuditStatus.FLAGGED}' ELSE '{AuditStatus.OK}' END,
            CASE WHEN c.id %% 50 = 0 AND NOT p.recent THEN 'amount looks high' ELSE '' END,
            CASE WHEN p.recent THEN NULL ELSE c.updated_at + interval '1 day' END,
            CASE WHEN p.recent THEN NULL ELSE %(auditor)s END,
            c.updated_at
        FROM {t["ToolCall"]} AS c JOIN {t["Step"]} AS st ON st.id = c.step_id
        JOIN bench_plan AS p ON p.id = c.task_id
        WHERE st.route = 'audit' AND c.id %% 2 = 0
        """,
        # Open gates, one per task awaiting approval, on its current step.
        f"""
        INSERT INTO {t["Gate"]} (task_id, step_id, status, tool, side_effect, arguments,
            args_digest, edited, amount, confidence, policy_version_number, rule, reasons,
            approver_group, timeout_action, escalate_to, due_at, created_at, feedback,
            approved_digest, stopped_with)
        SELECT p.id, p.id * 32 + p.cur, '{GateStatus.OPEN}', 'issue_refund', 'financial',
            jsonb_build_object('order_id', 'A' || p.id, 'amount', 100 + p.id %% 400,
                'currency', 'EUR'),
            md5('gate' || p.id), false, 100 + p.id %% 400, 0.8, 1, 'refunds_over_100',
            '["amount over 100"]', 'operators', 'reject', '',
            now() + make_interval(secs => (p.id %% 480) * 60 - 3600),
            now() - make_interval(secs => (p.id %% 480) * 60), '', '', ''
        FROM bench_plan AS p WHERE p.gated
        """,
        # Approved gates of every 20th succeeded task, with the decisions that approved them.
        f"""
        INSERT INTO {t["Gate"]} (task_id, step_id, status, tool, side_effect, arguments,
            args_digest, edited, amount, confidence, policy_version_number, rule, reasons,
            approver_group, timeout_action, escalate_to, due_at, created_at, decided_at,
            decided_by_id, feedback, approved_arguments, approved_digest, stopped_with)
        SELECT p.id, p.id * 32 + 3, '{GateStatus.APPROVED}', 'issue_refund', 'financial',
            jsonb_build_object('order_id', 'A' || p.id, 'amount', 150, 'currency', 'EUR'),
            md5('gate' || p.id), false, 150, 0.8, 1, 'refunds_over_100',
            '["amount over 100"]', 'operators', 'reject', '', p.created + interval '4 hours',
            p.created + interval '60 seconds', p.created + interval '90 seconds',
            %(operator)s, '',
            jsonb_build_object('order_id', 'A' || p.id, 'amount', 150, 'currency', 'EUR'),
            md5('gate' || p.id), ''
        FROM bench_plan AS p WHERE p.complete AND p.id %% 20 = 0
        """,
        f"""
        INSERT INTO {t["Decision"]} (action, actor_id, actor_label, task_id_ref, subject,
            before_digest, after_digest, reason, policy_version_number, detail, created_at,
            channel)
        SELECT 'reviews.gate.approved', %(operator)s, 'bench_operator', g.task_id,
            'gate ' || g.id, g.args_digest, g.approved_digest, '', 1, '{{}}', g.decided_at,
            %(browser)s
        FROM {t["Gate"]} AS g WHERE g.status = %(approved)s
        """,
        # Half of what waits is held by the operator.
        f"""
        INSERT INTO {t["Claim"]} (task_id, user_id, claimed_at)
        SELECT p.id, %(operator)s, now() - interval '5 minutes'
        FROM bench_plan AS p
        WHERE (p.gated OR p.stopped) AND p.id %% 2 = 1
        """,
    ]


def _reset_sequences(tables: list[str]) -> list[str]:
    return [
        f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
        f"coalesce((SELECT max(id) FROM {table}), 0) + 1, false)"
        for table in tables
    ]


def seed(*, tasks: int) -> dict[str, Any]:
    """Seed `tasks` tasks with the mix into the current (scratch) database; return its counts."""
    user_model = get_user_model()
    users = {}
    for name, group in (
        ("bench_starter", None),
        ("bench_operator", "operators"),
        ("bench_auditor", "auditors"),
    ):
        user = user_model.objects.create_user(username=name, password=PASSWORD)
        if group:
            user.groups.add(Group.objects.get(name=group))
        users[name] = user
    names = ("Task", "Step", "ToolCall", "Event", "AuditItem", "Gate", "Decision", "Claim")
    tables = {name: _table(name) for name in names}
    params: dict[str, int | str] = {
        "n": tasks,
        "step": _permutation_step(tasks),
        "span": SPAN_DAYS * 86400,
        "starter": users["bench_starter"].pk,
        "operator": users["bench_operator"].pk,
        "auditor": users["bench_auditor"].pk,
        "approved": GateStatus.APPROVED.value,
        # The seeded approvals were made on the gate panel: the browser channel's registered
        # name (`reviews.channels.web`; a decision's channel is a registered name, not a choice).
        "browser": "browser",
    }
    began = time.perf_counter()
    with connection.cursor() as cursor:
        # Rows are written whole and consistent by construction: triggers (the ledger's
        # transition check among them) and foreign-key checks stay off for this session only.
        cursor.execute("SET session_replication_role = replica")
        # The configured statement timeout is for requests; a seeding statement writes millions.
        cursor.execute("SET statement_timeout = 0")
        try:
            for statement in _seed_sql(tables, tasks):
                cursor.execute(statement, params)
            for statement in _reset_sequences(list(tables.values())):
                cursor.execute(statement)
        finally:
            cursor.execute("SET session_replication_role = DEFAULT")
            cursor.execute("DROP TABLE IF EXISTS bench_plan, bench_tool")
    seconds = time.perf_counter() - began
    connection.close()
    with raw_postgres() as raw:
        raw.execute("VACUUM ANALYZE")
    counts = _counts()
    counts["seed_seconds"] = round(seconds, 1)
    return counts


def _counts() -> dict[str, Any]:
    by_status = dict(
        sorted(Task.objects.values_list("status").annotate(count=Count("id")).order_by())
    )
    return {
        "tasks": sum(by_status.values()),
        "tasks_by_status": by_status,
        "steps": Step.objects.count(),
        "tool_calls": ToolCall.objects.count(),
        "unconfirmed_calls": ToolCall.objects.filter(status=LedgerStatus.EXECUTED_UNKNOWN).count(),
        "events": Event.objects.count(),
        "open_gates": Gate.objects.filter(status=GateStatus.OPEN).count(),
        "audit_items": AuditItem.objects.count(),
        "audit_pending": AuditItem.objects.filter(status=AuditStatus.PENDING).count(),
    }


def _targets() -> dict[str, int]:
    """The biggest task (most steps, succeeded) and the open gate on the biggest waiting task."""
    task = (
        Task.objects.filter(status=TaskStatus.SUCCEEDED)
        .order_by("-step_count", "-id")
        .values_list("id", flat=True)
        .first()
    )
    gate = (
        Gate.objects.filter(status=GateStatus.OPEN)
        .order_by("-task__step_count", "-id")
        .values_list("id", flat=True)
        .first()
    )
    if task is None or gate is None:
        raise LookupError("the seeded database has no succeeded task or no open gate")
    return {"task": task, "gate": gate}


def pages(*, tasks: int, repeat: int, keep: bool = False) -> dict[str, Any]:
    """Seed a scratch database with `tasks` tasks and time the operator pages against it."""
    with scratch_database(keep=keep) as database:
        counts = seed(tasks=tasks)
        target = _targets()
        hosts = [*settings.ALLOWED_HOSTS, "testserver"]
        with override_settings(DEBUG=False, ALLOWED_HOSTS=hosts, SECURE_SSL_REDIRECT=False):
            clients = {}
            for role, username in (("operator", "bench_operator"), ("auditor", "bench_auditor")):
                client = Client()
                client.force_login(get_user_model().objects.get(username=username))
                clients[role] = client
            plan = [
                ("inbox", reverse("reviews:inbox"), "operator", {}),
                ("inbox_poll", reverse("reviews:inbox"), "operator", {"HX-Request": "true"}),
                ("audit_queue", reverse("reviews:audit"), "auditor", {}),
                (
                    "task_page",
                    reverse("agentops:task_detail", args=[target["task"]]),
                    "operator",
                    {},
                ),
                ("gate_panel", reverse("reviews:gate", args=[target["gate"]]), "operator", {}),
                ("task_list", reverse("agentops:task_list"), "operator", {}),
            ]
            figures = [
                measure_page(
                    clients[role], name=name, url=url, role=role, repeat=repeat, headers=headers
                )
                for name, url, role, headers in plan
            ]
            polls = unchanged_polls(clients["operator"], measure=measure_page, repeat=repeat)
    return {
        "benchmark": "pages",
        "tasks": tasks,
        "repeat": repeat,
        "database": database,
        "seeded": counts,
        "pages": {f.name: asdict(f) for f in figures},
        "unchanged_polls": {f.name: asdict(f) for f in polls},
    }


def pages_table(report: dict[str, Any]) -> str:
    seeded = report["seeded"]
    lines = [
        f"pages bench: {report['tasks']} tasks ({seeded['steps']} steps, {seeded['events']} "
        f"events, {seeded['tool_calls']} ledger rows, {seeded['open_gates']} open gates, "
        f"{seeded['audit_items']} audit items), {report['repeat']} requests per page, "
        f"seeded in {seeded['seed_seconds']} s",
        f"  {'page':<12} {'p50 ms':>8} {'p95 ms':>8} {'cpu ms':>8} {'queries':>8} {'bytes':>9}"
        f" {'server p50/p95 ms':>18}",
    ]
    for name, page in report["pages"].items():
        constant = "" if page["queries_constant"] else " (varies)"
        lines.append(
            f"  {name:<12} {page['p50_ms']:>8} {page['p95_ms']:>8} {page['cpu_p50_ms']:>8}"
            f" {page['queries']:>8} {page['bytes']:>9} {server_times(page):>18}{constant}"
        )
    return "\n".join([*lines, *unchanged_polls_lines(report)])
