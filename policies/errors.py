"""Typed exceptions of the policies app, in one module."""

from __future__ import annotations

from collections.abc import Sequence

from policies.engine import ValidationMessage


class PolicyError(Exception):
    """Base of the policies app's errors; the message is fit to show to an admin."""


class PolicyNotFound(PolicyError):
    """No policy, or no published version of it, exists under that name."""


class PolicyImmutable(PolicyError):
    """The version is published: it and its rules can no longer change."""


class RuleConflict(PolicyError):
    """The change would give a draft two rules with the same name."""


class PolicyInvalid(PolicyError):
    """The draft has validation errors; `messages` lists every finding."""

    def __init__(self, messages: Sequence[ValidationMessage]) -> None:
        self.messages = list(messages)
        errors = [m.message for m in self.messages if m.is_error]
        super().__init__("the draft is not valid: " + "; ".join(errors))
