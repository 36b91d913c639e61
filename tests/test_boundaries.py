"""The one-way doors between the apps (policies <- agentops <- reviews) and inside them.

`policies` imports no other app (only `agentops.plumbing.web`, the project's web shell, which
imports only Django, django-htmx, django-rules and the standard library); `agentops` imports nothing
from `reviews` except in the project shell (its settings, its URL modules and the test settings);
`reviews` may import both. The same holds in templates: a template of `agentops` or `policies`
loads no tag library, and includes or extends no template, of an app it may not import. Every .py
file of each app is parsed (lazy imports inside functions count), and so is every template under
`templates/agentops` and `templates/policies`.

Inside `agentops` the engine (`agentops/engine/`) is the bottom layer: it imports nothing of the
services, selectors, views, forms and admin above it, nor of the development tooling. And no
module of the project takes part in an import cycle (lazy imports inside functions count: they
only hide a cycle), so each layer can be read, tested and changed from the bottom up.

Agents are declared through one door: every module of `agentops/agents/` (and of the example
agent package under `tests/example_agent/`, which stands for any other installed package)
imports of the project only `agentops.sdk` and the agents package itself; the engine never imports
either.

The development tooling (`agentops/dev/`) is apart: the simulated services import nothing of the
project, the product imports nothing of it but the embedded servers, and production settings
install none of its apps, commands or URLs.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterable, Iterator
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
SHELL_MODULES = {"policies": {"agentops.plumbing.web"}, "agentops": set(), "reviews": set()}
# Files of the project shell that wire every app together.
SHELL_FILES = {"agentops/settings.py", "agentops/test_settings.py", "agentops/urls.py"}


def parsed(path: Path) -> ast.Module:
    """The syntax tree of `path`, parsed once per text in the session (several scans read the
    same modules; a changed file is parsed again). Read only: the trees are shared."""
    return _parsed(path.read_text(), str(path))


@functools.cache
def _parsed(text: str, filename: str) -> ast.Module:
    return ast.parse(text, filename=filename)


@pytest.fixture(autouse=True, scope="module")
def _parse_once() -> Iterator[None]:
    """The trees (some 50 MB for the project) are kept while this module's tests run, no longer."""
    yield
    _parsed.cache_clear()


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, at module level or inside functions: `from a import b`
    counts as `a.b` (b may be a module) and `import_module("a.b")` as `a.b`."""
    tree = parsed(path)
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


def test_the_web_shell_imports_only_django_htmx_rules_and_the_standard_library() -> None:
    # django-rules: the one way every app declares its roles and permissions is in the shell.
    # django-stubs-ext: Django's types (a lazy translated refusal), for the type checker only.
    roots = {m.split(".")[0] for m in imported_modules(ROOT / "agentops" / "plumbing" / "web.py")}

    assert roots <= {"__future__", "collections", "functools", "json", "typing"} | {
        "django",
        "django_htmx",
        "django_stubs_ext",
        "rules",
    }


# What the process plumbing may use of the project besides itself: the two pure rules it applies
# on the way out (spans are exported redacted; the cost counter prices tokens as the runner does).
PLUMBING_USES = {"agentops.engine.redaction", "agentops.engine.costs"}


def run_time_imports(path: Path) -> set[str]:
    """The modules `path` imports when it runs: `imported_modules` less the imports under
    `if TYPE_CHECKING:`, which only name types in annotations."""
    typing_only = {
        name
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
        for inner in node.body
        if isinstance(inner, ast.ImportFrom) and inner.module
        for name in (f"{inner.module}.{alias.name}" for alias in inner.names)
    }
    return imported_modules(path) - typing_only


def test_the_plumbing_imports_nothing_of_the_domain_but_its_two_rules() -> None:
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in sorted((ROOT / "agentops" / "plumbing").rglob("*.py"))
        if (
            found := {
                name
                for name in run_time_imports(path)
                if name.split(".")[0] in APPS
                and not name.startswith("agentops.plumbing.")
                and not any(name.startswith(f"{rule}.") or name == rule for rule in PLUMBING_USES)
            }
        )
    }

    assert offenders == {}


def test_the_import_scan_sees_lazy_from_and_dynamic_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from agentops.plumbing.web import page\n"
        "from agentops.plumbing import web\n"
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


# -- layers inside an app, and import cycles ----------------------------------------------------

# What the engine may not import: the layers above it in `agentops` and the development tooling
# (`agentops.dev` is where the tooling lives; the other names are where it lived).
ABOVE_THE_ENGINE = (
    "agentops.services",
    "agentops.selectors",
    "agentops.views",
    "agentops.forms",
    "agentops.admin",
    "agentops.dev",
    "agentops.sim",
    "agentops.chaos",
    "agentops.scenarios",
    "agentops.devstack",
    "agentops.embedded",
    "agentops.benchmarks",
    # The agent author's door and the agents behind it sit above the engine too.
    "agentops.sdk",
    "agentops.agents",
)
# Import cycles known and accepted, each a sorted tuple of module names with the reason. Empty:
# a new cycle fails the test below.
KNOWN_CYCLES: set[tuple[str, ...]] = set()


def project_modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Module name -> file, for every .py file of `packages` under `root` but their migrations."""
    modules = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            if "migrations" in parts:
                continue
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """`name`, or the nearest package or module above it that is one of `modules`."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def module_imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of `modules` that module `name` imports, at module level or inside
    functions: relative imports resolved; `from p import x` is `p.x` when that is a module, else
    `p`; `import p.q` and `import_module("p.q")` are `p.q` (or the nearest module above)."""
    tree = parsed(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(_known(alias.name, modules) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                full = f"{source}.{alias.name}"
                found.add(full if full in modules else _known(source, modules))
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(_known(node.args[0].value, modules))
    return {module for module in found if module is not None and module != name}


def import_graph(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    modules = project_modules(root, packages)
    return {name: module_imports(name, path, modules) for name, path in modules.items()}


def import_cycles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan, iterative), each a
    sorted tuple: every module in one imports, through the others, every other one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: set[tuple[str, ...]] = set()
    for start in sorted(graph):
        if start in index:
            continue
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        work = [(start, iter(sorted(graph[start])))]
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.add(tuple(sorted(component)))
    return cycles


def test_the_engine_imports_nothing_above_it() -> None:
    modules = project_modules(ROOT, APPS)
    engine = {name: path for name, path in modules.items() if name.startswith("agentops.engine.")}
    offenders = {
        name: sorted(
            imported
            for imported in module_imports(name, path, modules)
            if any(
                imported == above or imported.startswith(f"{above}.") for above in ABOVE_THE_ENGINE
            )
        )
        for name, path in sorted(engine.items())
    }

    assert len(engine) > 20  # the scan sees the engine's modules
    assert {name: found for name, found in offenders.items() if found} == {}


# The engine's front door: the apps above `agentops` use the engine only through the package
# `agentops.engine` (its `__init__` names what it exposes in `__all__`); its modules are private.
FRONT_DOOR = "agentops.engine"
THROUGH_THE_FRONT_DOOR = ("reviews", "policies")


def engine_back_doors(
    name: str, path: Path, modules: dict[str, Path], *, door: str = FRONT_DOOR
) -> set[str]:
    """The modules under `door` that module `name` imports (lazy imports count), and the names
    it imports from `door` that the door does not expose (`__all__` of its `__init__`)."""
    exposed = set(_dunder_all(modules[door]))
    found = {
        imported
        for imported in module_imports(name, path, modules)
        if imported.startswith(f"{door}.")
    }
    tree = parsed(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == door and not node.level:
            found.update(
                f"{door}.{alias.name}" for alias in node.names if alias.name not in exposed
            )
    return found


def _dunder_all(path: Path) -> list[str]:
    """The names a module lists in its `__all__` (a literal list or tuple of strings)."""
    for node in parsed(path).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            return [
                str(item.value)
                for item in getattr(node.value, "elts", [])
                if isinstance(item, ast.Constant)
            ]
    return []


def test_reviews_and_policies_use_the_engine_only_through_its_front_door() -> None:
    modules = project_modules(ROOT, APPS)
    above = {
        name: path for name, path in modules.items() if name.split(".")[0] in THROUGH_THE_FRONT_DOOR
    }
    offenders = {
        name: sorted(found)
        for name, path in sorted(above.items())
        if (found := engine_back_doors(name, path, modules))
    }

    assert len(above) > 50 and len(_dunder_all(modules[FRONT_DOOR])) > 20
    assert offenders == {}


def test_the_front_door_scan_sees_engine_modules_and_names_the_door_does_not_expose(
    tmp_path: Path,
) -> None:
    (tmp_path / "app" / "engine").mkdir(parents=True)
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "engine" / "__init__.py").write_text(
        "from app.engine.gates import gate_decide, gate_transition\n__all__ = ['gate_decide']\n"
    )
    (tmp_path / "app" / "engine" / "gates.py").write_text("")
    (tmp_path / "app" / "engine" / "sweeper.py").write_text("")
    (tmp_path / "room.py").write_text(
        "from app.engine import gate_decide, gate_transition\n"
        "from app.engine import sweeper\n"
        "def f():\n    from app.engine.gates import gate_transition\n"
        "    import app.engine.gates\n"
    )
    modules = {**project_modules(tmp_path, ["app"]), "room": tmp_path / "room.py"}

    assert engine_back_doors("room", tmp_path / "room.py", modules, door="app.engine") == {
        "app.engine.gate_transition",
        "app.engine.gates",
        "app.engine.sweeper",
    }
    (tmp_path / "room.py").write_text("from app.engine import gate_decide\n")
    assert engine_back_doors("room", tmp_path / "room.py", modules, door="app.engine") == set()


def test_no_module_of_the_project_takes_part_in_an_import_cycle() -> None:
    graph = import_graph(ROOT, APPS)

    assert len(graph) > 100  # the scan sees the project's modules, not an empty tree
    assert import_cycles(graph) - KNOWN_CYCLES == set()
    assert KNOWN_CYCLES - import_cycles(graph) == set()  # a cycle fixed leaves the list


def test_the_cycle_scan_resolves_relative_lazy_and_from_imports(tmp_path: Path) -> None:
    package = tmp_path / "app"
    (package / "engine").mkdir(parents=True)
    (package / "migrations").mkdir()
    for name in ("__init__", "engine/__init__", "migrations/__init__", "migrations/0001_x"):
        (package / f"{name}.py").write_text("from app import services\n")
    (package / "services.py").write_text("from .engine import core\nfrom . import helpers\n")
    (package / "helpers.py").write_text("import app.engine.core\n")
    (package / "engine" / "core.py").write_text(
        "from .. import models\nfrom app.engine import VALUE\n"
        "def f():\n    from ..services import task_create\n"
    )
    (package / "engine" / "leaf.py").write_text("from app.engine.core import f\n")
    (package / "models.py").write_text("import json\n")

    graph = import_graph(tmp_path, ["app"])

    assert "app.migrations.0001_x" not in graph
    assert graph["app.services"] == {"app.engine.core", "app.helpers"}
    assert graph["app.engine.core"] == {"app.models", "app.engine", "app.services"}
    assert graph["app.engine.leaf"] == {"app.engine.core"}
    assert import_cycles(graph) == {
        ("app.engine", "app.engine.core", "app.helpers", "app.services"),
    }


def test_the_cycle_scan_finds_every_component_and_no_acyclic_one() -> None:
    graph = {
        "a": {"b"},
        "b": {"c"},
        "c": {"a", "d"},
        "d": {"e"},
        "e": {"d"},
        "f": {"a"},
        "g": set(),
    }

    assert import_cycles(graph) == {("a", "b", "c"), ("d", "e")}
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == set()


# -- the agent author's door -------------------------------------------------------------------

SDK = "agentops.sdk"
AGENTS_PACKAGE = "agentops.agents"
EXAMPLE_AGENT = ROOT / "tests" / "example_agent"


def agent_back_doors(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the project that a module of agents imports besides the SDK and the
    agents package (lazy, relative and dynamic imports count)."""
    return {
        imported
        for imported in module_imports(name, path, modules)
        if imported != SDK
        and imported != AGENTS_PACKAGE
        and not imported.startswith(f"{AGENTS_PACKAGE}.")
    }


def test_the_shipped_agents_import_nothing_of_the_project_but_the_sdk() -> None:
    modules = project_modules(ROOT, APPS)
    agents = {
        name: path
        for name, path in modules.items()
        if name == AGENTS_PACKAGE or name.startswith(f"{AGENTS_PACKAGE}.")
    }
    offenders = {
        name: sorted(found)
        for name, path in sorted(agents.items())
        if (found := agent_back_doors(name, path, modules))
    }

    assert len(agents) >= 10  # the scan sees the agents package and its modules
    assert offenders == {}
    # Every module declares through the door; the package's __init__ only imports the modules.
    assert {
        name for name, path in agents.items() if SDK not in module_imports(name, path, modules)
    } == {AGENTS_PACKAGE}


def test_the_example_agent_package_imports_nothing_of_the_project_but_the_sdk() -> None:
    modules = {
        **project_modules(ROOT, APPS),
        **project_modules(EXAMPLE_AGENT, ["agentops_example_agent"]),
    }
    example = {
        name: path for name, path in modules.items() if name.startswith("agentops_example_agent")
    }
    offenders = {
        name: sorted(found)
        for name, path in sorted(example.items())
        # Its own modules aside: it may import itself, as the shipped agents do.
        if (found := {m for m in agent_back_doors(name, path, modules) if m not in example})
    }

    assert len(example) >= 2
    assert offenders == {}


def test_the_agent_door_scan_sees_lazy_relative_and_dynamic_imports(tmp_path: Path) -> None:
    package = tmp_path / "agentops"
    (package / "agents").mkdir(parents=True)
    (package / "engine").mkdir()
    for name in (
        "__init__",
        "sdk",
        "models",
        "agents/__init__",
        "agents/remote",
        "engine/__init__",
    ):
        (package / f"{name}.py").write_text("")
    (package / "engine" / "registry.py").write_text("")
    (package / "agents" / "shop.py").write_text(
        "from agentops.sdk import Agent, tool\n"
        "from agentops.agents import remote\n"
        "from . import remote as again\n"
        "def f():\n"
        "    from ..engine import registry\n"
        "    import agentops.models\n"
        "    importlib.import_module('agentops.engine.registry')\n"
        "    from agentops import engine\n"
    )
    modules = project_modules(tmp_path, ["agentops"])

    assert agent_back_doors("agentops.agents.shop", package / "agents" / "shop.py", modules) == {
        "agentops.engine",
        "agentops.engine.registry",
        "agentops.models",
    }


def lazy_door_homes(door: Any) -> list[str]:
    """The names a lazily loading door (`_HOMES`: module -> names) lists, after checking that
    its `__all__`, its table and its TYPE_CHECKING imports agree and that each name loads, on
    first use, as the object its module holds."""
    typed = {
        alias.asname or alias.name
        for node in ast.walk(ast.parse(Path(door.__file__ or "").read_text()))
        if isinstance(node, ast.If)
        for statement in node.body
        if isinstance(statement, ast.ImportFrom)
        for alias in statement.names
    }
    homes = [name for names in door._HOMES.values() for name in names]
    assert set(door.__all__) == set(homes) == typed
    for module, names in door._HOMES.items():
        for name in names:
            assert getattr(door, name) is getattr(__import__(module, fromlist=[name]), name)
    return homes


def test_the_sdk_lists_each_name_once_everywhere_and_loads_it_on_first_use() -> None:
    import agentops.sdk

    homes = lazy_door_homes(agentops.sdk)

    assert len(homes) == len(set(homes)) >= 15


def test_the_sdk_imports_cheaply_and_a_tool_module_needs_no_django_setup() -> None:
    # A tool module of another package (its own unit tests, a type checker's run) imports the
    # SDK without a configured project: the door loads no engine module, and the names a tool
    # needs load neither the models nor the runner.
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; import agentops.sdk; "
            "print(sorted(m for m in sys.modules if m.startswith('agentops.engine')) == []); "
            "from agentops.sdk import Agent, FailureKind, McpServer, ModelRequest, PlanStep, "
            "ToolContext, ToolFailure, register_agent, tool; "
            "print(not {'agentops.models', 'agentops.engine.runner'} & set(sys.modules))",
        ],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]


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


def test_the_front_door_lists_each_name_once_everywhere_and_loads_it_on_first_use() -> None:
    import agentops.engine

    homes = lazy_door_homes(agentops.engine)

    assert len(homes) == len(set(homes)) > 20


def test_an_engine_module_loads_without_django_set_up() -> None:
    # A process that has not set Django up (a benchmark's peer, a digest checked across
    # processes) imports a leaf of the engine; the door must not drag in the models.
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from agentops.engine.jsonvalues import digest; "
            "print(digest({'a': 1}), 'agentops.models' in sys.modules)",
        ],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[1] == "False"
