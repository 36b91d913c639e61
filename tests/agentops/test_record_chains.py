"""The record's hash chains: tampering is detected and named, and a restore refuses it.

Every rewrite here is made as a superuser would to get past the record's guards: with the
triggers off (`session_replication_role = replica`), at a psql prompt. Each one is then found by
`manage.py checkpoint verify` (or `chains`) at the first row where it shows, and `checkpoint
restore` refuses to spread it. A rewrite that also recomputes every digest after it (the chain
whole again) is found against the heads kept before (`checkpoint heads`).

The task is the trip agent run in-process against the simulated services (a hotel refusing once
stops it with the flight booked), as tests/agentops/test_restore_from_log.py runs it.
"""

from __future__ import annotations

import json
import threading
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.db import connection, connections

from agentops.models import Event, Snapshot, Step, Task, ToolCall
from agentops.states import LedgerStatus
from reviews.models import Decision
from reviews.states import Role
from tests.agentops.test_restore_from_log import FLIGHT_STEP, checkpoint, stopped_trip, tamper

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(django_user_model):
    user = django_user_model.objects.create_user(username="olga", password="x")
    user.groups.add(Group.objects.get_or_create(name=Role.OPERATORS)[0])
    return user


def as_superuser(sql: str, params: list | None = None) -> None:
    """`sql` with the triggers off, in the test's transaction."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(sql, params or [])
        cursor.execute("SET LOCAL session_replication_role = DEFAULT")


def breaks(report: dict) -> list[tuple[str, int | None, str]]:
    return [(b["chain"], b["place"], b["why"]) for b in report["chain_breaks"]]


def test_an_untouched_record_verifies_and_every_final_ledger_row_is_chained(sim, redis_clean):
    task = stopped_trip()

    report, error = checkpoint("verify", str(task.pk))

    assert error is None and report["differences"] == [] and report["chain_breaks"] == []
    events = list(Event.objects.filter(task=task).order_by("seq"))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert len({e.digest for e in events}) == len(events) and all(
        len(e.digest) == 64 for e in events
    )
    assert all(s.digest for s in Snapshot.objects.filter(task=task))
    final = ToolCall.objects.filter(task=task).exclude(status=LedgerStatus.PENDING).order_by("id")
    assert [c.chain_seq for c in final] == list(range(1, final.count() + 1))
    assert final.count() >= 2  # the flight, and the hotel's refused try
    # The snapshot names each output it covers.
    latest = Snapshot.objects.filter(task=task).order_by("-seq").first()
    assert str(FLIGHT_STEP) in latest.state["output_digests"]


def test_a_changed_output_is_named_and_not_restored(sim, redis_clean, operator):
    task = stopped_trip()
    as_superuser(
        "UPDATE agentops_step SET output = '{\"forged\": true}' "
        "WHERE task_id = %s AND ordinal = %s",
        [task.pk, FLIGHT_STEP],
    )

    report, error = checkpoint("verify", str(task.pk))

    assert error is not None
    assert [d["field"] for d in report["differences"]] == [f"outputs.{FLIGHT_STEP}"]
    tamper(task)  # and statuses a restore would rewrite
    report, error = checkpoint("restore", str(task.pk), "--by", "olga", "--reason", "fix")
    assert error is not None and f"step {FLIGHT_STEP}'s output is not the one" in str(error)
    assert Step.objects.get(task=task, ordinal=FLIGHT_STEP).status == "pending"  # not restored
    assert not Decision.objects.filter(action="reviews.task.restored").exists()


def test_a_changed_event_is_named_at_the_first_row_it_shows(sim, redis_clean, operator):
    task = stopped_trip()
    event = Event.objects.filter(task=task).order_by("seq")[3]
    as_superuser(
        "UPDATE agentops_event SET payload = payload || '{\"forged\": true}' WHERE id = %s",
        [event.pk],
    )

    report, error = checkpoint("verify", str(task.pk))

    assert error is not None
    assert [(chain, place) for chain, place, _ in breaks(report)] == [("events", event.seq)]
    tamper(task)
    _, error = checkpoint("restore", str(task.pk), "--by", "olga", "--reason", "fix")
    assert error is not None and f"event #{event.seq}" in str(error)
    assert Step.objects.get(task=task, ordinal=FLIGHT_STEP).status == "pending"


def test_a_deleted_event_is_named_as_missing(sim, redis_clean):
    task = stopped_trip()
    gone = Event.objects.filter(task=task).order_by("seq")[2]
    as_superuser("DELETE FROM agentops_event WHERE id = %s", [gone.pk])

    report, error = checkpoint("verify", str(task.pk))

    assert error is not None
    assert breaks(report) == [
        ("events", gone.seq + 1, f"event #{gone.seq} missing before #{gone.seq + 1}")
    ]


def test_a_changed_snapshot_and_a_changed_ledger_result_are_named(sim, redis_clean):
    task = stopped_trip()
    snapshot = Snapshot.objects.filter(task=task).order_by("seq").first()
    flight = ToolCall.objects.get(task=task, tool="book_flight")
    as_superuser(
        'UPDATE agentops_snapshot SET state = state || \'{"status": "succeeded"}\' WHERE id = %s',
        [snapshot.pk],
    )
    as_superuser(
        "UPDATE agentops_toolcall SET result = '{\"forged\": true}' WHERE id = %s", [flight.pk]
    )

    report, _ = checkpoint("verify", str(task.pk))

    assert [(chain, place) for chain, place, _ in breaks(report)] == [
        ("snapshots", snapshot.seq),
        ("ledger", flight.chain_seq),
    ]


def test_a_changed_decision_breaks_the_logs_chain(sim, redis_clean, operator):
    decisions = [
        Decision.objects.create(action="test.decided", actor_label="olga", subject=f"#{n}")
        for n in range(4)
    ]
    decisions = list(Decision.objects.filter(pk__in=[d.pk for d in decisions]).order_by("id"))
    places = [d.chain_seq for d in decisions]
    assert places == list(range(places[0], places[0] + 4))
    out = StringIO()
    call_command("checkpoint", "chains", stdout=out)
    assert out.getvalue().strip() == "every chain holds"

    as_superuser(
        "UPDATE reviews_decision SET reason = 'approved after all' WHERE id = %s", [decisions[1].pk]
    )

    out = StringIO()
    with pytest.raises(CommandError, match="1 chain breaks"):
        call_command("checkpoint", "chains", "--json", stdout=out)
    assert [(b["chain"], b["place"]) for b in json.loads(out.getvalue())["chain_breaks"]] == [
        ("decisions", decisions[1].chain_seq)
    ]


def test_a_rewrite_that_recomputes_the_chain_is_found_against_the_kept_heads(
    sim, redis_clean, tmp_path: Path
):
    task = stopped_trip()
    heads = tmp_path / "heads.json"
    out = StringIO()
    call_command("checkpoint", "heads", stdout=out)
    heads.write_text(out.getvalue())
    kept = json.loads(out.getvalue())
    assert kept["tasks"][str(task.pk)]["events"][0] == task.last_seq

    # Rewrite an event, then every digest from it on, as the triggers would have.
    forged = Event.objects.filter(task=task).order_by("seq")[3]
    as_superuser(
        "UPDATE agentops_event SET payload = payload || '{\"forged\": true}' WHERE id = %s",
        [forged.pk],
    )
    for event in Event.objects.filter(task=task, seq__gte=forged.seq).order_by("seq"):
        as_superuser(
            "UPDATE agentops_event e SET digest = agentops_chain_digest((SELECT digest FROM "
            "agentops_event WHERE task_id = e.task_id AND seq = e.seq - 1), "
            "agentops_event_content(e)) WHERE id = %s",
            [event.pk],
        )

    report, error = checkpoint("verify", str(task.pk))
    assert error is None and report["chain_breaks"] == []  # whole again, on its own

    report, error = checkpoint("verify", str(task.pk), "--heads", str(heads))
    assert error is not None
    assert [(chain, place) for chain, place, _ in breaks(report)] == [("events", task.last_seq)]
    out = StringIO()
    with pytest.raises(CommandError, match="1 chain breaks"):
        call_command("checkpoint", "chains", "--heads", str(heads), stdout=out)
    assert f"task {task.pk}'s events: event #{task.last_seq} no longer has the kept digest" in (
        out.getvalue()
    )


@pytest.mark.django_db(transaction=True)
def test_decisions_logged_at_once_from_many_sessions_make_one_chain():
    def decide(n: int) -> None:
        try:
            for i in range(10):
                Decision.objects.create(action="test.decided", actor_label=f"p{n}", subject=str(i))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=decide, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    places = sorted(Decision.objects.values_list("chain_seq", flat=True))
    assert places == list(range(1, 61))
    out = StringIO()
    call_command("checkpoint", "chains", stdout=out)
    assert out.getvalue().strip() == "every chain holds"


def test_checkpoint_heads_lists_every_task(sim, redis_clean):
    task = stopped_trip()
    out = StringIO()
    call_command("checkpoint", "heads", stdout=out)
    kept = json.loads(out.getvalue())
    assert set(kept["tasks"]) == {str(pk) for pk in Task.objects.values_list("pk", flat=True)}
    assert set(kept["tasks"][str(task.pk)]) == {"events", "snapshots", "ledger"}


@pytest.mark.parametrize("kept", ['{"bad": 1}', "[]", '{"tasks": []}', "not json"])
def test_heads_that_are_not_the_output_of_checkpoint_heads_are_refused(tmp_path: Path, kept):
    heads = tmp_path / "heads.json"
    heads.write_text(kept)

    with pytest.raises(CommandError, match="--heads"):
        call_command("checkpoint", "chains", "--heads", str(heads), stdout=StringIO())
