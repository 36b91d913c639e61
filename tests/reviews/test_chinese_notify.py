# Chinese text is written with its own full-width punctuation.
# ruff: noqa: RUF001
"""Simplified Chinese in what leaves the product: an email is written in its recipient's language
(their choice, else the site's `LANGUAGE_CODE`), a Slack channel message and a webhook in the
site's, a Slack modal shown to one linked person in theirs, and the API's `detail` in the
request's (Accept-Language), its status and keys unchanged.

The record stays as written: the agent, the tool, the rule, the goal, names and codes (in HTML,
inside `translate="no"`; in plain text and Slack's mrkdwn, taken out before the English words are
counted). The email goes through the real notification job into Django's locmem backend, Slack
through the stand-in Web API over HTTP, the webhook to a local HTTP receiver.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta
from email import message_from_bytes
from email.header import decode_header, make_header
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.core import mail
from django.test import Client
from django.utils import timezone

from agentops.models import Gate, Task
from agentops.plumbing import queues
from agentops.tokens import api_token_create
from reviews.models import Delivery, NotificationRoute, Profile, WebhookEndpoint
from reviews.notifications import delivery_send, notices_find
from reviews.states import DeliveryChannel, DeliveryStatus, NoticeEvent
from tests.english import english_left, english_words
from tests.reviews.builders import gated_refund, open_gate, slack_linked, stopped_trip
from tests.serving import serve_in_thread
from tests.slack_api import CHANNEL, signed

pytestmark = pytest.mark.django_db

ZH = "zh-hans"
HAN = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture
def mailbox(settings: Any) -> list[Any]:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.AGENTOPS = {**settings.AGENTOPS, "PUBLIC_URL": "https://agentops.example.com"}
    mail.outbox = []
    return mail.outbox


def reading(user: Any, language: str) -> Any:
    """`user`, with an email address and, when `language` is given, that language chosen on
    their account page."""
    user.email = f"{user.username}@example.com"
    user.save(update_fields=["email"])
    if language:
        Profile.objects.update_or_create(user=user, defaults={"language": language})
    return user


def send_all() -> list[str]:
    pending = Delivery.objects.filter(status=DeliveryStatus.PENDING)
    return [delivery_send(delivery_id=pk) for pk in pending.values_list("pk", flat=True)]


def mail_to(mailbox: list[Any], user: Any) -> Any:
    (message,) = [m for m in mailbox if m.to == [user.email]]
    return message


def record_of(task: Task) -> list[str]:
    """What the record says of `task` and its gate (kept as written in any language)."""
    words = [task.agent, task.goal, str((task.failure or {}).get("kind", ""))]
    for gate in Gate.objects.filter(task=task):
        words += [gate.tool, gate.rule, gate.approver_group]
    return [word for word in words if word]


def prose_of(text: str, record: list[str]) -> list[str]:
    """The English words of `text` outside the record, the links and the product's name."""
    for kept in sorted(record, key=len, reverse=True):
        text = text.replace(kept, " ")
    text = re.sub(r"https?://\S+", " ", text)
    return english_words(text.replace("agentops", " "))


def wire(message: Any) -> tuple[str, str, str]:
    """The email as the SMTP server receives it, decoded: subject, text, HTML."""
    parsed = message_from_bytes(message.message().as_bytes())
    parts = {
        part.get_content_type(): part.get_payload(decode=True).decode(part.get_content_charset())
        for part in parsed.walk()
        if not part.is_multipart()
    }
    subject = str(make_header(decode_header(parsed["Subject"])))
    return subject, parts["text/plain"], parts["text/html"]


# -- email: the recipient's language --------------------------------------------------------------


def test_a_gate_email_to_a_person_who_chose_chinese_is_in_chinese_whole(
    sim, redis_clean, mailbox, operator, operator2, starter
):
    reading(operator, ZH)
    reading(operator2, "")  # chose nothing: the site's language, English
    task = gated_refund(created_by=starter)

    notices_find()
    assert send_all() == ["sent", "sent"]
    subject, text, html = wire(mail_to(mailbox, operator))
    english = wire(mail_to(mailbox, operator2))

    record = record_of(task)
    assert subject == f"[agentops] 审批关卡已开启：任务 {task.pk}"
    assert english_left(html) == []
    assert '<html lang="zh-hans">' in html
    assert prose_of(text, record) == []
    assert prose_of(subject, record) == []
    assert "打开：https://agentops.example.com/review/gates/" in text
    assert re.search(r"^批准：https://\S+$", text, re.MULTILINE)
    # The due time in the language's own form, and the record as written.
    assert re.search(r"截止 \d{4}年\d{1,2}月\d{1,2}日 \d\d:\d\d UTC", text)
    assert f'<span translate="no">{task.goal}</span>' in html
    # The same notice to the person who chose nothing reads as it always did.
    assert english[0] == f"[agentops] A gate opened: task {task.pk}"
    assert "waits for approval" in english[1] and "Open it: https://" in english[1]
    assert not HAN.search(english[1] + english[2])


