"""Secrets out of everything stored: `redacted` replaces them by "[redacted]".

It runs on every value the product stores (task input, model output, tool arguments and
results, failure messages, people's notes), so it is built to be cheap on long text that holds
no secret: every pattern is compiled once, starts with a literal where it can, and is skipped
when a one-character search (a memchr: microseconds on 500 KB) shows it cannot match.
docs/operations.md lists the exact patterns; tests/agentops/test_redaction.py pins them down.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import Any

REDACTED = "[redacted]"

# Keys whose value is a secret: the name ends with one of these words (after camelCase is split
# and the name lowercased: `githubToken`, `X-Api-Key`, `DB_PASSWORD`). A word must stand alone,
# so `max_tokens`, `token_count` and `password_policy` keep their values.
_SECRET_KEY = re.compile(
    r"^(?:.*[_\-. ])?(?:password|passwd|passphrase|pwd|secret|token|api[_-]?key|apikey|"
    r"(?:secret[_-]?)?access[_-]?key|secret[_-]?key|authorization|credentials?|"
    r"private[_-]?key|client[_-]?secret|card[_-]?number|cvv|cvc|pan)$"
)
_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


@functools.lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """Whether the value under `key` is a secret. Cached: a payload repeats its keys."""
    return _SECRET_KEY.match(_CAMEL_HUMP.sub("_", key).lower()) is not None


# Case-sensitive patterns, each with a character every match of it contains: a text without
# that character (a one-character search) cannot match, and the regex is not run. Literal
# first and the word boundary checked behind it: the regex engine then jumps from one
# occurrence of the literal to the next instead of trying every position (a leading \b costs
# ~9 ms per pattern on a 500 KB string, this ~0.13 ms). A substring test of the literal itself
# costs as much as the regex's own search, so it is not the precheck.
_AWS_ACCESS_KEY_ID = r"AKIA(?<![A-Za-z0-9]AKIA)[0-9A-Z]{16}(?![0-9A-Za-z])"
_AWS_SECRET = r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
_LITERAL_PATTERNS: list[tuple[str, re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    # An AWS access key id, and the 40-character secret key written after it (same line or the
    # next, as the console's CSV and people's messages have them).
    (
        "K",
        re.compile(rf"{_AWS_ACCESS_KEY_ID}(?:(?P<gap>[\s\S]{{0,100}}?){_AWS_SECRET})?"),
        lambda match: REDACTED + (match["gap"] + REDACTED if match["gap"] is not None else ""),
    ),
    # OpenAI-style keys.
    ("-", re.compile(r"sk-(?<![A-Za-z0-9]sk-)[A-Za-z0-9_-]{16,}"), REDACTED),
    # Stripe secret and restricted keys, webhook signing secrets.
    ("_", re.compile(r"sk_(?:live|test)_(?<![A-Za-z0-9]sk_[a-z]{4}_)[A-Za-z0-9]{10,}"), REDACTED),
    ("_", re.compile(r"rk_(?:live|test)_(?<![A-Za-z0-9]rk_[a-z]{4}_)[A-Za-z0-9]{10,}"), REDACTED),
    ("_", re.compile(r"whsec_(?<![A-Za-z0-9]whsec_)[A-Za-z0-9+/=]{10,}"), REDACTED),
    # GitHub and Slack tokens.
    ("_", re.compile(r"gh[pousr]_(?<![A-Za-z0-9]gh[pousr]_)[A-Za-z0-9]{20,}"), REDACTED),
    ("-", re.compile(r"xox[abprs]-(?<![A-Za-z0-9]xox[abprs]-)[A-Za-z0-9-]{10,}"), REDACTED),
    # JWTs: three base64url segments, the first a JSON header ("eyJ" is `{"` encoded).
    (
        "J",
        re.compile(r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"),
        REDACTED,
    ),
    # PEM and PGP private-key blocks; a block cut off before its END line is redacted to the end.
    (
        "-",
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
            r"(?:-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----|\Z)"
        ),
        REDACTED,
    ),
    # The password in a URL's credentials (postgres://user:password@host).
    ("@", re.compile(r"(://[^\s/?#@:]*:)[^\s/?#@]+(@)"), rf"\1{REDACTED}\2"),
]

# Case-insensitive patterns run on a lowercased copy of the text (a regex with IGNORECASE has no
# literal to jump to and costs ~100 ms on 500 KB), literal first. A match's group "quoted" or
# "bare" is the secret, replaced in the original text.
_SEPARATOR = r"(?:\\?[\"'])?[ \t]*(?:=>|[:=])[ \t]*"
_IS = r"[ \t]+(?:is|was)[ \t]*:?[ \t]*"
_VALUE = (
    r"(?:(?P<quote>\\?[\"'])(?P<quoted>(?:(?!(?P=quote))[^\n]){1,400})(?P=quote)"
    r"|(?:(?:basic|bearer|token|digest)[ \t]+)?(?!(?:basic|bearer|token|digest)[ \t])"
    # A bare value ends at a space, a quote or backquote, a bracket, a comma or a semicolon, or
    # at "&" when the next query parameter follows it ("?token=X&page=2").
    r"(?P<bare>(?:[^\s\"'`<>,;&\\{}\[\]()]|&(?![a-z0-9_.-]+=))+))"
)
# Each pattern comes with the literal it starts with: in a short text a substring test is much
# cheaper than starting a regex search (in a long one they cost the same).
_KeywordPattern = tuple[str, re.Pattern[str]]
# `Bearer <token>` anywhere, the word with it (needs a "b").
_BEARER: list[_KeywordPattern] = [
    ("bearer", re.compile(r"(?P<bare>bearer(?<![a-z0-9_]bearer)[ \t]+[a-z0-9._~+/=-]{8,})"))
]
# `password: X`, `db_password=X`, `"password": "X"`, `my password is X`, `pw=X`, `pwd: X`
# (needs a "w", or a separator for `passphrase`).
_PASSWORDS: list[_KeywordPattern] = [
    (
        "pass",
        re.compile(rf"pass(?:w(?:or)?d(?:{_SEPARATOR}|{_IS})|(?:phrase|code){_SEPARATOR}){_VALUE}"),
    ),
    ("pw", re.compile(rf"pw(?<![a-z0-9]pw)d?(?:{_SEPARATOR}|{_IS}){_VALUE}")),
]
# Key words with a separator (needs a ":" or "="): `client_secret=X`, `secret: X`, `token=X`,
# `github_token: X`, `?access_token=X`, `api_key=X`, `x-api-key: X`,
# `aws_secret_access_key = X`, `private_key: X`, `Authorization: Basic X`, `auth: X`.
_ASSIGNMENTS: list[_KeywordPattern] = [
    ("secret", re.compile(rf"secret{_SEPARATOR}{_VALUE}")),
    ("token", re.compile(rf"token{_SEPARATOR}{_VALUE}")),
    (
        "key",
        re.compile(
            r"key(?:(?<=apikey)|(?<=api_key)|(?<=api-key)|(?<=accesskey)|(?<=access_key)|"
            r"(?<=access-key)|(?<=secretkey)|(?<=secret_key)|(?<=secret-key)|"
            rf"(?<=privatekey)|(?<=private_key)|(?<=private-key)){_SEPARATOR}{_VALUE}"
        ),
    ),
    (
        "auth",
        re.compile(
            rf"auth(?:orization)?(?<![a-z0-9]auth)(?<![a-z0-9]authorization){_SEPARATOR}{_VALUE}"
        ),
    ),
]
# Values after a key word that are not secrets: prose ("the password is incorrect") and JSON
# literals ("token": null).
_NOT_SECRETS = frozenset(
    word
    for words in (
        "null none nil true false undefined required optional missing empty blank hidden",
        "incorrect wrong invalid valid expired not too the a an set unset reset changed",
        "weak strong",
    )
    for word in words.split()
)


def _keyword_spans(lowered: str, patterns: list[_KeywordPattern]) -> list[tuple[int, int]]:
    """The spans of the secrets that `patterns` find in the lowercased text."""
    spans = []
    for literal, pattern in patterns:
        if literal not in lowered:
            continue
        for match in pattern.finditer(lowered):
            group = "bare" if match["bare"] is not None else "quoted"
            start, end = match.span(group)
            if group == "bare" and end - start > 1 and lowered[end - 1] == ".":
                end -= 1  # the full stop that ends the sentence
            if lowered[start:end] not in _NOT_SECRETS:
                spans.append((start, end))
    return spans


def _lowered(text: str) -> str:
    """`text` in lower case, one character for one, so that positions carry over."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    # "İ" (U+0130) is the one character that lowercases to two (a test checks it): an "i" here.
    return text.replace("\u0130", "i").lower()


