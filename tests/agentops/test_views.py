"""The agentops pages at HTTP level: login, the task list, the start form and the live task page.

Tasks are made by the real service and moved by real transitions or by the real runner against
the simulated services (`sim`); nothing assigns a status here.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from agentops.dev.sim.models import Fault, FaultMode
from agentops.engine import task_abort, task_create, task_pause
from agentops.engine.interventions import task_cancel
from agentops.engine.runner import task_advance
from agentops.engine.transitions import EventSpec, task_append_event, task_claim
from agentops.models import Event, Step, Task, ToolCall
from agentops.states import TaskStatus
from tests.builders import signed_in

HOSTILE = '<script>alert(1)</script> hx-get="/x"'
PARKED_OR_DONE = {"succeeded", "stopped", "retry scheduled", "not claimable"}


@pytest.fixture
def user(django_user_model: Any) -> Any:
    """A person who may read every task (operators and auditors hold this permission) and start
    tasks (the task-starter role)."""
    from django.contrib.auth.models import Group, Permission

    olga = django_user_model.objects.create_user(username="olga", password="pw-for-tests")
    olga.user_permissions.add(
        Permission.objects.get(content_type__app_label="agentops", codename="view_task")
    )
    olga.groups.add(Group.objects.get_or_create(name="task starters")[0])
    return olga


@pytest.fixture
def operator_client(client: Any, user: Any) -> Any:
    return signed_in(client, user)


def make_task(*, goal: str = "Refund order A1001", **input_overrides: Any) -> Task:
    return task_create(agent="refund", goal=goal, input={"order_id": "A1001", **input_overrides})


def run_until_parked(task: Task) -> Task:
    """Advance the task in-process with the real runner until it ends or parks."""
    for _ in range(20):
        if task_advance(task_id=task.pk, owner="test") in PARKED_OR_DONE:
            break
    return Task.objects.get(pk=task.pk)


# -- login ------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "args"),
    [("agentops:task_list", []), ("agentops:task_new", []), ("agentops:task_detail", [1])],
)
def test_pages_redirect_anonymous_users_to_login(client: Any, name: str, args: list) -> None:
    url = reverse(name, args=args)

    response = client.get(url)

    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next={url}"


@pytest.mark.django_db
def test_login_page_renders_labelled_fields(client: Any) -> None:
    response = client.get(reverse("login"))

    html = response.content.decode()
    assert response.status_code == 200
    assert '<label for="id_username">' in html
    assert '<label for="id_password">' in html


@pytest.mark.django_db
def test_base_layout_has_csrf_header_user_name_and_logout_post_form(
    operator_client: Any,
) -> None:
    response = operator_client.get(reverse("agentops:task_list"))

    html = response.content.decode()
    token = re.search(r"hx-headers='\{\"X-CSRFToken\": \"([^\"]+)\"\}'", html)
    assert token and len(token.group(1)) >= 32
    assert "olga" in html
    assert f'<form method="post" action="{reverse("logout")}"' in html
    assert "static/vendor/htmx-2.0.11.min.js" in html
    assert html.count("<script") == 1


@pytest.mark.django_db
def test_logout_is_a_post_that_ends_the_session(operator_client: Any) -> None:
    response = operator_client.post(reverse("logout"))

    assert response.status_code == 302
    assert operator_client.get(reverse("agentops:task_list")).status_code == 302


# -- task list --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_task_list_shows_newest_first_with_progress(operator_client: Any) -> None:
    older = make_task(goal="Refund the older order")
    newer = make_task(goal="Refund the newer order")

    response = operator_client.get(reverse("agentops:task_list"))

    html = response.content.decode()
    assert response.status_code == 200
    assert html.index(f"#{newer.pk}<") < html.index(f"#{older.pk}<")
    assert html.count("step 1 of 5") == 2
    assert html.count("badge-queued") == 2
    assert reverse("agentops:task_new") in html


@pytest.mark.django_db
def test_task_list_filters_by_status(operator_client: Any, user: Any) -> None:
    kept = make_task(goal="Refund, still queued")
    aborted = make_task(goal="Refund, aborted by a person")
    task_abort(task_id=aborted.pk, actor=user, reason="duplicate")

    only_aborted = operator_client.get(reverse("agentops:task_list"), {"status": "aborted"})
    only_queued = operator_client.get(reverse("agentops:task_list"), {"status": "queued"})

    assert "Refund, aborted by a person" in only_aborted.content.decode()
    assert "Refund, still queued" not in only_aborted.content.decode()
    assert "Refund, still queued" in only_queued.content.decode()
    assert "Refund, aborted by a person" not in only_queued.content.decode()
    assert f'href="/tasks/{kept.pk}"' in only_queued.content.decode()


@pytest.mark.django_db
def test_task_list_says_cancelled_as_the_task_page_does_and_filters_on_it(
    operator_client: Any, user: Any
) -> None:
    cancelled = make_task(goal="Refund, cancelled by a person")
    task_cancel(task_id=cancelled.pk, actor=user, reason="the customer withdrew")
    aborted = make_task(goal="Refund, aborted by a person")
    task_abort(task_id=aborted.pk, actor=user, reason="duplicate")
    url = reverse("agentops:task_list")

    everything = operator_client.get(url).content.decode()
    page = operator_client.get(reverse("agentops:task_detail", args=[cancelled.pk]))
    only_cancelled = operator_client.get(url, {"status": "cancelled"}).content.decode()
    only_aborted = operator_client.get(url, {"status": "aborted"}).content.decode()

    assert '<span class="badge badge-aborted">Cancelled</span>' in page.content.decode()
    assert everything.count('<span class="badge badge-aborted">Cancelled</span>') == 1
    assert everything.count('<span class="badge badge-aborted">Aborted</span>') == 1
    assert '<option value="cancelled" selected>Cancelled</option>' in only_cancelled
    assert "Refund, cancelled by a person" in only_cancelled
    assert "Refund, aborted by a person" not in only_cancelled
    assert "Refund, aborted by a person" in only_aborted
    assert "Refund, cancelled by a person" not in only_aborted


@pytest.mark.django_db
def test_task_list_ignores_an_unknown_status_and_shows_all(operator_client: Any) -> None:
    make_task(goal="First refund")
    make_task(goal="Second refund")

    response = operator_client.get(reverse("agentops:task_list"), {"status": "bogus"})

    html = response.content.decode()
    assert response.status_code == 200
    assert "First refund" in html and "Second refund" in html
    assert "Select a valid choice" in html


@pytest.mark.django_db
def test_task_list_paginates_by_fifty(operator_client: Any) -> None:
    tasks = [make_task(goal=f"Refund number {i}") for i in range(51)]

    first = operator_client.get(reverse("agentops:task_list")).content.decode()
    second = operator_client.get(reverse("agentops:task_list"), {"page": 2}).content.decode()

    detail_link = re.compile(r'href="/tasks/\d+"')
    assert len(detail_link.findall(first)) == 50
    assert len(detail_link.findall(second)) == 1
    assert f'href="/tasks/{tasks[0].pk}"' in second
    # No count of every task: the page knows only whether another one follows.
    assert "<span>Page 1</span>" in first and 'rel="next"' in first
    assert "<span>Page 2</span>" in second and 'rel="next"' not in second
    assert 'rel="prev"' in second


@pytest.mark.django_db
def test_task_list_costs_the_same_queries_with_more_tasks(operator_client: Any) -> None:
    make_task()
    operator_client.get(reverse("agentops:task_list"))  # the session and the roles, cached
    with CaptureQueriesContext(connection) as few:
        operator_client.get(reverse("agentops:task_list"))
    for i in range(60):
        make_task(goal=f"Refund number {i}")
    with CaptureQueriesContext(connection) as many:
        operator_client.get(reverse("agentops:task_list"))

    assert len(many) == len(few)


@pytest.mark.django_db
def test_task_list_htmx_request_gets_only_the_table(operator_client: Any) -> None:
    make_task()

    response = operator_client.get(
        reverse("agentops:task_list"), {"status": "queued"}, HTTP_HX_REQUEST="true"
    )

    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<section id="task-table"')
    assert "<html" not in html
    assert "HX-Request" in response["Vary"]


# -- start form -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_start_form_offers_registered_agents_but_not_hidden_ones(operator_client: Any) -> None:
    response = operator_client.get(reverse("agentops:task_new"))

    html = response.content.decode()
    assert response.status_code == 200
    assert '<option value="refund">' in html
    assert "bench_noop" not in html
    for field in ("agent", "goal", "input"):
        assert f'<label for="id_{field}">' in html


@pytest.mark.django_db
def test_start_form_creates_the_task_with_its_plan_and_redirects(
    operator_client: Any, user: Any
) -> None:
    response = operator_client.post(
        reverse("agentops:task_new"),
        {"agent": "refund", "goal": "Refund order A1001", "input": '{"order_id": "A1001"}'},
    )

    task = Task.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("agentops:task_detail", args=[task.pk])
    assert task.agent == "refund"
    assert task.input == {"order_id": "A1001"}
    assert task.created_by == user
    assert task.status == TaskStatus.QUEUED
    assert list(Step.objects.filter(task=task).values_list("ordinal", flat=True)) == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert Event.objects.filter(task=task, action="agentops.task.created").count() == 1


@pytest.mark.django_db
def test_start_form_over_htmx_answers_with_a_client_redirect(operator_client: Any) -> None:
    response = operator_client.post(
        reverse("agentops:task_new"),
        {"agent": "refund", "goal": "Refund order A1001", "input": ""},
        HTTP_HX_REQUEST="true",
    )

    task = Task.objects.get()
    assert response.status_code == 200
    assert response["HX-Redirect"] == reverse("agentops:task_detail", args=[task.pk])
    assert task.input == {}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ('{"order_id": "A1001",', "The input is not valid JSON"),
        ('["A1001"]', "The input must be a JSON object"),
        ('"A1001"', "got a string"),
        ('{"amount": NaN}', "input.amount: float is not JSON-serializable"),
    ],
)
def test_start_form_rejects_bad_input_and_keeps_what_was_typed(
    operator_client: Any, typed: str, message: str
) -> None:
    response = operator_client.post(
        reverse("agentops:task_new"),
        {"agent": "refund", "goal": "Refund <b>now</b>", "input": typed},
    )

    html = response.content.decode()
    assert response.status_code == 200
    assert message in html
    assert "The task was not started" in html
    textarea = re.search(r'<textarea name="input"[^>]*>(.*?)</textarea>', html, re.S)
    assert textarea is not None
    assert textarea.group(1).strip() == typed.replace('"', "&quot;")
    assert "Refund &lt;b&gt;now&lt;/b&gt;" in html
    assert 'aria-invalid="true"' in html
    assert Task.objects.count() == 0


@pytest.mark.django_db
def test_start_form_htmx_error_returns_the_form_fragment(operator_client: Any) -> None:
    response = operator_client.post(
        reverse("agentops:task_new"),
        {"agent": "refund", "goal": "Refund", "input": "{"},
        HTTP_HX_REQUEST="true",
    )

    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<form id="task-form"')
    assert "The input is not valid JSON" in html


@pytest.mark.django_db
@pytest.mark.parametrize("agent", ["nope", "bench_noop"])
def test_start_form_rejects_an_unknown_or_hidden_agent(operator_client: Any, agent: str) -> None:
    response = operator_client.post(
        reverse("agentops:task_new"),
        {"agent": agent, "goal": "Do something", "input": "{}"},
    )

    html = response.content.decode()
    assert response.status_code == 200
    assert f"Select a valid choice. {agent} is not one of the available choices." in html
    assert Task.objects.count() == 0


# -- task page --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_task_page_for_an_unknown_id_is_404(operator_client: Any) -> None:
    response = operator_client.get(reverse("agentops:task_detail", args=[999999]))

    assert response.status_code == 404


@pytest.mark.django_db
def test_task_page_shows_steps_ledger_and_events_of_a_finished_run(
    operator_client: Any, sim: str, redis_clean: None
) -> None:
    task = run_until_parked(make_task())
    assert task.status == TaskStatus.SUCCEEDED

    response = operator_client.get(reverse("agentops:task_detail", args=[task.pk]))

    html = response.content.decode()
    assert response.status_code == 200
    for title in Step.objects.filter(task=task).values_list("title", flat=True):
        assert title in html
    assert html.count("badge-succeeded") == 1 + 5 + 5  # task, steps, ledger rows
    for call in ToolCall.objects.filter(task=task):
        assert call.tool in html
        assert call.idempotency_key in html
        assert call.args_digest[:12] in html
    assert "step 5 of 5" in html
    assert "&quot;rule&quot;: &quot;30-day returns&quot;" in html  # eligibility output preview
    for action in Event.objects.filter(task=task).values_list("action", flat=True).distinct():
        assert f'<code translate="no">{action}</code>' in html
    assert html.count('<code translate="no">agentops.') == task.last_seq  # one row per event


@pytest.mark.django_db
def test_task_fragment_polls_while_the_task_runs_and_stops_at_a_terminal_status(
    operator_client: Any, user: Any
) -> None:
    task = make_task()
    url = reverse("agentops:task_detail", args=[task.pk])
    assert task_claim(task_id=task.pk, owner="test") is not None

    running = operator_client.get(url, HTTP_HX_REQUEST="true")
    task_abort(task_id=task.pk, actor=user, reason="not needed")
    ended = operator_client.get(url, HTTP_HX_REQUEST="true")

    assert running.status_code == 200
    assert 'hx-trigger="every 1s"' in running.content.decode()
    assert "badge-running" in running.content.decode()
    assert "<html" not in running.content.decode()
    assert ended.status_code == 286
    assert "badge-aborted" in ended.content.decode()
    assert "hx-trigger" not in ended.content.decode()
    assert "HX-Request" in ended["Vary"]


@pytest.mark.django_db
def test_task_page_of_a_terminal_task_does_not_poll(operator_client: Any, user: Any) -> None:
    task = make_task()
    task_abort(task_id=task.pk, actor=user)

    response = operator_client.get(reverse("agentops:task_detail", args=[task.pk]))

    assert response.status_code == 200
    assert "hx-trigger" not in response.content.decode()


@pytest.mark.django_db
def test_task_page_polls_a_parked_task(operator_client: Any, user: Any) -> None:
    task = make_task()
    task_pause(task_id=task.pk, actor=user, reason="checking")

    response = operator_client.get(reverse("agentops:task_detail", args=[task.pk]))

    html = response.content.decode()
    assert 'hx-trigger="every 1s"' in html
    assert f'hx-get="{reverse("agentops:task_detail", args=[task.pk])}"' in html
    assert "badge-paused" in html
    assert ">olga<" in html  # the pause event's actor


def _task_with_events(total: int) -> Task:
    task = make_task()
    with transaction.atomic():
        for i in range(total - 1):
            task_append_event(
                task_id=task.pk, event=EventSpec("agentops.task.noted", payload={"n": i})
            )
    assert Event.objects.filter(task=task).count() == total
    return task


@pytest.mark.django_db
def test_task_page_query_count_does_not_grow_with_events(
    operator_client: Any, django_assert_num_queries: Any
) -> None:
    few = _task_with_events(2)
    many = _task_with_events(20)
    # Warm the session so both requests below do the same work.
    operator_client.get(reverse("agentops:task_list"))

    # session; the user with their roles (navigation) and permissions (user and groups, for
    # which tasks they may read); the poll version; task, steps, ledger, events, the tasks
    # started again or forked from this one (the "start again and forks" section), and the
    # latest model-written summary of earlier work; the fleet's stops in force (the banner)
    with django_assert_num_queries(10):
        small = operator_client.get(reverse("agentops:task_detail", args=[few.pk]))
    with django_assert_num_queries(10):
        large = operator_client.get(reverse("agentops:task_detail", args=[many.pk]))
    with CaptureQueriesContext(connection) as fragment:
        operator_client.get(reverse("agentops:task_detail", args=[many.pk]), HTTP_HX_REQUEST="true")

    assert small.content.decode().count("agentops.task.noted") == 1
    assert large.content.decode().count("agentops.task.noted") == 19
    assert len(fragment.captured_queries) == 7  # the polled fragment: no section of forks


@pytest.mark.django_db
def test_task_page_shows_the_failure_of_a_stopped_task(
    operator_client: Any, sim: str, redis_clean: None
) -> None:
    task = run_until_parked(make_task(order_id="<script>alert(1)</script>"))
    assert task.status == TaskStatus.NEEDS_ATTENTION

    html = operator_client.get(reverse("agentops:task_detail", args=[task.pk])).content.decode()

    assert "Stopped: needs attention" in html
    assert '<dt>Layer</dt><dd translate="no">tool</dd>' in html
    assert (
        '<dt>Kind</dt><dd><span translate="no">bad_request</span> '
        '<span class="muted">(logic failure)</span></dd>'
    ) in html
    assert "no order &#x27;&lt;script&gt;alert(1)&lt;/script&gt;&#x27;" in html
    assert "<script>alert(1)</script>" not in html
    assert "Next run" not in html


@pytest.mark.django_db
def test_task_page_shows_the_next_run_of_a_scheduled_retry(
    operator_client: Any, sim: str, redis_clean: None
) -> None:
    Fault.objects.create(
        service="orders", operation="lookup", mode=FaultMode.ERROR_BEFORE, remaining=1
    )
    task = run_until_parked(make_task())
    assert task.status == TaskStatus.RETRY_SCHEDULED

    html = operator_client.get(reverse("agentops:task_detail", args=[task.pk])).content.decode()

    assert "Retry scheduled after a failure" in html
    assert (
        '<dt>Kind</dt><dd><span translate="no">unavailable</span> '
        '<span class="muted">(process failure)</span></dd>'
    ) in html
    assert "orders.lookup answered 503" in html
    assert f'<time datetime="{task.next_run_at.isoformat()}">' in html


@pytest.mark.django_db
def test_untrusted_goal_and_tool_output_render_escaped(
    operator_client: Any, sim: str, redis_clean: None
) -> None:
    task = run_until_parked(make_task(goal=f"Refund {HOSTILE}", reason=HOSTILE))
    eligibility = Step.objects.get(task=task, ordinal=1)
    assert HOSTILE in eligibility.output["rule"]

    pages = [
        operator_client.get(reverse("agentops:task_detail", args=[task.pk])),
        operator_client.get(reverse("agentops:task_list")),
    ]

    # The task list polls itself (it updates live like the inbox): its own URL, twice.
    for response, own_hx_gets in zip(pages, [[], ["/", "/?page=1"]], strict=True):
        html = response.content.decode()
        assert "<script>alert(1)</script>" not in html
        assert 'hx-get="/x"' not in html
        assert html.count("<script") == 1  # the vendored htmx, nothing else
        assert "&lt;script&gt;alert(1)&lt;/script&gt; hx-get=&quot;/x&quot;" in html
        assert re.findall(r'\shx-get="([^"]*)"', html) == own_hx_gets
    # The eligibility step's output preview, JSON-encoded and then escaped.
    detail = pages[0].content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt; hx-get=\\&quot;/x\\&quot;" in detail


@pytest.mark.django_db
def test_a_person_without_the_reader_role_sees_only_the_tasks_they_started(
    client: Any, django_user_model: Any, redis_clean: Any
) -> None:
    rita = django_user_model.objects.create_user(username="rita", password="x")
    mine = task_create(agent="refund", goal="Mine", input={"order_id": "A1001"}, created_by=rita)
    theirs = make_task(goal="Someone else's refund")
    client.force_login(rita)

    listing = client.get(reverse("agentops:task_list")).content.decode()

    assert f"#{mine.pk}<" in listing and f"#{theirs.pk}<" not in listing
    assert client.get(reverse("agentops:task_detail", args=[mine.pk])).status_code == 200
    assert client.get(reverse("agentops:task_detail", args=[theirs.pk])).status_code == 404


@pytest.mark.django_db
def test_a_running_task_page_names_the_worker_that_holds_it(operator_client: Any) -> None:
    task = make_task()
    holder = "host-a:1:0c0ffee0:advance-1-1"  # two hosts may both run pid 1: the token differs
    assert task_claim(task_id=task.pk, owner=holder) is not None

    html = operator_client.get(reverse("agentops:task_detail", args=[task.pk])).content.decode()

    assert "Held by" in html and holder in html
