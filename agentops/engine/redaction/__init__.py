"""Secrets out of everything stored: `redacted` replaces them by "[redacted]".

It runs on every value the product stores (task input, model output, tool arguments and
results, failure messages, people's notes). Maintained detectors find what they cover:
detect-secrets' plugins (Yelp) the provider keys and tokens, python-stdnum the checksums of card
numbers, IBANs and US social security numbers. The rules written here cover what none of them
does: values after key words in prose and in other languages, command lines, `.env` and `.pgpass`
lines, private keys without their BEGIN line, key names in structured values.
docs/operations.md says which detector covers which form, and why each written rule remains.

The rules live by kind: `_tokens` (case-sensitive: provider keys, private keys, command lines,
`.env` and `.pgpass` lines), `_words` (key words on the lowercased copy), `_numbers` (cards,
IBANs, social security numbers), `_keys` (key names); `_text` runs them over a text.

Every rule finds spans in the same text, and the spans are replaced once. It is built to be cheap
on long text that holds no secret: a rule runs only when the literal it needs occurs (one regex
for all of them in a short text, one-character searches and then a substring search in a long
one), numbers only when a byte translation shows enough digits; a rule whose regex has no literal
to start from runs only on the lines holding the literal it needs. `text_redacted(text,
prechecks=False)` runs every rule everywhere: a test checks that the prechecks change no result.
"""

from __future__ import annotations

import functools
from typing import Any

from agentops.engine.redaction._keys import is_secret_key
from agentops.engine.redaction._numbers import card_digits, luhn_valid
from agentops.engine.redaction._rule import INVISIBLE, REDACTED
from agentops.engine.redaction._text import (
    RULES,
    Text,
    replaced,
    secret_spans,
)


def text_redacted(value: str, *, prechecks: bool = True) -> str:
    """`value` with the secrets the rules find replaced. Invisible characters (zero-width
    spaces, joiners, soft hyphens) are taken out before matching when the text has any; the
    text keeps them unless a secret was found. A short text's answer is cached: stored values
    repeat (statuses, dates, notes)."""
    if len(value) < 4:
        return value  # the shortest secret written is four characters: "pw=x"
    if prechecks and len(value) <= _CACHED:
        return _short_redacted(value)
    return _redacted_now(value, prechecks)


_CACHED = 256


@functools.lru_cache(maxsize=8192)
def _short_redacted(value: str) -> str:
    return _redacted_now(value, True)


def short_cache_clear() -> None:
    """Forget the short strings' answers (for a benchmark)."""
    _short_redacted.cache_clear()


def _redacted_now(value: str, prechecks: bool) -> str:
    if not value.isascii() and INVISIBLE.search(value):
        visible = INVISIBLE.sub("", value)
        spans = secret_spans(Text(visible, prechecks=prechecks))
        return replaced(visible, spans) if spans else value
    spans = secret_spans(Text(value, prechecks=prechecks))
    return replaced(value, spans) if spans else value


@functools.lru_cache(maxsize=4096)
def _key_redacted(key: str) -> str:
    """A key with the secrets in it redacted (a key can be pasted text too). Cached."""
    return text_redacted(key)


def _number_redacted(number: int) -> int | str:
    """A JSON number that is a card number is redacted like one written in text."""
    if number < 10**12:
        return number
    return REDACTED if card_digits(str(number)) else number


def redacted(value: Any) -> Any:
    """A copy of `value` with secrets replaced by "[redacted]": values under secret-looking keys
    (password, pwd, token, api_key, authorization, card_number, pin, cookie, ...) and
    secret-looking strings and numbers anywhere, keys included (provider keys and tokens,
    private keys, passwords after a key word in several languages, command-line passwords,
    card numbers, IBANs, US social security numbers). docs/operations.md lists the forms."""
    if isinstance(value, str):
        return text_redacted(value)
    if isinstance(value, dict):
        copy = {}
        for key in value:
            item = value[key]
            if isinstance(key, str):
                if item not in (None, "") and is_secret_key(key):
                    item = REDACTED
                key = _key_redacted(key) if len(key) >= 4 else key
            if type(item) is int:
                item = _number_redacted(item)
            elif not (item is None or type(item) is bool):
                item = redacted(item)
            copy[key] = item
        return copy
    if isinstance(value, list):
        return [
            _number_redacted(item)
            if type(item) is int
            else item
            if item is None or type(item) is bool
            else redacted(item)
            for item in value
        ]
    if type(value) is int:
        return _number_redacted(value)
    return value


# How far past a cut `redacted_cut` looks: longer than any secret the rules find, but a private
# key, whose block is redacted to the end of the text when its END line is cut off.
CUT_MARGIN = 4096


def redacted_cut(text: str, limit: int) -> str:
    """The first `limit` characters of `text`, redacted before the cut: a secret across the
    cut leaves no part of itself (cut first, its first characters no longer match a rule)."""
    return text_redacted(text[: limit + CUT_MARGIN])[:limit]


__all__ = [
    "CUT_MARGIN",
    "REDACTED",
    "RULES",
    "is_secret_key",
    "luhn_valid",
    "redacted",
    "redacted_cut",
    "short_cache_clear",
    "text_redacted",
]
