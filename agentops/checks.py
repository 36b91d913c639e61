"""`check --deploy`: what this deployment lacks, named where the operator looks before starting it.

Each agent that is not offered here is one line naming the agent and each setting it needs that is
not set (`agentops.engine.needs`): information, not a failure, since a deployment may leave the
shipped demo agents out on purpose. Settings the production processes need when a feature is used
are warnings: a metrics token without a shared metrics directory (each process would count for
itself, and /metrics would show the one that answers), a metrics directory that is not a
writable directory, and the file email backend without its directory (the messages would land in
the working directory). The checks read the process's own configuration and ask no server.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core import checks

from agentops.engine.needs import agents_unavailable

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