def test_a_stopped_task_and_a_gate_near_its_timeout_are_emailed_in_chinese(
    sim, redis_clean, mailbox, operator
):
    reading(operator, ZH)
    stopped = stopped_trip()
    gated = gated_refund()
    Gate.objects.filter(task=gated).update(due_at=timezone.now() + timedelta(minutes=5))

    notices_find()
    send_all()
    subjects = sorted(wire(m)[0] for m in mailbox)

    assert subjects == sorted(
        [
            f"[agentops] 审批关卡即将超时：任务 {gated.pk}",
            f"[agentops] 审批关卡已开启：任务 {gated.pk}",
            f"[agentops] 任务已停止，等待人工处理：任务 {stopped.pk}",
        ]
    )
    for message in mailbox:
        subject, text, html = wire(message)
        task = stopped if str(stopped.pk) in subject.split()[-1] else gated
        assert english_left(html) == [], subject
        assert prose_of(text, record_of(task)) == [], subject


def test_a_second_approval_email_keeps_the_names_as_written_in_a_chinese_sentence(
    sim, redis_clean, mailbox, django_user_model
):
    lead = reading(django_user_model.objects.create_user("fiona"), ZH)
    lead.groups.add(Group.objects.get_or_create(name="finance leads")[0])
    task = gated_refund()
    gate = open_gate(task)
    first = {"by": "<b>olga</b>", "user_id": None, "args_digest": gate.args_digest}
    Gate.objects.filter(pk=gate.pk).update(
        approval_kind="two_approvers",
        second_approver_group="finance leads",
        approvals=[{**first, "at": "", "group": "operators"}],
    )

    notices_find()
    send_all()
    (message,) = [m for m in mailbox if "第二人" in wire(m)[0]]
    subject, text, html = wire(message)

    assert subject == f"[agentops] 审批关卡等待第二人批准：任务 {task.pk}"
    assert "已获得 1/2 个批准（批准人：<b>olga</b>）；还需 finance leads 中的另一人批准" in text
    assert '<span translate="no">&lt;b&gt;olga&lt;/b&gt;</span>' in html
    assert "<b>" not in html
    assert english_left(html) == []
    assert prose_of(text, [*record_of(task), "<b>olga</b>", "finance leads"]) == []


def test_with_the_site_in_chinese_a_person_who_chose_nothing_reads_chinese_and_english_stays(
    sim, redis_clean, mailbox, settings, operator, operator2
):
    settings.LANGUAGE_CODE = ZH
    reading(operator, "")
    reading(operator2, "en")  # their own choice wins over the site's
    task = gated_refund()

    notices_find()
    send_all()
    chinese = wire(mail_to(mailbox, operator))
    english = wire(mail_to(mailbox, operator2))

    assert chinese[0] == f"[agentops] 审批关卡已开启：任务 {task.pk}"
    assert english_left(chinese[2]) == []
    assert english[0] == f"[agentops] A gate opened: task {task.pk}"
    assert not HAN.search(english[1])


def test_the_stored_notice_is_the_english_record_whatever_the_sites_language(
    sim, redis_clean, settings
):
    settings.LANGUAGE_CODE = ZH
    task = gated_refund()

    (notice,) = notices_find()

    assert notice.event == NoticeEvent.GATE_OPENED
    assert notice.text.startswith(f"Task {task.pk} (refund): '")
    assert "waits for approval (rule" in notice.text and notice.text.endswith(f"Goal: {task.goal}")


# -- Slack and webhooks: the site's language -------------------------------------------------------


def mrkdwn_prose(text: str, record: list[str]) -> list[str]:
    """English words of a Slack text outside the record, the arguments' code block, emoji codes
    and mentions."""
    text = re.sub(r"```.*?```", " ", text, flags=re.DOTALL)
    text = re.sub(r":[a-z_]+:|<@\w+>", " ", text)
    return prose_of(text, record)


def test_a_slack_channel_message_and_its_update_are_in_the_sites_language(
    sim, redis_clean, slack, settings, operator
):
    settings.LANGUAGE_CODE = ZH
    NotificationRoute.objects.create(slack_channel=CHANNEL)
    gate = open_gate(gated_refund())
    slack_linked(slack, operator, "U0OLGA")
    notices_find()
    (delivery,) = Delivery.objects.filter(channel=DeliveryChannel.SLACK)

    assert delivery_send(delivery_id=delivery.pk) == "sent"
    message = slack.only_message()
    record = [*record_of(gate.task), "olga"]
    posted = message.block_text()
    clicked = post(slack.click(message, "gate_approve", user="U0OLGA"))
    run_updates()

    assert slack.refusals == []
    assert f"需要批准：{gate.tool}" in posted and "批准此操作？" in posted
    assert mrkdwn_prose(posted, record) == []
    assert clicked.status_code == 200
    assert message.updates == 1 and "*已批准*，批准人 olga" in message.block_text()
    assert mrkdwn_prose(message.block_text(), record) == []
    assert mrkdwn_prose(message.text, record) == []


