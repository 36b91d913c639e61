"""The difference between two policy specs, rule by rule. Pure.

Rules are matched by name (names are unique within a version): a rule is added, removed, changed
(field by field) or moved; the sensitive-system list is compared as a set.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from policies.engine import PolicySpec, Rule

_COMPARED = tuple(f.name for f in fields(Rule) if f.name != "name")


@dataclass(frozen=True)
class FieldChange:
    field: str
    before: Any
    after: Any


@dataclass(frozen=True)
class RuleDiff:
    name: str
    kind: str  # added | removed | changed | moved | same
    position_before: int | None
    position_after: int | None
    changes: tuple[FieldChange, ...] = ()
    rule_before: Rule | None = None
    rule_after: Rule | None = None


@dataclass(frozen=True)
class SpecDiff:
    rules: tuple[RuleDiff, ...]
    systems_added: tuple[str, ...]
    systems_removed: tuple[str, ...]

    @property
    def is_empty(self) -> bool:
        return (
            all(r.kind == "same" for r in self.rules)
            and not self.systems_added
            and not self.systems_removed
        )

    def counts(self) -> dict[str, int]:
        out = {"added": 0, "removed": 0, "changed": 0, "moved": 0, "same": 0}
        for rule in self.rules:
            out[rule.kind] += 1
        return out


def spec_diff(before: PolicySpec, after: PolicySpec) -> SpecDiff:
    """How `after` differs from `before`; rules listed in `after`'s order, removed ones last."""
    old = {rule.name: (i, rule) for i, rule in enumerate(before.rules, start=1)}
    new = {rule.name: (i, rule) for i, rule in enumerate(after.rules, start=1)}
    # A rule that only shifted because others were added or removed around it is not "moved".
    kept_old = [r.name for r in before.rules if r.name in new]
    kept_new = [r.name for r in after.rules if r.name in old]
    rank_old = {name: i for i, name in enumerate(kept_old)}
    rank_new = {name: i for i, name in enumerate(kept_new)}
    out: list[RuleDiff] = []
    for name, (position, rule) in new.items():
        if name not in old:
            out.append(RuleDiff(name, "added", None, position, rule_after=rule))
            continue
        old_position, old_rule = old[name]
        changes = tuple(
            FieldChange(f, getattr(old_rule, f), getattr(rule, f))
            for f in _COMPARED
            if getattr(old_rule, f) != getattr(rule, f)
        )
        kind = "changed" if changes else "moved" if rank_old[name] != rank_new[name] else "same"
        out.append(RuleDiff(name, kind, old_position, position, changes, old_rule, rule))
    for name, (position, rule) in old.items():
        if name not in new:
            out.append(RuleDiff(name, "removed", position, None, rule_before=rule))
    systems_before, systems_after = set(before.sensitive_systems), set(after.sensitive_systems)
    return SpecDiff(
        rules=tuple(out),
        systems_added=tuple(sorted(systems_after - systems_before)),
        systems_removed=tuple(sorted(systems_before - systems_after)),
    )
