"""The evaluator, its validation, dry-run and diff of `policies` are pure. (That `policies`
imports no other app is tested with the other apps' doors in `tests/test_boundaries.py`.) Their
sentences are `policies.phrases.Phrase`s: English values, whatever language is active, which a
page translates only when it shows them; that module is the one door to Django they may use."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "policies"
PURE = ("engine.py", "validation.py", "dryrun.py", "diff.py")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


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
        "enum",
        "typing",
        "policies.engine",
        "policies.catalog",
        "policies.phrases",
    }