def test_a_refusal_modal_is_in_the_clickers_language(sim, redis_clean, slack, starter):
    """The task's starter may not approve its gate: the refusal is shown to them alone, in the
    language they chose, while the channel's message stays in the site's."""
    Profile.objects.create(user=starter, language=ZH)
    NotificationRoute.objects.create(slack_channel=CHANNEL)
    open_gate(gated_refund(created_by=starter))
    slack_linked(slack, starter, "U0STAN")
    notices_find()
    (delivery,) = Delivery.objects.filter(channel=DeliveryChannel.SLACK)
    delivery_send(delivery_id=delivery.pk)
    message = slack.only_message()

    post(slack.click(message, "gate_approve", user="U0STAN"))

    (modal,) = slack.views
    assert modal["title"]["text"] == "未决定"
    assert modal["close"]["text"] == "确定"
    buttons = [e["text"]["text"] for b in modal["blocks"] if "elements" in b for e in b["elements"]]
    assert buttons == ["在 agentops 中打开"]
    assert modal["blocks"][0]["text"]["text"].startswith("未做任何决定：")
    assert "Approval needed" in message.block_text()  # the channel: the site's, English


class Receiver:
    """A local webhook receiver: records each request's body and answers 200."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                receiver.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        serve_in_thread(self.server)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.server.shutdown()


def test_a_webhooks_text_is_in_the_sites_language_and_its_keys_and_codes_are_not(
    sim, redis_clean, settings, receiver
):
    settings.LANGUAGE_CODE = ZH
    for body_format in ("json", "slack"):
        endpoint = WebhookEndpoint.objects.create(
            name=body_format, url=receiver.url, secret="s", body_format=body_format
        )
        NotificationRoute.objects.create(endpoint=endpoint)
    task = gated_refund()

    notices_find()
    assert send_all() == ["sent", "sent"]
    plain, chat = sorted((json.loads(body) for body in receiver.bodies), key=len, reverse=True)

    assert sorted(plain) == ["delivery", "event", "gate", "link", "task", "text"]
    assert plain["event"] == "gate_opened" and plain["task"]["status"] == "awaiting_approval"
    assert plain["text"].startswith(f"任务 {task.pk}（refund）：")
    assert prose_of(plain["text"], record_of(task)) == []
    assert chat["text"].endswith("|在 agentops 中打开>")
    assert mrkdwn_prose(re.sub(r"<\S+\|", " ", chat["text"]), record_of(task)) == []


# -- the API: the request's language ---------------------------------------------------------------


def test_the_apis_errors_answer_in_the_requests_language_with_the_same_status(
    sim, redis_clean, operator, auditor
):
    _, token = api_token_create(user=operator, name="zh")
    _, reader = api_token_create(user=auditor, name="zh")
    chinese = Client(HTTP_ACCEPT_LANGUAGE="zh-Hans")
    english = Client()
    asks = [
        # (method, path, token): a missing gate 404, a role refused 403 (auditors decide no
        # gate), an unknown token 401, an unknown path 404, a wrong method 405.
        ("get", "/api/v1/gates/999999", token, 404, "没有审批关卡 999999"),
        ("post", "/api/v1/gates/1/approve", reader, 403, "只有操作员可以决定审批关卡"),
        ("get", "/api/v1/gates", "ao_unknown", 401, "访问令牌未知、已撤销，或其用户已停用"),
        ("get", "/api/v1/no-such-thing", token, 404, "没有此路径：/api/v1/no-such-thing"),
        ("delete", "/api/v1/gates", token, 405, "此处不允许 DELETE"),
    ]
    for method, path, bearer, status, words in asks:
        auth = {"HTTP_AUTHORIZATION": f"Bearer {bearer}"}
        zh = getattr(chinese, method)(path, content_type="application/json", **auth)
        en = getattr(english, method)(path, content_type="application/json", **auth)

        assert (zh.status_code, en.status_code) == (status, status), path
        assert sorted(zh.json()) == sorted(en.json()) == ["detail"], path
        assert zh.json()["detail"].startswith(words), zh.json()
        assert not HAN.search(en.json()["detail"]), en.json()
        if status == 401:
            # The challenge is a header: ASCII, English, in any language.
            assert zh["WWW-Authenticate"] == en["WWW-Authenticate"]


# -- helpers of the Slack tests ------------------------------------------------------------------


def post(payload: dict[str, Any]) -> Any:
    body, headers = signed(payload)
    return Client().post(
        "/review/slack/interactions",
        body,
        content_type="application/x-www-form-urlencoded",
        **headers,
    )


def run_updates() -> None:
    """Run the enqueued Slack message updates as a notices' worker would."""
    queue = queues.queue(queues.NOTICES)
    for job in queue.get_jobs():
        if job.func_name == "reviews.jobs.slack_message_update":
            job.perform()
            queue.remove(job)
