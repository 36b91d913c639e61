"""A text kept only in part (a failure's message, a remote's body, an error shown to people) is
redacted before it is cut: a secret across the cut leaves no part of itself. Cut first, the
secret's first characters no longer match any rule and were stored as they are."""

from __future__ import annotations

import pytest

from agentops.engine.errors import FailureKind, ToolFailure
from agentops.engine.redaction import redacted_cut, text_redacted
from tests.secret_corpus import TEXT_FORMS

LIMIT = 200


def across_the_cut(written: str, secret: str, inside: int) -> str:
    """`written` placed so that its secret starts `inside` characters before the cut."""
    start = written.index(secret)
    return "x " * ((LIMIT - inside - start) // 2) + " " * ((LIMIT - inside - start) % 2) + written


@pytest.mark.parametrize("name", sorted(TEXT_FORMS))
def test_a_secret_across_the_cut_leaves_no_part_of_itself(name: str):
    written, secret = TEXT_FORMS[name]
    for inside in {4, 8, len(secret) // 2, len(secret) - 2}:
        if not 0 < inside < len(secret):
            continue
        text = across_the_cut(written, secret, inside)
        assert text[LIMIT - inside : LIMIT] == secret[:inside]

        cut = redacted_cut(text, LIMIT)

        assert len(cut) <= LIMIT
        assert secret[:inside] not in cut[-inside - 1 :], (name, inside, cut[-40:])
        assert cut == text_redacted(text)[:LIMIT]


def test_cutting_first_would_have_kept_part_of_many_secrets():
    """What redacting first protects against: a rule needs more than a secret's first
    characters (cut in half, 45 of the corpus's 102 forms kept their half, 2026-12-07)."""
    kept = 0
    for written, secret in TEXT_FORMS.values():
        inside = len(secret) // 2
        text = across_the_cut(written, secret, inside)
        kept += secret[:inside] in text_redacted(text[:LIMIT])
    assert kept >= len(TEXT_FORMS) // 4


def test_a_failures_stored_message_is_redacted_before_its_cut():
    key = "sk-proj-4f9Qm2XbT7vLw8RcZ1yN3kPd"
    message = "the tool said: " + "." * 1965 + f" key {key} was revoked"
    assert message[1985:2000] == key[:15]  # too short a prefix for the rule, cut first
    failure = ToolFailure(message, kind=FailureKind.TOOL_ERROR, retryable=False)

    stored = failure.as_failure()["message"]

    assert len(stored) <= 2000
    assert key[:12] not in stored
