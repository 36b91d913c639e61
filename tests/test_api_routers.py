"""Each app mounts its own django-ninja router (`agentops.api.router`: tasks; `reviews.api.router`:
stopped tasks, gates, the audit queue); the project shell (`agentops/urls.py`) assembles them into
the one API under `/api/v1/`."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.urls import resolve
from ninja import Router

from agentops import api as agentops_api
from agentops.urls import api
from reviews import api as reviews_api

ROOT = Path(__file__).resolve().parents[1]
ROUTERS = {"agentops": agentops_api.router, "reviews": reviews_api.router}
# Where the API object is defined and where the project shell builds it.
API_BUILDERS = {"agentops/api.py", "agentops/urls.py"}


def operations(router: Router) -> dict[tuple[str, str], Callable[..., Any]]:
    """(method, path) -> view function, for every operation of `router`."""
    return {
        (method, path): operation.view_func
        for path, view in router.path_operations.items()
        for operation in view.operations
        for method in operation.methods
    }


@pytest.mark.parametrize("app", ROUTERS)
def test_an_app_s_router_serves_only_its_own_views(app: str) -> None:
    views = operations(ROUTERS[app]).values()

    assert views
    assert {view.__module__.split(".")[0] for view in views} == {app}


def test_the_project_api_serves_exactly_the_operations_of_the_apps_routers() -> None:
    schema = api.get_openapi_schema()
    served = {
        (method.upper(), path.removeprefix("/api/v1"))
        for path, methods in schema["paths"].items()
        for method in methods
    }

    assert served == {key for router in ROUTERS.values() for key in operations(router)}


def test_a_fixed_path_of_one_router_is_not_taken_by_a_path_parameter_of_another() -> None:
    assert resolve("/api/v1/tasks/stopped").url_name == "list_stopped_tasks"
    assert resolve("/api/v1/tasks/5").url_name == "get_task"


def test_only_the_project_shell_builds_the_api() -> None:
    builds = re.compile(r"\b(NinjaAPI|AgentopsApi|api_build)\(")
    offenders = sorted(
        str(path.relative_to(ROOT))
        for app in ("policies", "agentops", "reviews")
        for path in (ROOT / app).rglob("*.py")
        if str(path.relative_to(ROOT)) not in API_BUILDERS and builds.search(path.read_text())
    )

    assert offenders == []
