"""Statuses are written only where their state machine lives: a scan of every app's source.

Task, step and ledger statuses: the transition code (and the database refuses the rest). Policy
versions: the two services that move a draft (publish, discard). Gates: the engine's one gate
transition. Audit items and notification deliveries: the two review services that record a
person's verdict or a delivery attempt. A rubric review's case: the two services that collect
the reviews and settle a dispute.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django.apps import apps

ROOT = Path(__file__).resolve().parents[2]
APPS = ("agentops", "policies", "reviews")

# path -> the functions allowed to write a status there (None: the whole module).
STATUS_WRITERS: dict[str, frozenset[str] | None] = {
    "agentops/engine/transitions.py": None,
    "policies/services.py": frozenset({"policy_draft_discard", "_publish_locked"}),
    "agentops/engine/gates.py": frozenset({"_gates_moved"}),
    "reviews/services/audit.py": frozenset({"audit_item_settle"}),
    "reviews/services/rubrics.py": frozenset({"rubric_review_submit", "rubric_adjudicate"}),
    "reviews/services/notifications.py": frozenset({"delivery_attempt_record"}),
}
# Calls that write the keywords they are given.
WRITING_CALLS = frozenset({"update", "create", "get_or_create", "update_or_create"})


def _models_by_status() -> tuple[frozenset[str], frozenset[str]]:
    """Names of the model classes with a status field, and of those without (a `.update(**x)`
    on these cannot write a status)."""
    with_status, without = set(), set()
    for model in apps.get_models():
        has = any(f.name == "status" for f in model._meta.get_fields())
        (with_status if has else without).add(model.__name__)
    return frozenset(with_status), frozenset(without - with_status)


def _root(node: ast.expr) -> str | None:
    """The name a call chain starts from: `Task` in `Task.objects.filter(...).update`."""
    while True:
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return node.id if isinstance(node, ast.Name) else None


def _dict_has_status(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Dict) and any(
        isinstance(k, ast.Constant) and k.value == "status" for k in node.keys
    )


class _Scan(ast.NodeVisitor):
    def __init__(self, allowed: frozenset[str] | None) -> None:
        self.allowed = allowed
        self.with_status, self.statusless = _models_by_status()
        self.functions: list[str] = []
        self.lines: list[int] = []

    def _flag(self, node: ast.AST) -> None:
        if self.allowed is not None and not self.allowed.intersection(self.functions):
            self.lines.append(node.lineno)  # type: ignore[attr-defined]

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def _targets(self, targets: list[ast.expr]) -> None:
        if any(isinstance(t, ast.Attribute) and t.attr == "status" for t in targets):
            self._flag(targets[0])

    def visit_Assign(self, node: ast.Assign) -> None:
        self._targets(node.targets)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._targets([node.target])
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._targets([node.target])
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        named = {k.arg for k in node.keywords}
        spread = [k.value for k in node.keywords if k.arg is None]
        defaults = next((k.value for k in node.keywords if k.arg == "defaults"), None)
        if isinstance(func, ast.Attribute) and func.attr in WRITING_CALLS:
            # `**fields` may hold a status unless the rows written have none, or the dict is
            # written out and has no status key. An update may run on any queryset variable;
            # a create on a model with a status (a client's `create(**params)` is no row).
            root = _root(func.value)
            if func.attr == "update":
                statusless = root in self.statusless
            else:
                statusless = root not in self.with_status
            opaque = [
                d
                for d in spread
                if not (isinstance(d, ast.Dict) and None not in d.keys and not _dict_has_status(d))
            ]
            if (
                "status" in named
                or _dict_has_status(defaults)
                or (opaque and not statusless)
                or any(_dict_has_status(d) for d in spread)
            ):
                self._flag(node)
        elif isinstance(func, ast.Name) and func.id == "setattr":
            if len(node.args) > 1 and getattr(node.args[1], "value", None) == "status":
                self._flag(node)
        elif isinstance(func, ast.Name) and "status" in named and func.id in self.with_status:
            # A model built with a status: `Task(status=...)`.
            self._flag(node)
        self.generic_visit(node)


def _status_writes(path: Path, allowed: frozenset[str] | None = frozenset()) -> list[int]:
    scan = _Scan(allowed)
    scan.visit(ast.parse(path.read_text(), filename=str(path)))
    return sorted(scan.lines)


def test_no_module_but_the_transition_code_writes_a_status():
    offenders = {}
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            relative = str(path.relative_to(ROOT))
            if "/migrations/" in relative:
                continue
            if lines := _status_writes(path, STATUS_WRITERS.get(relative, frozenset())):
                offenders[relative] = lines
    assert offenders == {}


def test_the_exempt_functions_exist():
    """An exemption for a function that was renamed or removed would exempt nothing, silently."""
    for relative, functions in STATUS_WRITERS.items():
        tree = ast.parse((ROOT / relative).read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert (functions or frozenset()) <= defined, relative


@pytest.mark.parametrize(
    "source",
    [
        "task.status = 'x'",
        "step.status: str = 'x'",
        "Task.objects.filter(pk=1).update(status='y')",
        "Task.objects.filter(pk=1).update(**fields)",
        "queryset.update(**fields)",
        "Step.objects.filter(pk=1).update(**{'status': 'y'})",
        "Task.objects.create(status='running')",
        "Gate.objects.create(**values)",
        "Task.objects.update_or_create(pk=1, defaults={'status': 'y'})",
        "Task(agent='a', status='running')",
        "setattr(task, 'status', 'x')",
        "def task_transition():\n    task.status = 'x'",
    ],
)
def test_the_status_scan_finds_a_write(tmp_path, source):
    sample = tmp_path / "sample.py"
    sample.write_text(source + "\n")
    assert _status_writes(sample) != []


@pytest.mark.parametrize(
    "source",
    [
        "Task.objects.filter(status='queued').update(tokens_used=1)",
        "PolicyRule.objects.filter(pk=1).update(**values)",
        "Step.objects.filter(pk=1).update(**{'route': 'auto'})",
        "Task.objects.create(agent='a', goal='g')",
        "fields.update(usage)",
        "JsonResponse({}, status=404)",
    ],
)
def test_the_status_scan_passes_writes_of_other_fields(tmp_path, source):
    sample = tmp_path / "sample.py"
    sample.write_text(source + "\n")
    assert _status_writes(sample) == []


def test_an_exempt_function_may_write_a_status_and_its_neighbours_may_not(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def publish():\n    v.status = 'published'\n\ndef other():\n    v.status = 'draft'\n"
    )
    assert _status_writes(sample, frozenset({"publish"})) == [5]
