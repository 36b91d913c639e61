"""The policy editor pages: policies and versions, the draft editor, diff, publish, revert, dry-run.

Every view is for policy admins only, checked on the server (`policies.edit_policy`, through
`agentops.plumbing.web.permission_required`; the project's one web layer, and the only import from
outside this app). Views are
thin: parse with a form, call one service or selector, render a page or its htmx fragment from the
same URL. Draft edits answer with the editor fragment (validation messages included) to htmx and
with a redirect otherwise; publish and revert redirect to the new version.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext, pgettext
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from agentops.plumbing.web import (
    AuthenticatedHttpRequest,
    HtmxHttpRequest,
    permission_required,
    render_page,
    wants_fragment,
)
from policies.diff import spec_diff
from policies.engine import Rule, ValidationMessage
from policies.errors import PolicyError, PolicyInvalid
from policies.forms import (
    ChangeNoteForm,
    DiffForm,
    DraftCreateForm,
    DryRunForm,
    MoveForm,
    RuleForm,
    SettingsForm,
)
from policies.models import Policy, PolicyRule, PolicyVersion
from policies.phrases import shown
from policies.selectors import (
    policy_change_list,
    policy_list,
    policy_spec_of,
    policy_version_active,
    policy_version_dry_run,
    policy_version_get,
    policy_version_list,
    policy_version_validate,
    rule_from_row,
)
from policies.services import (
    policy_draft_create,
    policy_draft_discard,
    policy_draft_settings_update,
    policy_publish,
    policy_revert,
    policy_rule_add,
    policy_rule_delete,
    policy_rule_move,
    policy_rule_update,
)

policy_admin_required = permission_required(
    "policies.edit_policy", refusal=gettext_lazy("only policy admins may view or change policies")
)


@dataclass
class RuleRow:
    """A rule as the editor shows it: the row, its engine form, and its validation messages."""

    row: PolicyRule
    rule: Rule
    messages: list[ValidationMessage] = field(default_factory=list)

    @property
    def number(self) -> int:
        return self.row.position + 1


def _version(version_id: int) -> PolicyVersion:
    try:
        return policy_version_get(version_id)
    except PolicyVersion.DoesNotExist:
        raise Http404(f"no policy version {version_id}") from None


def _policy(policy_id: int) -> Policy:
    try:
        return Policy.objects.get(pk=policy_id)
    except Policy.DoesNotExist:
        raise Http404(f"no policy {policy_id}") from None


def _rule(version: PolicyVersion, rule_id: int) -> PolicyRule:
    try:
        return PolicyRule.objects.get(pk=rule_id, version=version)
    except PolicyRule.DoesNotExist:
        raise Http404(f"no rule {rule_id} in this version") from None


def _version_context(
    version: PolicyVersion,
    *,
    form: RuleForm | None = None,
    editing: PolicyRule | None = None,
    publish_form: ChangeNoteForm | None = None,
    settings_form: SettingsForm | None = None,
    error: str = "",
) -> dict[str, Any]:
    rows = list(PolicyRule.objects.filter(version=version).order_by("position"))
    messages = policy_version_validate(version)
    by_position: dict[int, list[ValidationMessage]] = {}
    for message in messages:
        by_position.setdefault(message.position or 0, []).append(message)
    active = policy_version_active(version.policy.name)
    if editing is not None:
        action = reverse("policies:rule_edit", args=[version.pk, editing.pk])
    else:
        action = reverse("policies:rule_add", args=[version.pk])
    return {
        "policy": version.policy,
        "version": version,
        "is_active": active is not None and active.pk == version.pk,
        "rows": [
            RuleRow(row, rule_from_row(row), by_position.get(row.position + 1, [])) for row in rows
        ],
        # Not "messages": that name is the messages framework's, which base.html shows as text.
        "validation": messages,
        "general_messages": by_position.get(0, []),
        "errors": [m for m in messages if m.is_error],
        "form": form or RuleForm(rule_count=len(rows)),
        "editing": editing,
        "form_action": action,
        "publish_form": publish_form or ChangeNoteForm(),
        "settings_form": settings_form
        or SettingsForm(initial={"sensitive_systems": ", ".join(version.sensitive_systems)}),
        "revert_form": ChangeNoteForm(),
        "change_preview": _change_preview(version, active),
        "error": error,
        "changes": [c for c in policy_change_list(version.policy) if c.version_id == version.pk],
    }


def _change_preview(version: PolicyVersion, active: PolicyVersion | None) -> str:
    """What publishing (or reverting to) `version` changes against the active version, in the
    reader's language."""
    if active is None:
        return _("There is no active version: this one becomes the first.")
    if active.pk == version.pk:
        return ""
    counts = spec_diff(policy_spec_of(active), policy_spec_of(version)).counts()
    said = {
        "added": _("%(n)s added"),
        "removed": _("%(n)s removed"),
        "changed": _("%(n)s changed"),
        "moved": _("%(n)s moved"),
    }
    parts = [said[k] % {"n": counts[k]} for k in said if counts[k]]
    changes = pgettext("list separator", ", ").join(parts) if parts else _("no rule changes")
    return _(
        "Compared with the active %(version)s: %(changes)s (see the diff and the dry-run)."
    ) % {
        "version": shown(active.label),
        "changes": changes,
    }


