"""A sentence made where no reader's language applies, read where one does: `Phrase`.

Pure code (the evaluator's validation, the recovery advisor) and stored records say things in
English, whatever the language of the request that ran them: a value must not depend on who was
looking. A `Phrase` is that English string (records, logs, JSON, comparisons see only it) and
keeps its message id and named values, so a page renders it in the reader's language when it is
shown: a template calls `__html__`, a view that needs plain text calls `shown()`. The values are
the record (rule, tool and group names, codes, numbers); on a page they stay as written, inside
`translate="no"`. It lives in `policies`, the lowest app that needs it, so the engine's advisor
uses the same one.

Mark the message id for the catalogue where it is written: `Phrase(gettext_noop("..."), {...})`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext
from django.utils.translation import gettext_noop as gettext_noop

__all__ = ["Phrase", "gettext_noop", "kept", "shown"]


class Phrase(str):
    """English text with its message id and named values, translated only when shown."""

    msgid: str
    params: Mapping[str, Any]

    def __new__(cls, msgid: str, params: Mapping[str, Any] | None = None) -> Phrase:
        values = dict(params or {})
        self = super().__new__(cls, msgid % values)
        self.msgid = msgid
        self.params = values
        return self

    def __getnewargs__(self) -> tuple[str, Mapping[str, Any]]:  # type: ignore[override]
        # Copies and pickles rebuild from the message id, not from the formatted English.
        return (self.msgid, self.params)

    def shown(self) -> str:
        """The text in the active language (the request's), as plain text."""
        return gettext(self.msgid) % {k: shown(v) for k, v in self.params.items()}

    def __html__(self) -> SafeString:
        """The text in the active language, escaped, each value kept as written."""
        values = {k: _value_html(v) for k, v in self.params.items()}
        return mark_safe(conditional_escape(gettext(self.msgid)) % values)


def shown(text: Any) -> Any:
    """`text` in the active language when it is a Phrase; any other value as it is (a number
    stays a number for its placeholder)."""
    return text.shown() if isinstance(text, Phrase) else text


def kept(value: object) -> SafeString:
    """`value` escaped, in an element that says it stays as written: record text (a name, a
    code, what someone typed) inside a translated sentence. A reader's translation tool and the
    English check (tests/english.py) leave it alone. The one place the mark is made."""
    return format_html('<span translate="no">{}</span>', value)


def _value_html(value: Any) -> Any:
    if isinstance(value, Phrase):
        return value.__html__()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return kept(value)
