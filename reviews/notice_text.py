"""What a notice says to a person: its headline (an email's subject), its sentence (what happened
to which task, tool, rule, and when the gate is due) and the goal, written in the language active
when they are called. A message that leaves the product is written when it is sent, in its
reader's language: an email in its recipient's (`reviews.selectors.language_for`), a Slack channel
message or a webhook in the site's (`settings.LANGUAGE_CODE`), with `translation.override`.

The notice's stored `text` is the record of what was announced, written once in English when the
notice is made (`notice_record_text`, the same sentences); the messages are composed from the
notice's task and gate as they are when the message is sent (the due time after an escalation,
the approvals given so far).

The record's values inside a sentence (the agent, the tool, the rule, people's and groups' names,
a failure's kind, the goal) stay as written. For HTML, each function takes `kept` as its `value`:
the translated words are escaped and each value is wrapped in `<span translate="no">`, so a
translating tool and a reader of another language know them for names and record.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from django.utils import timezone, translation
from django.utils.formats import date_format
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, pgettext

from agentops.engine import approval_kind_of
from reviews.states import NoticeEvent

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

    from agentops.models import Gate, Task
    from reviews.models import Notice

# The language of the stored record (`Notice.text`), whatever the site's.
RECORD_LANGUAGE = "en"

# What an email's subject says of each event, with the task's id.
HEADLINES: dict[str, StrOrPromise] = {
    NoticeEvent.GATE_OPENED: gettext_lazy("A gate opened: task %(task)s"),
    NoticeEvent.GATE_DUE_SOON: gettext_lazy("A gate nears its timeout: task %(task)s"),
    NoticeEvent.GATE_SECOND_APPROVAL: gettext_lazy(
        "A gate waits for a second approval: task %(task)s"
    ),
    NoticeEvent.TASK_STOPPED: gettext_lazy("A task stopped for a human: task %(task)s"),
}

# A value of the record inside a sentence: as it is (plain text), or escaped and kept as written
# (HTML).
Value = Callable[[str], str]


def plain(value: str) -> str:
    return value


def filled(text: str, values: dict[str, object], value: Value) -> str:
    """`text` (a translated sentence with named placeholders) with `values` in it. The caller
    passes the record's values through `value`; for HTML (`kept`), the words and the other values
    (times; numbers need no escaping) are escaped here."""
    if value is plain:
        return text % values
    escaped = {
        name: item if isinstance(item, int) else conditional_escape(str(item))
        for name, item in values.items()
    }
    return str(conditional_escape(text)) % escaped


def moment(value: datetime) -> str:
    """A time a person reads: the language's short date and time, and the zone it is in."""
    local = timezone.localtime(value)
    return f"{date_format(local, 'SHORT_DATETIME_FORMAT')} {local.tzname() or ''}".strip()


def headline(notice: Notice) -> str:
    """The event and the task, as an email's subject says it."""
    found = HEADLINES.get(notice.event)
    if found is None:
        return _("%(event)s: task %(task)s") % {
            "event": notice.get_event_display(),
            "task": notice.task_id,
        }
    return str(found) % {"task": notice.task_id}


def joined(separator: str, items: list[str], value: Value) -> str:
    """`items` (values passed through `value`) one after the other, `separator` between them;
    for HTML, the separator escaped and the whole safe to put in a sentence."""
    if value is plain:
        return separator.join(items)
    return mark_safe(str(conditional_escape(separator)).join(items))


def gate_sentence(gate: Gate, event: str, value: Value = plain) -> str:
    """What the gate waits for: an approval, soon its timeout, or a second person's approval."""
    values: dict[str, object] = {
        "task": gate.task_id,
        "agent": value(gate.task.agent),
        "tool": value(gate.tool),
        "rule": value(gate.rule),
        "due": moment(gate.due_at),
    }
    if event == NoticeEvent.GATE_SECOND_APPROVAL:
        kind = approval_kind_of(gate)
        given = kind.approvals_of(gate)
        values |= {
            "given": len(given),
            "required": kind.required,
            "names": joined(", ", [value(a.by) for a in given], value),
            # Groups any one of which may give the approval: "finance leads or operators".
            "groups": joined(
                pgettext("any one of the groups", " or "),
                [value(group) for group in kind.waiting_for(gate)],
                value,
            ),
        }
        text = _(
            "Task %(task)s (%(agent)s): '%(tool)s' has %(given)s of %(required)s approvals "
            "(by %(names)s); a second person of %(groups)s must approve (rule %(rule)s; "
            "due %(due)s)."
        )
    elif event == NoticeEvent.GATE_DUE_SOON:
        text = _(
            "Task %(task)s (%(agent)s): '%(tool)s' times out soon (rule %(rule)s; due %(due)s)."
        )
    else:
        text = _(
            "Task %(task)s (%(agent)s): '%(tool)s' waits for approval (rule %(rule)s; due %(due)s)."
        )
    return filled(text, values, value)


def stopped_sentence(task: Task, value: Value = plain) -> str:
    """Why the task waits for a person: it stopped, and the kind of its failure."""
    kind = str((task.failure or {}).get("kind", "unknown"))
    return filled(
        _("Task %(task)s (%(agent)s) stopped for a human (%(kind)s)."),
        {"task": task.pk, "agent": value(task.agent), "kind": value(kind)},
        value,
    )


def notice_sentence(notice: Notice, value: Value = plain) -> str:
    """What happened, from the notice's task and gate as they are now."""
    if notice.gate is not None:
        return gate_sentence(notice.gate, notice.event, value)
    return stopped_sentence(notice.task, value)


def goal_line(goal: str, value: Value = plain) -> str:
    return filled(_("Goal: %(goal)s"), {"goal": value(goal)}, value)


def notice_text(notice: Notice) -> str:
    """The notice on one line: what happened, then the goal (an email's text, a webhook's and
    Slack's)."""
    return _with_goal(notice_sentence(notice), notice.task.goal)


def _with_goal(sentence: str, goal: str) -> str:
    return _("%(sentence)s Goal: %(goal)s") % {"sentence": sentence, "goal": goal}


def notice_record_text(*, event: str, gate: Gate | None = None, task: Task | None = None) -> str:
    """The notice's stored text, the record of what was announced: in English, as it was then."""
    with translation.override(RECORD_LANGUAGE):
        if gate is not None:
            return _with_goal(gate_sentence(gate, event), gate.task.goal)
        assert task is not None, "a notice is about a gate or a task"
        return _with_goal(stopped_sentence(task), task.goal)