def _editor_response(
    request: HtmxHttpRequest, version: PolicyVersion, *, status: int = 200, **context: Any
) -> HttpResponse:
    """The editor fragment to htmx, or the whole version page (after a failed plain POST)."""
    return render_page(
        request,
        "policies/version_detail.html",
        _version_context(version, **context),
        fragment="draft_editor",
        status=status,
    )


def _after_edit(request: HtmxHttpRequest, version: PolicyVersion) -> HttpResponse:
    if wants_fragment(request):
        return _editor_response(request, _version(version.pk))
    return redirect("policies:version_detail", version_id=version.pk)


def _go(request: HtmxHttpRequest, url: str) -> HttpResponse:
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


# -- pages ----------------------------------------------------------------------------------------


@policy_admin_required
@require_GET
def index(request: AuthenticatedHttpRequest) -> HttpResponse:
    policies = list(policy_list())
    actives = {p.pk: policy_version_active(p.name) for p in policies}
    items = [
        {
            "policy": p,
            "active": actives[p.pk],
            "drafts": [v for v in p.versions.all() if v.is_draft],
            "published": sum(1 for v in p.versions.all() if v.number is not None),
        }
        for p in policies
    ]
    return render(request, "policies/index.html", {"items": items})


@policy_admin_required
@require_GET
def policy_detail(request: AuthenticatedHttpRequest, policy_id: int) -> HttpResponse:
    policy = _policy(policy_id)
    versions = policy_version_list(policy)
    active = policy_version_active(policy.name)
    published = [v for v in versions if v.number is not None]
    initial = {}
    if len(published) >= 2:
        initial = {"a": published[1].pk, "b": published[0].pk}
    context = {
        "policy": policy,
        "versions": versions,
        "active": active,
        "changes": policy_change_list(policy),
        "diff_form": DiffForm(initial=initial, versions=versions),
    }
    return render(request, "policies/policy_detail.html", context)


@policy_admin_required
@require_GET
def version_detail(request: AuthenticatedHttpRequest, version_id: int) -> HttpResponse:
    version = _version(version_id)
    return render(request, "policies/version_detail.html", _version_context(version))


@policy_admin_required
@require_GET
def version_diff(request: AuthenticatedHttpRequest, policy_id: int) -> HttpResponse:
    policy = _policy(policy_id)
    versions = policy_version_list(policy)
    form = DiffForm(request.GET or None, versions=versions)
    diff = before = after = None
    if form.is_valid():
        by_id = {v.pk: v for v in versions}
        before, after = by_id[form.cleaned_data["a"]], by_id[form.cleaned_data["b"]]
        diff = spec_diff(policy_spec_of(before), policy_spec_of(after))
    context = {"policy": policy, "form": form, "diff": diff, "before": before, "after": after}
    return render_page(request, "policies/diff.html", context, fragment="diff")


@policy_admin_required
@require_GET
def version_dry_run(request: AuthenticatedHttpRequest, version_id: int) -> HttpResponse:
    version = _version(version_id)
    form = DryRunForm(request.GET or {"days": 7})
    days = form.cleaned_data["days"] if form.is_valid() else 7
    result = policy_version_dry_run(version, days=days)
    context = {
        "policy": version.policy,
        "version": version,
        "form": form,
        "result": result,
        "errors": [m for m in policy_version_validate(version) if m.is_error],
    }
    return render_page(request, "policies/dry_run.html", context, fragment="dry_run")


# -- writes ---------------------------------------------------------------------------------------


@policy_admin_required
@require_POST
def draft_create(request: AuthenticatedHttpRequest, policy_id: int) -> HttpResponse:
    policy = _policy(policy_id)
    form = DraftCreateForm(request.POST)
    source = None
    if form.is_valid() and form.cleaned_data["from_version"]:
        source = PolicyVersion.objects.filter(
            pk=form.cleaned_data["from_version"], policy=policy
        ).first()
        if source is None:
            raise Http404("no such version of this policy")
    draft = policy_draft_create(policy=policy, author=request.user, from_version=source)
    return _go(request, reverse("policies:version_detail", args=[draft.pk]))


@policy_admin_required
@require_POST
def rule_add(request: AuthenticatedHttpRequest, version_id: int) -> HttpResponse:
    version = _version(version_id)
    form = RuleForm(request.POST, rule_count=version.rules.count())
    if form.is_valid():
        try:
            policy_rule_add(
                draft=version,
                author=request.user,
                fields=form.rule_fields(),
                position=form.position(),
            )
        except PolicyError as exc:
            form.add_error(None, exc.message)
        else:
            return _after_edit(request, version)
    return _editor_response(request, version, form=form, status=_status(request))


