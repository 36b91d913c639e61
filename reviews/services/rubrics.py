"""Rubric reviews of audit items: policy admins define rubrics and attach them to the audit queue
by agent or rule; auditors answer them, each on their own, as many as the queue asks per item;
the item is settled when they agree, and goes to the adjudication lane for a senior auditor when
they do not. Every write is one entry in the decision log, in the same transaction.

An item's case is opened by its first review, under the item's lock (`select_for_update` on the
audit item), so two reviewers at once are counted one after the other; a reviewer answers an
item once, and a case takes no review beyond the number its queue asked for when it opened.
Free text people type (instructions, notes, corrections) is redacted before it is stored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify
from django.utils.translation import gettext as _

from agentops.engine import digest, redacted
from agentops.models import AuditItem
from agentops.states import AuditStatus
from reviews.models import (
    MAX_REVIEWS,
    AuditCase,
    Rubric,
    RubricItem,
    RubricQueue,
    RubricReview,
)
from reviews.selectors.rubrics import rubric_items, rubric_queue_for
from reviews.services._common import NotAllowed, ReviewError, decision_record
from reviews.services.audit import audit_item_settle
from reviews.services.reservations import reservation_check, reservation_end
from reviews.states import VIA_UNKNOWN, CaseStatus, RubricItemKind, Via

if TYPE_CHECKING:
    from django.contrib.auth.models import User

PASS_FAIL_VALUES = ("pass", "fail")
MAX_RUBRIC_ITEMS = 20
MAX_VALUES = 11
TEXT_MAX = 4000


def _text(value: Any, *, where: str, limit: int = TEXT_MAX) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ReviewError(_("%(where)s: text expected") % {"where": where})
    if len(value) > limit:
        raise ReviewError(
            _("%(where)s: at most %(limit)s characters") % {"where": where, "limit": limit}
        )
    text: str = redacted(value.strip())
    return text


def _values(kind: str, given: Any, *, where: str) -> list[dict[str, Any]]:
    """The allowed answers of an item of `kind`, each with its description; ReviewError naming
    `where` for a list that does not fit the kind."""
    if not isinstance(given, list) or not given:
        raise ReviewError(
            _("%(where)s.values: a list of values, each with a description") % {"where": where}
        )
    if len(given) > MAX_VALUES:
        raise ReviewError(
            _("%(where)s.values: at most %(max)s values") % {"where": where, "max": MAX_VALUES}
        )
    values: list[dict[str, Any]] = []
    for n, entry in enumerate(given):
        at = f"{where}.values[{n}]"
        if not isinstance(entry, dict) or set(entry) - {"value", "description"}:
            raise ReviewError(_("%(at)s: an object with a value and a description") % {"at": at})
        description = _text(entry.get("description"), where=f"{at}.description", limit=500)
        if not description:
            raise ReviewError(
                _("%(at)s: each value needs a description saying what it means") % {"at": at}
            )
        value = entry.get("value")
        if kind == RubricItemKind.SCORE:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ReviewError(_("%(at)s.value: a score is a whole number") % {"at": at})
        elif not isinstance(value, str) or not value.strip() or len(value) > 50:
            raise ReviewError(_("%(at)s.value: a label of 1 to 50 characters") % {"at": at})
        else:
            value = value.strip()
        values.append({"value": value, "description": description})
    labels = [v["value"] for v in values]
    if len(set(labels)) != len(labels):
        raise ReviewError(_("%(where)s.values: each value once") % {"where": where})
    if kind == RubricItemKind.PASS_FAIL and sorted(labels) != sorted(PASS_FAIL_VALUES):
        raise ReviewError(
            _("%(where)s.values: pass/fail has the values pass and fail") % {"where": where}
        )
    if kind == RubricItemKind.SCORE:
        ordered = sorted(labels)
        if len(ordered) < 2 or ordered != list(range(ordered[0], ordered[-1] + 1)):
            raise ReviewError(
                _(
                    "%(where)s.values: a scale of at least two consecutive whole numbers, each "
                    "described"
                )
                % {"where": where}
            )
        values.sort(key=lambda v: v["value"])
    if kind == RubricItemKind.CATEGORY and len(values) < 2:
        raise ReviewError(_("%(where)s.values: at least two categories") % {"where": where})
    return values


def _rubric_item(position: int, given: Any) -> RubricItem:
    where = f"items[{position}]"
    if not isinstance(given, dict):
        raise ReviewError(
            _("%(where)s: an object with key, label, kind, required and values") % {"where": where}
        )
    unknown = set(given) - {"key", "label", "kind", "required", "values"}
    if unknown:
        raise ReviewError(
            _("%(where)s: unknown field %(field)s")
            % {"where": where, "field": repr(sorted(unknown)[0])}
        )
    label = _text(given.get("label"), where=f"{where}.label", limit=200)
    if not label:
        raise ReviewError(_("%(where)s.label: say what the item asks") % {"where": where})
    key = given.get("key") or slugify(label).replace("-", "_")[:50]
    if not isinstance(key, str) or slugify(key).replace("-", "_") != key or not key:
        raise ReviewError(_("%(where)s.key: letters, digits and underscores") % {"where": where})
    kind = given.get("kind")
    if kind not in RubricItemKind.values:
        raise ReviewError(
            _("%(where)s.kind: one of %(kinds)s")
            % {"where": where, "kinds": ", ".join(RubricItemKind.values)}
        )
    required = given.get("required", True)
    if not isinstance(required, bool):
        raise ReviewError(_("%(where)s.required: true or false") % {"where": where})
    return RubricItem(
        position=position,
        key=key,
        label=label,
        kind=kind,
        required=required,
        values=_values(kind, given.get("values"), where=where),
    )


def rubric_create(
    *,
    actor: User,
    name: str,
    items: Any,
    instructions: str = "",
    via: Via = VIA_UNKNOWN,
) -> Rubric:
    """Define a rubric: `items` is a list of objects (`key`, `label`, `kind`: pass_fail, score
    or category, `required`, `values`: each allowed answer with its description). ReviewError
    naming the first item or field that does not fit; nothing is written then."""
    if not actor.has_perm("reviews.define_rubrics"):
        raise NotAllowed(_("only policy admins define rubrics"))
    name = _text(name, where="name", limit=100)
    if not name:
        raise ReviewError(_("name: a rubric needs a name"))
    if not isinstance(items, list) or not items:
        raise ReviewError(_("items: a rubric asks at least one thing"))
    if len(items) > MAX_RUBRIC_ITEMS:
        raise ReviewError(_("items: at most %(max)s") % {"max": MAX_RUBRIC_ITEMS})
    built = [_rubric_item(n, given) for n, given in enumerate(items)]
    keys = [item.key for item in built]
    if len(set(keys)) != len(keys):
        raise ReviewError(_("items: each key once"))
    with transaction.atomic():
        if Rubric.objects.filter(name=name).exists():
            raise ReviewError(_("name: there is a rubric %(name)s already") % {"name": repr(name)})
        rubric = Rubric.objects.create(
            name=name,
            instructions=_text(instructions, where="instructions"),
            created_by=actor,
        )
        for item in built:
            item.rubric = rubric
        RubricItem.objects.bulk_create(built)
        decision_record(
            action="reviews.rubric.created",
            actor=actor,
            subject=f"rubric {rubric.pk}: {name}",
            detail={"rubric": rubric.pk, "items": keys},
            via=via,
        )
    return rubric


def rubric_queue_attach(
    *,
    actor: User,
    rubric_id: int,
    agent: str = "",
    rule: str = "",
    instructions: str = "",
    reviews_required: int = 1,
    via: Via = VIA_UNKNOWN,
) -> RubricQueue:
    """Attach a rubric to the audit queue for the items of `agent`, of `rule`, or of both, with
    instructions and how many independent reviews each item needs (1 to MAX_REVIEWS). It
    replaces what that agent and rule had; items already under review keep the rubric and
    number they started with. Raises Rubric.DoesNotExist."""
    if not actor.has_perm("reviews.define_rubrics"):
        raise NotAllowed(_("only policy admins attach rubrics to the audit queue"))
    agent, rule = (agent or "").strip(), (rule or "").strip()
    if not agent and not rule:
        raise ReviewError(_("attach a rubric to an agent, a rule, or both"))
    if not 1 <= reviews_required <= MAX_REVIEWS:
        raise ReviewError(
            _("reviews_required: 1 to %(max)s reviews per item") % {"max": MAX_REVIEWS}
        )
    with transaction.atomic():
        rubric = Rubric.objects.get(pk=rubric_id)
        before = RubricQueue.objects.select_for_update().filter(agent=agent, rule=rule).first()
        fields = {
            "rubric": rubric,
            "instructions": _text(instructions, where="instructions"),
            "reviews_required": reviews_required,
        }
        if before is None:
            queue = RubricQueue.objects.create(agent=agent, rule=rule, created_by=actor, **fields)
        else:
            RubricQueue.objects.filter(pk=before.pk).update(**fields)
            queue = RubricQueue.objects.select_related("rubric").get(pk=before.pk)
        decision_record(
            action="reviews.rubric.attached",
            actor=actor,
            subject=f"rubric {rubric.name} for {agent or 'any agent'} / {rule or 'any rule'}",
            detail={
                "queue": queue.pk,
                "rubric": rubric.pk,
                "agent": agent,
                "rule": rule,
                "reviews_required": reviews_required,
                "before": None
                if before is None
                else {"rubric": before.rubric_id, "reviews_required": before.reviews_required},
            },
            via=via,
        )
    return queue


def rubric_answers_check(rubric_id: int, answers: Any) -> dict[str, Any]:
    """`answers` (item key to value) checked against the rubric: each required item answered,
    each value one the item allows (a score as a whole number, or its digits), no unknown key.
    Returns the answers as stored; ReviewError naming the first that does not fit."""
    if not isinstance(answers, dict):
        raise ReviewError(_("answers: an object of rubric item keys to values"))
    items = rubric_items(rubric_id)
    known = {item.key for item in items}
    unknown = sorted(set(answers) - known)
    if unknown:
        raise ReviewError(_("answers: the rubric has no item %(key)s") % {"key": repr(unknown[0])})
    checked: dict[str, Any] = {}
    for item in items:
        value = answers.get(item.key)
        if value is None or value == "":
            if item.required:
                raise ReviewError(_("%(label)s: an answer is required") % {"label": item.label})
            continue
        if item.kind == RubricItemKind.SCORE and isinstance(value, str):
            value = int(value) if value.lstrip("-").isdigit() else value
        allowed = [v["value"] for v in item.values]
        if isinstance(value, bool) or value not in allowed:
            shown = ", ".join(str(v) for v in allowed)
            raise ReviewError(
                _("%(label)s: one of %(values)s") % {"label": item.label, "values": shown}
            )
        checked[item.key] = value
    return checked


def _verdict_check(verdict: str, note: str) -> None:
    if verdict not in (AuditStatus.OK, AuditStatus.FLAGGED):
        raise ReviewError(_("an audit verdict is ok or flagged"))
    if verdict == AuditStatus.FLAGGED and not note.strip():
        raise ReviewError(_("a flag needs a note saying what is wrong"))


def _agree(reviews: list[RubricReview]) -> bool:
    first = reviews[0]
    return all(r.answers == first.answers and r.verdict == first.verdict for r in reviews[1:])


def rubric_review_submit(
    *,
    item_id: int,
    actor: User,
    answers: Any,
    verdict: str,
    note: str = "",
    correction: str = "",
    via: Via = VIA_UNKNOWN,
) -> AuditCase:
    """One auditor's answers to the rubric of an audit item, with a verdict (ok, or flagged with
    a note) and an optional correction. Opens the item's case on its first review; with the
    last review the queue asked for, the item is settled when every reviewer gave the same
    answers and verdict, and goes to the adjudication lane otherwise. Raises
    AuditItem.DoesNotExist; ReviewError when no rubric applies, the item has its reviews, or
    this person answered it already."""
    if not actor.has_perm("reviews.review_audit"):
        raise NotAllowed(_("only auditors answer rubrics"))
    note = _text(note, where="note")
    correction = _text(correction, where="correction", limit=20_000)
    _verdict_check(verdict, note)
    with transaction.atomic():
        item = AuditItem.objects.select_for_update().get(pk=item_id)
        case = AuditCase.objects.select_related("rubric").filter(audit_item=item).first()
        if case is None:
            if item.status != AuditStatus.PENDING:
                raise ReviewError(
                    _(
                        "this item was marked %(status)s before a rubric was attached; it is "
                        "reviewed as it was"
                    )
                    % {"status": item.status}
                )
            queue = rubric_queue_for(agent=item.agent, rule=item.rule)
            if queue is None:
                raise ReviewError(_("no rubric is attached for this item: mark it OK or flag it"))
            case = AuditCase.objects.create(
                audit_item=item,
                queue=queue,
                rubric=queue.rubric,
                reviews_required=queue.reviews_required,
            )
        if case.status != CaseStatus.COLLECTING:
            raise ReviewError(_("this item has all its reviews; see them on its page"))
        reservation_check(item=item, actor=actor)
        checked = rubric_answers_check(case.rubric_id, answers)
        try:
            with transaction.atomic():
                review = RubricReview.objects.create(
                    case=case,
                    reviewer=actor,
                    reviewer_label=actor.get_username(),
                    answers=checked,
                    verdict=verdict,
                    note=note,
                    correction=correction,
                )
        except IntegrityError:
            raise ReviewError(_("you answered this item's rubric already")) from None
        reservation_end(item=item, actor=actor)
        reviews = list(case.reviews.filter(adjudication=False).order_by("created_at", "id"))
        status = CaseStatus.COLLECTING
        if len(reviews) >= case.reviews_required:
            status = CaseStatus.AGREED if _agree(reviews) else CaseStatus.DISPUTED
            AuditCase.objects.filter(pk=case.pk).update(
                status=status,
                settled_at=timezone.now() if status == CaseStatus.AGREED else None,
            )
            if status == CaseStatus.AGREED:
                notes = "; ".join(r.note for r in reviews if r.note)
                audit_item_settle(item=item, verdict=verdict, note=notes, actor=actor)
        # The log is read by every reviewer: while others have yet to answer, it holds the
        # answers' digest and the review's id (the review row holds them), never what they were.
        revealed = status != CaseStatus.COLLECTING
        decision_record(
            action="reviews.rubric.answered",
            actor=actor,
            task_id=item.task_id,
            subject=f"audit item {item.pk}: {item.tool}, rubric {case.rubric.name}",
            after_digest=digest(
                {"answers": checked, "verdict": verdict, "note": note, "correction": correction}
            ),
            reason=note if revealed else "",
            policy_version_number=item.policy_version_number,
            detail={
                "item": item.pk,
                "case": case.pk,
                "rubric_review": review.pk,
                **({"answers": checked, "verdict": verdict} if revealed else {}),
                "correction": bool(correction),
                "review": len(reviews),
                "of": case.reviews_required,
                "case_status": status,
            },
            via=via,
        )
        case.refresh_from_db()
    return case


def rubric_adjudicate(
    *,
    item_id: int,
    actor: User,
    answers: Any,
    verdict: str,
    note: str = "",
    correction: str = "",
    via: Via = VIA_UNKNOWN,
) -> AuditCase:
    """A senior auditor settles a disputed item: their answers and verdict stand (a flag needs a
    note). Not by one of the item's own reviewers. Raises AuditItem.DoesNotExist; ReviewError
    when the item is not in the adjudication lane."""
    if not actor.has_perm("reviews.adjudicate_audit"):
        raise NotAllowed(_("only senior auditors settle disputed items"))
    note = _text(note, where="note")
    correction = _text(correction, where="correction", limit=20_000)
    _verdict_check(verdict, note)
    with transaction.atomic():
        item = AuditItem.objects.select_for_update().get(pk=item_id)
        case = AuditCase.objects.select_related("rubric").filter(audit_item=item).first()
        if case is None or case.status != CaseStatus.DISPUTED:
            raise ReviewError(_("this item is not waiting for adjudication"))
        if case.reviews.filter(reviewer=actor).exists():
            raise NotAllowed(_("you reviewed this item; another senior auditor settles it"))
        checked = rubric_answers_check(case.rubric_id, answers)
        RubricReview.objects.create(
            case=case,
            reviewer=actor,
            reviewer_label=actor.get_username(),
            adjudication=True,
            answers=checked,
            verdict=verdict,
            note=note,
            correction=correction,
        )
        AuditCase.objects.filter(pk=case.pk).update(
            status=CaseStatus.ADJUDICATED, settled_at=timezone.now()
        )
        audit_item_settle(item=item, verdict=verdict, note=note, actor=actor)
        decision_record(
            action="reviews.rubric.adjudicated",
            actor=actor,
            task_id=item.task_id,
            subject=f"audit item {item.pk}: {item.tool}, rubric {case.rubric.name}",
            reason=note,
            policy_version_number=item.policy_version_number,
            detail={
                "item": item.pk,
                "case": case.pk,
                "answers": checked,
                "verdict": verdict,
                "correction": bool(correction),
            },
            via=via,
        )
        case.refresh_from_db()
    return case
