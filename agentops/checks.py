"""`check --deploy`: what this deployment lacks, named where the operator looks before starting it.

Each agent that is not offered here is one line naming the agent and each setting it needs that is
not set (`agentops.engine.needs`): information, not a failure, since a deployment may leave the
shipped demo agents out on purpose. Settings the production processes need when a feature is used
are warnings: a metrics token without a shared metrics directory (each process would count for
itself, and /metrics would show the one that answers), a metrics directory that is not a
writable directory, the file email backend without its directory (the messages would land in
the working directory), and an identity provider reached over plain HTTP; what single sign-on
leaves to the product (no role mapping, local passwords still on, no sign-out at the provider) is
information. The checks read the process's own configuration and ask no server.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core import checks

from agentops.engine.needs import agents_unavailable
from agentops.oidc import library_setting

FILE_EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"


@checks.register(deploy=True)
def agents_needs_check(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """One message per registered agent that this deployment cannot run, with what it lacks."""
    return [
        checks.Info(
            f"agent {agent.name!r} is not offered: it needs "
            + "; ".join(str(item) for item in missing),
            hint='set what it needs to offer it (docs/operations.md, "Agents and what they '
            'need"); unset, the start form and GET /api/v1/agents leave it out and starting it '
            "is refused",
            id="agentops.I001",
        )
        for agent, missing in agents_unavailable()
    ]


@checks.register(deploy=True)
def metrics_directory_check(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
    if directory:
        if not os.path.isdir(directory) or not os.access(directory, os.W_OK | os.X_OK):
            return [
                checks.Warning(
                    f"PROMETHEUS_MULTIPROC_DIR is {directory!r}, which is not a writable directory",
                    hint="create it empty, shared by the web, worker and sweeper processes of "
                    "this machine, before they start (docs/metrics.md)",
                    id="agentops.W001",
                )
            ]
        return []
    if settings.AGENTOPS.get("METRICS_TOKEN"):
        return [
            checks.Warning(
                "AGENTOPS_METRICS_TOKEN is set but PROMETHEUS_MULTIPROC_DIR is not: each process "
                "counts for itself, and /metrics shows only the counters of the web process "
                "that answers the scrape",
                hint="set PROMETHEUS_MULTIPROC_DIR to an empty directory shared by the web, "
                "worker and sweeper processes of this machine, before they start "
                "(docs/metrics.md)",
                id="agentops.W002",
            )
        ]
    return []


@checks.register(deploy=True)
def email_file_path_check(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    if settings.EMAIL_BACKEND != FILE_EMAIL_BACKEND or os.environ.get("DJANGO_EMAIL_FILE_PATH"):
        return []
    return [
        checks.Warning(
            f"DJANGO_EMAIL_BACKEND is the file backend but DJANGO_EMAIL_FILE_PATH is not set: "
            f"messages go to {settings.EMAIL_FILE_PATH}",
            hint="set DJANGO_EMAIL_FILE_PATH to the directory the messages should be written "
            "to (docs/operations.md)",
            id="agentops.W003",
        )
    ]


@checks.register(deploy=True)
def single_sign_on_check(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """With single sign-on on (agentops.oidc): a provider reached over plain HTTP is a warning
    (codes, tokens and the client secret would cross the network readable); what is left to the
    product rather than the provider is information."""
    config = settings.AGENTOPS.get("OIDC")
    if config is None:
        return []
    urls = {
        "AGENTOPS_OIDC_ISSUER": config["ISSUER"],
        "AGENTOPS_OIDC_AUTHORIZATION_ENDPOINT": library_setting("OIDC_OP_AUTHORIZATION_ENDPOINT"),
        "AGENTOPS_OIDC_TOKEN_ENDPOINT": library_setting("OIDC_OP_TOKEN_ENDPOINT"),
        "AGENTOPS_OIDC_USERINFO_ENDPOINT": library_setting("OIDC_OP_USER_ENDPOINT"),
        "AGENTOPS_OIDC_JWKS_URI": library_setting("OIDC_OP_JWKS_ENDPOINT"),
        "AGENTOPS_OIDC_END_SESSION_ENDPOINT": config["END_SESSION_ENDPOINT"],
    }
    found: list[checks.CheckMessage] = [
        checks.Warning(
            f"{name} is {url!r}: not https",
            hint="reach the identity provider over https: the codes, tokens and the client "
            "secret cross the network in the clear otherwise",
            id="agentops.W004",
        )
        for name, url in urls.items()
        if url.startswith("http://")
    ]
    if not config["GROUPS_MAP"]:
        found.append(
            checks.Info(
                "AGENTOPS_OIDC_GROUPS_MAP is not set: no role follows the provider's groups",
                hint="map provider groups to the product's (docs/operations.md, \"Single "
                'sign-on"), or give roles with `manage.py roles add`',
                id="agentops.I002",
            )
        )
    if settings.AGENTOPS.get("LOCAL_PASSWORDS", True):
        found.append(
            checks.Info(
                "local passwords still sign in beside the identity provider",
                hint="set AGENTOPS_LOCAL_PASSWORDS=false to make the provider the only way in "
                "(people who leave at the provider cannot sign in here with an old password)",
                id="agentops.I003",
            )
        )
    if not config["END_SESSION_ENDPOINT"]:
        found.append(
            checks.Info(
                "AGENTOPS_OIDC_END_SESSION_ENDPOINT is not set: signing out here leaves the "
                "provider's session open",
                hint="set it to the provider's end_session_endpoint (its discovery document) "
                "when it has one",
                id="agentops.I004",
            )
        )
    return found
