"""The import rule: `policies` imports no other app (only the project's web layer,
`agentops.web`, which imports nothing but Django and django-htmx); its evaluator, dry-run and
diff are pure."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "policies"
PURE = ("engine.py", "dryrun.py", "diff.py")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(APP.rglob("*.py")), ids=lambda p: str(p.relative_to(APP)))
def test_policies_imports_no_other_app(path: Path) -> None:
    foreign = {m for m in imported_modules(path) if m.split(".")[0] in {"agentops", "reviews"}}

    assert foreign <= {"agentops.web"}


def test_the_web_layer_imports_only_django_htmx_and_the_standard_library() -> None:
    web = APP.parent / "agentops" / "web.py"

    roots = {m.split(".")[0] for m in imported_modules(web)}

    assert roots <= {"__future__", "collections", "functools", "json", "typing"} | {
        "django",
        "django_htmx",
    }


@pytest.mark.parametrize("name", PURE)
def test_evaluator_dry_run_and_diff_do_not_touch_django(name: str) -> None:
    modules = imported_modules(APP / name)

    assert {m for m in modules if m.split(".")[0] == "django"} == set()
    assert modules <= {
        "__future__",
        "hashlib",
        "math",
        "statistics",
        "collections",
        "collections.abc",
        "dataclasses",
        "typing",
        "policies.engine",
        "policies.catalog",
    }
