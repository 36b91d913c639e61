"""The one-way doors between the apps: policies <- agentops <- reviews.

`policies` imports no other app (only `agentops.web`, the project's web shell, which imports only
Django, django-htmx and the standard library); `agentops` imports nothing from `reviews` except in
the project shell (its settings, its URL modules and the test settings); `reviews` may import both.
The same holds in templates: a template of `agentops` or `policies` loads no tag library, and
includes or extends no template, of an app it may not import. Every .py file of each app is parsed
(lazy imports inside functions count), and so is every template under `templates/agentops` and
`templates/policies`.

The development tooling (`agentops/dev/`) is apart: the simulated services import nothing of the
project, the product imports nothing of it but the embedded servers, and production settings
install none of its apps, commands or URLs.
"""

from __future__ import annotations

import ast
import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
APPS = ("policies", "agentops", "reviews")
# Which apps each app may import (itself included).
MAY_IMPORT = {
    "policies": {"policies"},
    "agentops": {"agentops", "policies"},
    "reviews": {"reviews", "agentops", "policies"},
}
# Modules an app may import although their app is off limits to it.
SHELL_MODULES = {"policies": {"agentops.web"}, "agentops": set(), "reviews": set()}
# Files of the project shell that wire every app together.
SHELL_FILES = {"agentops/settings.py", "agentops/test_settings.py", "agentops/urls.py"}


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, at module level or inside functions: `from a import b`
    counts as `a.b` (b may be a module) and `import_module("a.b")` as `a.b`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
    return names


def forbidden_imports(app: str, path: Path) -> set[str]:
    allowed_apps = MAY_IMPORT[app]
    shell = SHELL_MODULES[app]
    found = set()
    for name in imported_modules(path):
        top = name.split(".")[0]
        if top not in APPS or top in allowed_apps:
            continue
        if any(name == module or name.startswith(f"{module}.") for module in shell):
            continue
        found.add(name)
    return found


def _sources(app: str) -> list[Path]:
    return sorted(
        path
        for path in (ROOT / app).rglob("*.py")
        if str(path.relative_to(ROOT)) not in SHELL_FILES
    )


@pytest.mark.parametrize("app", APPS)
def test_an_app_imports_only_the_apps_below_it(app: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in _sources(app)
        if (found := forbidden_imports(app, path))
    }

    assert offenders == {}


def test_the_web_shell_imports_only_django_htmx_and_the_standard_library() -> None:
    roots = {m.split(".")[0] for m in imported_modules(ROOT / "agentops" / "web.py")}

    assert roots <= {"__future__", "collections", "functools", "json", "typing"} | {
        "django",
        "django_htmx",
    }


def test_the_import_scan_sees_lazy_from_and_dynamic_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from agentops.web import page\n"
        "from agentops import web\n"
        "def f():\n"
        "    from reviews.services import gate_approve\n"
        "    import reviews.models\n"
        "    importlib.import_module('reviews.selectors')\n"
        "    from agentops import models\n"
    )

    assert forbidden_imports("agentops", sample) == {
        "reviews.services.gate_approve",
        "reviews.models",
        "reviews.selectors",
    }
    assert forbidden_imports("policies", sample) == {
        "reviews.services.gate_approve",
        "reviews.models",
        "reviews.selectors",
        "agentops.models",
    }


# -- templates ----------------------------------------------------------------------------------

TAG = re.compile(r"{%-?\s*(load|include|extends)\s+(.*?)\s*-?%}", re.S)


def _libraries() -> dict[str, str]:
    """Tag library name -> the app that provides it."""
    return {
        path.stem: app
        for app in APPS
        for path in (ROOT / app).glob("templatetags/*.py")
        if path.stem != "__init__"
    }


def template_crossings(app: str, path: Path, libraries: dict[str, str]) -> list[str]:
    """The `{% load %}` of another app's tag library and the `{% include %}` / `{% extends %}`
    of another app's template that `app` may not depend on."""
    allowed = MAY_IMPORT[app]
    found = []
    for tag, rest in TAG.findall(path.read_text()):
        words = rest.split()
        if tag == "load":
            loaded = [words[-1]] if "from" in words else words
            found += [
                f"load {name}"
                for name in loaded
                if name in libraries and libraries[name] not in allowed
            ]
        elif words:
            target = words[0].strip("\"'")
            top = target.split("/")[0]
            if top in APPS and top not in allowed:
                found.append(f"{tag} {target}")
    return found


@pytest.mark.parametrize("app", ["agentops", "policies"])
def test_an_app_s_templates_use_only_the_apps_below_it(app: str) -> None:
    libraries = _libraries()
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in sorted((ROOT / "templates" / app).rglob("*.html"))
        if (found := template_crossings(app, path, libraries))
    }

    assert offenders == {}