@policy_admin_required
@require_http_methods(["GET", "POST"])
def rule_edit(request: AuthenticatedHttpRequest, version_id: int, rule_id: int) -> HttpResponse:
    version = _version(version_id)
    rule = _rule(version, rule_id)
    if request.method == "GET":
        return _editor_response(request, version, form=RuleForm.for_rule(rule), editing=rule)
    form = RuleForm(request.POST)
    if form.is_valid():
        try:
            policy_rule_update(rule=rule, author=request.user, fields=form.rule_fields())
        except PolicyError as exc:
            form.add_error(None, exc.message)
        else:
            return _after_edit(request, version)
    return _editor_response(request, version, form=form, editing=rule, status=_status(request))


@policy_admin_required
@require_POST
def rule_delete(request: AuthenticatedHttpRequest, version_id: int, rule_id: int) -> HttpResponse:
    version = _version(version_id)
    try:
        policy_rule_delete(rule=_rule(version, rule_id), author=request.user)
    except PolicyError as exc:
        return _editor_response(request, version, error=exc.message, status=_status(request))
    return _after_edit(request, version)


@policy_admin_required
@require_POST
def rule_move(request: AuthenticatedHttpRequest, version_id: int, rule_id: int) -> HttpResponse:
    version = _version(version_id)
    rule = _rule(version, rule_id)
    form = MoveForm(request.POST)
    if not form.is_valid():
        return _editor_response(
            request, version, error=_("give a position of 0 or more"), status=_status(request)
        )
    try:
        policy_rule_move(rule=rule, author=request.user, position=form.cleaned_data["position"])
    except PolicyError as exc:
        return _editor_response(request, version, error=exc.message, status=_status(request))
    return _after_edit(request, version)


@policy_admin_required
@require_POST
def version_settings(request: AuthenticatedHttpRequest, version_id: int) -> HttpResponse:
    version = _version(version_id)
    form = SettingsForm(request.POST)
    if form.is_valid():
        try:
            policy_draft_settings_update(
                draft=version, author=request.user, sensitive_systems=form.systems()
            )
        except PolicyError as exc:
            form.add_error(None, exc.message)
        else:
            return _after_edit(request, version)
    return _editor_response(request, version, settings_form=form, status=_status(request))


@policy_admin_required
@require_POST
def version_publish(request: AuthenticatedHttpRequest, version_id: int) -> HttpResponse:
    version = _version(version_id)
    form = ChangeNoteForm(request.POST)
    if form.is_valid():
        try:
            published = policy_publish(
                draft=version, author=request.user, change_note=form.cleaned_data["change_note"]
            )
        except PolicyInvalid as exc:
            count = len(exc.messages)
            form.add_error(
                None,
                ngettext(
                    "Not published: the draft has %(count)s validation message; fix the errors "
                    "listed above.",
                    "Not published: the draft has %(count)s validation messages; fix the errors "
                    "listed above.",
                    count,
                )
                % {"count": count},
            )
        except PolicyError as exc:
            form.add_error(None, exc.message)
        else:
            return _go(request, reverse("policies:version_detail", args=[published.pk]))
    return _editor_response(
        request, _version(version.pk), publish_form=form, status=_status(request)
    )


@policy_admin_required
@require_POST
def version_revert(request: AuthenticatedHttpRequest, version_id: int) -> HttpResponse:
    version = _version(version_id)
    form = ChangeNoteForm(request.POST)
    if form.is_valid():
        try:
            reverted = policy_revert(
                policy=version.policy,
                to_version=version,
                author=request.user,
                change_note=form.cleaned_data["change_note"],
            )
        except PolicyError as exc:
            form.add_error(None, exc.message)
        else:
            return redirect("policies:version_detail", version_id=reverted.pk)
    context = _version_context(version)
    context["revert_form"] = form
    return render(request, "policies/version_detail.html", context, status=400)


@policy_admin_required
@require_POST
def version_discard(request: AuthenticatedHttpRequest, version_id: int) -> HttpResponse:
    """Discard a draft (confirmed by a checkbox in the form); back to the policy."""
    version = _version(version_id)
    if request.POST.get("confirm") != "on":
        return _editor_response(
            request,
            version,
            error=_("Tick the box to confirm that you discard this draft."),
            status=_status(request),
        )
    try:
        policy_draft_discard(draft=version, author=request.user)
    except PolicyError as exc:
        return _editor_response(request, version, error=exc.message, status=_status(request))
    return _go(request, reverse("policies:policy_detail", args=[version.policy_id]))


def _status(request: HtmxHttpRequest) -> int:
    # htmx swaps only 2xx responses by default; a plain form post learns of the failure by 400.
    return 200 if wants_fragment(request) else 400
