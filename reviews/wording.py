"""Wording shared by the review pages' Python: a message translated when it is shown, and record
text (names, a rubric's words, a person's note) kept as written inside a translated sentence.

A translated sentence may hold record text: an agent's name, a tool's, a rubric item's label.
The record stays as written in every language, so it goes into the sentence wrapped in an
element marked `translate="no"` (the HTML attribute a reader's translation tool, and
`tests.english.english_left`, leave alone); flash messages and form labels render such a
sentence as the safe HTML it is.
"""

from __future__ import annotations

from typing import Any

from django.utils.functional import lazy
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext

from policies.phrases import kept


def _translated(message: str, params: dict[str, Any]) -> str:
    return gettext(message) % params


# A message with values, translated when it is shown (a form's help text is made at import, in
# no one's language): mark the msgid with `gettext_noop` so makemessages finds it.
translated_lazy = lazy(_translated, str)


def with_kept(message: str, **values: object) -> SafeString:
    """`message`, translated already (`gettext("... %(name)s ...")`), escaped, with each value
    put in as record text (`kept`): safe HTML for a flash message or a form's label."""
    filled = escape(message) % {name: kept(value) for name, value in values.items()}
    return mark_safe(filled)