def test_the_template_scan_sees_load_include_and_extends(tmp_path: Path) -> None:
    sample = tmp_path / "page.html"
    sample.write_text(
        '{% extends "base.html" %}{% load agentops_tags reviews_tags %}'
        "{% load seconds from reviews_tags %}{% load static %}"
        '{% include "reviews/_partials/task_review.html" with x=1 %}'
        '{% include "components/field.html" %}'
    )
    libraries = {"agentops_tags": "agentops", "reviews_tags": "reviews"}

    assert template_crossings("agentops", sample, libraries) == [
        "load reviews_tags",
        "load reviews_tags",
        "include reviews/_partials/task_review.html",
    ]


# -- the development tools ----------------------------------------------------------------------

SIM = ROOT / "agentops" / "dev" / "sim"
# Production modules may use this one module of the development package: the settings ask it for
# the embedded servers' URLs, and the `agentops` command for `embedded status|stop`.
DEV_MODULES_IN_PRODUCTION = {"agentops.dev.embedded"}


def test_the_simulated_services_import_only_django_the_standard_library_and_themselves() -> None:
    offenders = {
        str(path.relative_to(ROOT)): outside
        for path in sorted(SIM.rglob("*.py"))
        if (
            outside := {
                name
                for name in imported_modules(path)
                if name.split(".")[0] not in sys.stdlib_module_names | {"__future__", "django"}
                and not name.startswith("agentops.dev.sim.")
            }
        )
    }

    assert len(list(SIM.rglob("*.py"))) >= 10  # the scan reads the app (migrations included)
    assert offenders == {}


def test_the_product_uses_nothing_of_the_development_package_but_the_embedded_servers() -> None:
    offenders = {
        str(path.relative_to(ROOT)): found
        for app in APPS
        for path in sorted((ROOT / app).rglob("*.py"))
        if not path.is_relative_to(ROOT / "agentops" / "dev")
        if (
            found := {
                name
                for name in imported_modules(path)
                if name.startswith("agentops.dev")
                and not any(name.startswith(module) for module in DEV_MODULES_IN_PRODUCTION)
            }
        )
    }

    assert offenders == {}


# What a process with `settings_module` and `environment` installs, lists as commands, resolves
# for a simulated service's URL, and has imported of the development package once it is set up.
SETTINGS_PROBE = """
import json, sys
import django
django.setup()
from django.apps import apps
from django.core.management import get_commands
from django.urls import Resolver404, resolve
try:
    match = resolve("/sim/orders/lookup")
    sim_view = f"{match.func.__module__}.{match.func.__name__}"
except Resolver404:
    sim_view = None
print(json.dumps({
    "apps": [config.name for config in apps.get_app_configs()],
    "commands": sorted(get_commands()),
    "sim_view": sim_view,
    "dev_modules": sorted(name for name in sys.modules if name.startswith("agentops.dev")),
}))
"""
DEV_COMMANDS = {"bench", "chaos", "demo_scenario", "runstack", "seed_demo", "sim_fault"}


def settings_probe(settings_module: str, **environment: str) -> dict[str, Any]:
    """Load `settings_module` in a child process with only `environment` of ours (no AGENTOPS_ or
    DJANGO_ variable of this test run leaks in). No server is contacted: setting up Django and
    resolving a URL open no connection."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AGENTOPS_", "DJANGO_", "DATABASE_", "REDIS_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE=settings_module,
        DATABASE_URL="postgres://nobody@127.0.0.1:9/never_connected",
        REDIS_URL="redis://127.0.0.1:9/0",
        **environment,
    )
    result = subprocess.run(
        [sys.executable, "-c", SETTINGS_PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def test_production_settings_install_no_development_app_command_or_url() -> None:
    production = settings_probe(
        "agentops.settings",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_ALLOWED_HOSTS="agentops.example.com",
    )

    assert [app for app in production["apps"] if app.startswith("agentops.dev")] == []
    assert "agentops" in production["apps"] and "reviews" in production["apps"]
    assert DEV_COMMANDS.isdisjoint(production["commands"])
    assert {"worker", "sweeper", "migrate"} <= set(production["commands"])
    assert production["sim_view"] is None
    assert production["dev_modules"] == ["agentops.dev", "agentops.dev.embedded"]


def test_development_settings_install_the_development_apps_and_the_sim_process_serves_sim() -> None:
    development = settings_probe("agentops.settings", AGENTOPS_DEV="1")
    sim_process = settings_probe("agentops.dev.sim_settings", AGENTOPS_DEV="1")

    assert {"agentops.dev", "agentops.dev.sim"} <= set(development["apps"])
    assert set(development["commands"]) >= DEV_COMMANDS
    assert development["sim_view"] is None  # the product's URLconf never mounts them
    assert "agentops.dev.sim" in sim_process["apps"]
    assert sim_process["sim_view"] == "agentops.dev.sim.views.call"
