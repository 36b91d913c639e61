"""URLs of the policy editor, under /policies/."""

from __future__ import annotations

from django.urls import path

from policies import views

app_name = "policies"
urlpatterns = [
    path("", views.index, name="index"),
    path("<int:policy_id>/", views.policy_detail, name="policy_detail"),
    path("<int:policy_id>/drafts", views.draft_create, name="draft_create"),
    path("<int:policy_id>/diff", views.version_diff, name="version_diff"),
    path("versions/<int:version_id>/", views.version_detail, name="version_detail"),
    path("versions/<int:version_id>/rules", views.rule_add, name="rule_add"),
    path("versions/<int:version_id>/rules/<int:rule_id>", views.rule_edit, name="rule_edit"),
    path(
        "versions/<int:version_id>/rules/<int:rule_id>/delete",
        views.rule_delete,
        name="rule_delete",
    ),
    path("versions/<int:version_id>/rules/<int:rule_id>/move", views.rule_move, name="rule_move"),
    path("versions/<int:version_id>/settings", views.version_settings, name="version_settings"),
    path("versions/<int:version_id>/publish", views.version_publish, name="version_publish"),
    path("versions/<int:version_id>/discard", views.version_discard, name="version_discard"),
    path("versions/<int:version_id>/revert", views.version_revert, name="version_revert"),
    path("versions/<int:version_id>/dry-run", views.version_dry_run, name="version_dry_run"),
]