def _replaced(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """`text` with every span (overlapping spans merged) replaced by REDACTED."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    if not merged:
        return text
    pieces: list[str] = []
    position = 0
    for start, end in merged:
        pieces += [text[position:start], REDACTED]
        position = end
    pieces.append(text[position:])
    return "".join(pieces)


def _keywords_redacted(text: str) -> str:
    """`text` with the secrets after key words redacted. Each group of patterns needs a
    character (one-character searches); the text is lowercased only when one occurs."""
    separated = ":" in text or "=" in text
    has_w = "w" in text or "W" in text
    has_b = "b" in text or "B" in text
    if not (separated or has_w or has_b):
        return text
    patterns = _BEARER if has_b else []
    if separated or has_w:
        patterns = patterns + _PASSWORDS
    if separated:
        patterns = patterns + _ASSIGNMENTS
    spans = _keyword_spans(_lowered(text), patterns)
    return _replaced(text, spans) if spans else text


# Card numbers: 13 to 19 digits, the first 2-6 (the payment networks' ranges), passing the Luhn
# check, written as one run or as groups of 3 or more digits (so a date's month and day are no
# part of one) between spaces or dashes, or dots (two at least, not mixed with the others: a
# decimal has one), not part of a longer number or a decimal. A
# candidate is any run of 13 or more digits with single separators between; `_cards` looks for
# cards inside it (a quantity written before a card does not hide it).
_CARD_RUN = re.compile(r"(?<!\d)\d(?:[ .-]?\d){12,}")
_CARD_SEPARATOR = re.compile(r"([ .-])")


def luhn_valid(digits: str) -> bool:
    """Whether `digits` pass the Luhn check every payment card number passes."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        number = int(char)
        if index % 2:
            number = number * 2 - 9 if number > 4 else number * 2
        total += number
    return total % 10 == 0


def _is_card(groups: list[str], separators: list[str], first: int, last: int) -> bool:
    """Whether groups[first..last] (joined by separators[first..last-1]) are a card number."""
    between = separators[first:last]
    if (first > 0 and separators[first - 1] == ".") or (
        last < len(separators) and separators[last] == "."
    ):
        return False  # part of a decimal or a dotted number
    if between:
        dots = between.count(".")
        if dots and (dots != len(between) or dots < 2):
            return False  # dots only with dots, and two of them at least
        if any(len(group) < 3 for group in groups[first : last + 1]):
            return False
    digits = "".join(groups[first : last + 1])
    return 2 <= int(digits[0]) <= 6 and luhn_valid(digits)


def _cards(match: re.Match[str]) -> str:
    """A candidate run with each card in it redacted: from each group on, the longest span of
    groups that is a card, else the group stays as it is."""
    groups_and_separators = _CARD_SEPARATOR.split(match.group())
    groups, separators = groups_and_separators[0::2], groups_and_separators[1::2]
    pieces: list[str] = []
    first = 0
    while first < len(groups):
        last, count, found = first, 0, -1
        while last < len(groups) and count + len(groups[last]) <= 19:
            count += len(groups[last])
            if count >= 13 and _is_card(groups, separators, first, last):
                found = last
            last += 1
        end = found if found >= 0 else first
        pieces.append(REDACTED if found >= 0 else groups[first])
        if end < len(separators):
            pieces.append(separators[end])
        first = end + 1
    return "".join(pieces)


# The first byte, in UTF-8, of every non-ASCII character `\d` matches (Unicode's decimal digits:
# Arabic-Indic, Indic scripts, fullwidth and others; a test enumerates them with this Python).
# CJK, Cyrillic, Greek and Latin letters start with other bytes.
DIGIT_LEAD_BYTES = frozenset({0xD9, 0xDB, 0xDF, 0xE0, 0xE1, 0xEA, 0xEF, 0xF0})
# A text's UTF-8 bytes mapped so that every character `\d` matches leaves one "0": an ASCII digit
# is "0", so is a lead byte in DIGIT_LEAD_BYTES (a character that may be a digit: this
# over-counts, never under-counts), any other byte "x". Deleted: UTF-8 continuation bytes (one
# byte per character is left), and the separators a card may have.
_CARD_BYTES = bytes.maketrans(
    bytes(range(256)),
    bytes(
        ord("0") if chr(b) in "0123456789" or b in DIGIT_LEAD_BYTES else ord("x")
        for b in range(256)
    ),
)
_CARD_BYTES_DELETED = b" -." + bytes(range(0x80, 0xC0))


def _may_hold_card(text: str) -> bool:
    """False when `_CARD_RUN` cannot match: a match is 13 or more digits with at most one space,
    dash or dot between two of them, so with those deleted it is a run of 13 digits, and in
    the translated bytes (`_CARD_BYTES`) a run of 13 "0"s. The card regex tries every digit
    (~10 ms on 500 KB of text with a digit every few characters); this check is an encoding, a
    byte translation and a substring search (0.2-0.5 ms). Text in a script that shares its
    first byte with digits (Devanagari, say) may still get the regex."""
    if len(text) < 13:
        return False
    data = text.encode("ascii") if text.isascii() else text.encode("utf-8", "surrogatepass")
    return b"0" * 13 in data.translate(_CARD_BYTES, _CARD_BYTES_DELETED)


def _literals_redacted(text: str) -> str:
    """`text` with the case-sensitive patterns' matches replaced."""
    for required, pattern, replacement in _LITERAL_PATTERNS:
        # `search` first: `sub` copies a long string even when nothing matches.
        if required in text and pattern.search(text):
            text = pattern.sub(replacement, text)
    return text


def redacted(value: Any) -> Any:
    """A copy of `value` with secrets replaced by "[redacted]": values under secret-looking keys
    (password, pwd, token, api_key, authorization, card_number, ...) and secret-looking strings
    anywhere (bearer tokens, provider keys, JWTs, private keys, passwords after a key word,
    Luhn-valid card numbers). docs/operations.md lists the exact patterns."""
    if isinstance(value, str):
        if len(value) < 4:
            return value  # the shortest secret written is four characters: "pw=x"
        value = _keywords_redacted(_literals_redacted(value))
        return _CARD_RUN.sub(_cards, value) if _may_hold_card(value) else value
    if isinstance(value, dict):
        copy = {}
        for key in value:
            item = value[key]
            if isinstance(key, str) and item not in (None, "") and is_secret_key(key):
                item = REDACTED
            elif not (type(item) is int or item is None or type(item) is bool):
                # An int, a bool and None come back as they are: no call for them.
                item = redacted(item)
            copy[key] = item
        return copy
    if isinstance(value, list):
        return [
            item if type(item) is int or item is None or type(item) is bool else redacted(item)
            for item in value
        ]
    return value
