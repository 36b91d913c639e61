"""The import rule: `policies` imports no other app; its evaluator, dry-run and diff are pure."""

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

    assert foreign == set()


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
