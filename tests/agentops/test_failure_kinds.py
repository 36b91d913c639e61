"""Failure kinds are one enum (`agentops.engine.errors.FailureKind`), and adding one is forced to
be complete: every kind has a label a person reads, a row of the advisor's table that names it,
and its place in the docs' list of kinds by layer; and raise sites name kinds as members, never
as strings (mypy then checks each one)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from agentops.engine.advisor import RULES
from agentops.engine.errors import LAYER_KINDS, FailureKind
from agentops.labels import KIND_LABELS, failure_label, kind_label

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "recovery.md"
APPS = ("agentops", "policies", "reviews")


def documented_kinds(text: str) -> dict[str, set[str]]:
    """Layer -> the kinds its bullet names, from the list under "Failure kinds are one enum"."""
    section = text.split("Failure kinds are one enum", 1)[1].split("\n\n", 2)[1]
    found: dict[str, set[str]] = {}
    for bullet in re.split(r"^- ", section, flags=re.M)[1:]:
        layer, _, kinds = bullet.partition(":")
        # Only the kinds themselves: a remark in parentheses may quote a ledger status.
        kinds = re.sub(r"\([^)]*\)", "", kinds)
        found[layer.strip()] = set(re.findall(r"`([a-z_]+)`", kinds))
    return found


def string_kinds(path: Path, root: Path = ROOT) -> list[str]:
    """`kind="…"` keywords of calls in `path` whose string is a failure kind."""
    values = {kind.value for kind in FailureKind}
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        f"{path.relative_to(root)}:{node.lineno}: kind={keyword.value.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for keyword in node.keywords
        if keyword.arg == "kind"
        and isinstance(keyword.value, ast.Constant)
        and keyword.value.value in values
    ]


@pytest.mark.parametrize("kind", list(FailureKind), ids=str)
def test_every_failure_kind_has_a_label_an_advisor_row_and_a_docs_line(kind: FailureKind) -> None:
    named_by = [rule.name for rule in RULES if rule.kinds is not None and kind in rule.kinds]
    documented = documented_kinds(DOC.read_text())
    layers = [str(layer) for layer, kinds in LAYER_KINDS.items() if kind in kinds]

    assert KIND_LABELS.get(kind), f"{kind} has no label in agentops/labels.py"
    assert named_by, f"no row of the advisor's RULES names {kind}"
    assert layers, f"{kind} is recorded by no layer (LAYER_KINDS)"
    for layer in layers:
        assert kind in documented.get(layer, set()), f"docs/recovery.md: {layer} lacks {kind}"


def test_the_docs_list_names_only_kinds_of_the_enum_in_their_layers() -> None:
    documented = documented_kinds(DOC.read_text())

    assert documented == {
        str(layer): {str(kind) for kind in kinds} for layer, kinds in LAYER_KINDS.items()
    }


def test_labels_are_keyed_by_the_enum_and_read_a_stored_kind() -> None:
    assert set(KIND_LABELS) == set(FailureKind)
    assert kind_label("timeout") == KIND_LABELS[FailureKind.TIMEOUT]
    # A kind this code does not record (an old row, a typo) reads as itself.
    assert kind_label("gone_kind") == "gone kind"
    assert failure_label({"layer": "tool", "kind": "tool_error", "message": "hotels.book x"}) == (
        "The hotels service failed inside its tool (an unexpected error)"
    )


def test_no_raise_site_names_a_failure_kind_as_a_string() -> None:
    found = [
        site
        for app in APPS
        for path in sorted((ROOT / app).rglob("*.py"))
        if "migrations" not in path.parts
        for site in string_kinds(path)
    ]

    assert found == []


def test_the_string_kind_scan_sees_a_keyword_string(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        'raise ToolFailure("x", kind="timeout")\n'
        "raise ToolFailure('x', kind=FailureKind.TIMEOUT)\n"
        'Field(kind="changed")\n'
    )

    assert string_kinds(sample, root=tmp_path) == ["sample.py:1: kind='timeout'"]
