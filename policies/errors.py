"""Typed exceptions of the policies app, in one module.

A refusal is raised with a `Phrase`: `str(exc)` is the English (logs, the API's codes stay
English), and `exc.message` the same refusal in the reader's language, for a page.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.utils.translation import gettext

from policies.engine import ValidationMessage
from policies.phrases import Phrase, gettext_noop, shown


class PolicyError(Exception):
    """Base of the policies app's errors; the message is fit to show to an admin."""

    @property
    def message(self) -> str:
        """The refusal in the active language (the request's)."""
        return str(shown(self.args[0])) if self.args else ""


class PolicyNotFound(PolicyError):
    """No policy, or no published version of it, exists under that name."""


class PolicyImmutable(PolicyError):
    """The version is published: it and its rules can no longer change."""


class RuleConflict(PolicyError):
    """The change would give a draft two rules with the same name."""


class PolicyInvalid(PolicyError):
    """The draft has validation errors; `messages` lists every finding."""

    NOT_VALID = gettext_noop("the draft is not valid: %(errors)s")

    def __init__(self, messages: Sequence[ValidationMessage]) -> None:
        self.messages = list(messages)
        errors = [m.message for m in self.messages if m.is_error]
        super().__init__(Phrase(self.NOT_VALID, {"errors": "; ".join(errors)}))

    @property
    def message(self) -> str:
        errors = [str(shown(m.message)) for m in self.messages if m.is_error]
        return gettext(self.NOT_VALID) % {"errors": "; ".join(errors)}
