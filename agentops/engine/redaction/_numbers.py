"""Numbers that are secrets: card numbers, IBANs and US social security numbers, each checked
by python-stdnum."""

from __future__ import annotations

import re
from collections.abc import Iterator

from stdnum import iban, luhn
from stdnum.us import ssn

from agentops.engine.redaction._rule import Rule, Span

# Card numbers: 13 to 19 digits, the first 2-6 (the payment networks' ranges), passing the Luhn
# check (python-stdnum), written as one run or as groups of 3 or more digits (so a date's month
# and day are no part of one) between spaces (one or two) or dashes, or between dots or slashes
# (two at least, not mixed with the others: a decimal has one dot), not part of a longer number
# or a decimal. A candidate is any run of 13 or more digits with separators between; `card_spans`
# looks for cards inside it (a quantity written before a card does not hide it).
CARD_RUN = re.compile(r"(?<!\d)\d(?:(?:  ?|[.\-/])?\d){12,}")
_CARD_SEPARATOR = re.compile(r"(  ?|[.\-/])")


def luhn_valid(digits: str) -> bool:
    """Whether `digits` pass the Luhn check every payment card number passes."""
    return luhn.is_valid(digits)


def card_digits(digits: str) -> bool:
    return 13 <= len(digits) <= 19 and "2" <= digits[0] <= "6" and luhn_valid(digits)


def _is_card(groups: list[str], separators: list[str], first: int, last: int) -> bool:
    """Whether groups[first..last] (joined by separators[first..last-1]) are a card number."""
    between = separators[first:last]
    if (first > 0 and separators[first - 1] in "./") or (
        last < len(separators) and separators[last] in "./"
    ):
        return False  # part of a decimal or a dotted number
    if between:
        for mark in "./":
            marks = between.count(mark)
            if marks and (marks != len(between) or marks < 2):
                return False  # dots only with dots, slashes with slashes, two at least
        if any(len(group) < 3 for group in groups[first : last + 1]):
            return False
    return card_digits("".join(groups[first : last + 1]).translate(_ASCII_DIGITS))


# Unicode's other decimal digits as ASCII ones, for the checksums.
_ASCII_DIGITS = {
    code: str(int(chr(code)))
    for code in range(0x80, 0x110000)
    if not 0xD800 <= code <= 0xDFFF and chr(code).isdecimal()
}


def _glued(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] is glued to a letter or digit, directly or through a dash."""
    before = text[max(0, start - 2) : start]
    after = text[end : end + 2]
    return (
        (before[-1:].isalnum() or before[-1:] == "_")
        or (before[-1:] == "-" and before[:1].isalnum())
        or (after[:1].isalnum() or after[:1] == "_")
        or (after[:1] == "-" and after[1:].isalnum())
    )


def card_spans(text: str, match: re.Match[str]) -> Iterator[Span]:
    """The cards in a candidate run: from each group on, the longest span of groups that is a
    card, else the group stays as it is."""
    if _glued(text, match.start(), match.end()):
        return  # part of a longer identifier (a UUID, a hyphenated reference)
    parts = _CARD_SEPARATOR.split(match.group())
    groups, separators = parts[0::2], parts[1::2]
    offsets, position = [], match.start()
    for index, group in enumerate(groups):
        offsets.append(position)
        position += len(group) + (len(separators[index]) if index < len(separators) else 0)
    first = 0
    while first < len(groups):
        last, count, found = first, 0, -1
        while last < len(groups) and count + len(groups[last]) <= 19:
            count += len(groups[last])
            if count >= 13 and _is_card(groups, separators, first, last):
                found = last
            last += 1
        if found >= 0:
            yield offsets[first], offsets[found] + len(groups[found])
            first = found + 1
        else:
            first += 1


# An IBAN: a country code, two check digits, then 11 to 30 letters or digits, in groups of four
# or not; valid by python-stdnum (the checksum and the country's format). A candidate longer
# than its IBAN (another group glued to it) is cut back to the longest valid prefix.
IBAN_RUN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?")


def iban_spans(text: str, match: re.Match[str]) -> Iterator[Span]:
    candidate = match.group()
    compact = candidate.replace(" ", "")
    for length in range(len(compact), 14, -1):
        if iban.is_valid(compact[:length]):
            end, kept = match.start(), 0
            while kept < length:
                kept += text[end] != " "
                end += 1
            yield match.start(), end
            return


# A US social security number, valid by python-stdnum (no 000, 666 or 9xx area, no 00 group,
# no 0000 serial, not an advertised number), written 123-45-6789, 123 45 6789 or 123456789, only
# after "SSN", "social security" or "SS#" on the same line: nine digits alone are an order
# number as often as anything.
_SSN_CONTEXT = re.compile(
    r"(?:ssn|ss#|ss no|social security|sozialversicherungsnummer|numéro de sécurité sociale)"
    r"(?<![a-z0-9]ssn)(?<![a-z0-9]ss#)(?<![a-z0-9]ss no)[^\n]{0,80}"
)
_SSN = re.compile(r"(?<![\d-])(\d{3})([- ]?)(\d{2})\2(\d{4})(?![\d-])")


def _ssn_spans(text: str, match: re.Match[str]) -> Iterator[Span]:
    for number in _SSN.finditer(text, match.start(), match.end()):
        if ssn.is_valid("".join(number.group(1, 3, 4))):
            yield number.span()


SSN_RULE = Rule(
    _SSN_CONTEXT,
    (
        "ssn",
        "ss#",
        "ss no",
        "social security",
        "sozialversicherungsnummer",
        "sécurité sociale",
    ),
    lowered=True,
    found=_ssn_spans,
)


# The first byte, in UTF-8, of every non-ASCII character `\d` matches (Unicode's decimal digits:
# Arabic-Indic, Indic scripts, fullwidth and others; a test enumerates them with this Python).
# CJK, Cyrillic, Greek and Latin letters start with other bytes.
DIGIT_LEAD_BYTES = frozenset({0xD9, 0xDB, 0xDF, 0xE0, 0xE1, 0xEA, 0xEF, 0xF0})
# A text's UTF-8 bytes mapped so that every character `\d` matches leaves one "0" (an ASCII
# digit, or a lead byte in DIGIT_LEAD_BYTES: this over-counts, never under-counts), an ASCII
# upper-case letter an "A", any other byte "x". Deleted: UTF-8 continuation bytes (one byte per
# character is left), and the separators a card or an IBAN may have.
NUMBER_BYTES = bytes.maketrans(
    bytes(range(256)),
    bytes(
        ord("0")
        if chr(b) in "0123456789" or b in DIGIT_LEAD_BYTES
        else ord("A")
        if chr(b) in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        else ord("x")
        for b in range(256)
    ),
)
NUMBER_BYTES_DELETED = b" -./" + bytes(range(0x80, 0xC0))
