"""Running the rules over a text: the prechecks that keep it cheap on long text holding no
secret, and the spans found, replaced once."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from agentops.engine.redaction._numbers import (
    CARD_RUN,
    IBAN_RUN,
    NUMBER_BYTES,
    NUMBER_BYTES_DELETED,
    SSN_RULE,
    card_spans,
    iban_spans,
)
from agentops.engine.redaction._rule import REDACTED, VALUE_GROUPS, Rule, Span
from agentops.engine.redaction._tokens import (
    COMMAND_RULES,
    LIBRARY_RULES,
    LINE_RULES,
    PRIVATE_KEYS,
    TOKEN_RULES,
)
from agentops.engine.redaction._words import (
    ASSIGNMENTS,
    BEARER,
    CODES,
    FOREIGN_ASCII,
    FOREIGN_OTHER,
    NOT_SECRETS,
    PASSWORDS,
)


class Text:
    """A text and what the prechecks learn about it, each computed once when first asked."""

    def __init__(self, text: str, *, prechecks: bool) -> None:
        self.text = text
        self.prechecks = prechecks
        self._lowered: str | None = None
        self._bytes: bytes | None = None
        self._numbers: bytes | None = None
        self._found: frozenset[str] | None = None
        self._occurs: dict[str, bool] = {}

    @property
    def lowered(self) -> str:
        if self._lowered is None:
            self._lowered = _lowered(self.text)
        return self._lowered

    @property
    def data(self) -> bytes:
        if self._bytes is None:
            text = self.text
            self._bytes = (
                text.encode("ascii") if text.isascii() else text.encode("utf-8", "surrogatepass")
            )
        return self._bytes

    def numbers(self) -> bytes:
        if self._numbers is None:
            self._numbers = self.data.translate(NUMBER_BYTES, NUMBER_BYTES_DELETED)
        return self._numbers

    def may_hold_card(self) -> bool:
        """False when `CARD_RUN` cannot match: a match is 13 or more digits with separators
        between, so with those deleted it is a run of 13 digits, in the translated bytes a run
        of 13 "0"s. The card regex tries every digit (~10 ms on 500 KB of text with a digit
        every few characters); this is an encoding, a byte translation and a substring search
        (0.2-0.5 ms). Text in a script that shares its first byte with digits (Devanagari,
        say) may still get the regex."""
        if not self.prechecks:
            return True
        return len(self.text) >= 13 and b"0" * 13 in self.numbers()

    def may_hold_iban(self) -> bool:
        """False when `IBAN_RUN` cannot match: a match starts with two upper-case letters and
        two digits, "AA00" in the translated bytes."""
        if not self.prechecks:
            return True
        return len(self.text) >= 15 and b"AA00" in self.numbers()

    def holds(self, rule: Rule) -> bool:
        """Whether `rule` may match: one of the substrings it needs occurs."""
        if not self.prechecks:
            return True
        found = self.literals_found()
        return any(
            literal.lower() in found and (rule.lowered or self._in_text(literal))
            for literal in rule.needs
        )

    def literals_found(self) -> frozenset[str]:
        """The rules' literals (lowercased) in the lowercased text. A short text: one regex
        (a trie of them) over it. A longer one: which characters of the literals occur (a
        memchr each, ~0.01 ms per 500 KB), then a substring search (~0.4 ms per 500 KB) for
        each literal whose characters all do."""
        if self._found is None:
            lowered = self.lowered
            if len(lowered) <= _SHORT:
                if _ANY_LITERAL.search(lowered) is None:
                    self._found = frozenset()
                else:
                    matches = _LITERALS.findall(lowered)
                    self._found = frozenset(
                        literal for match in matches for literal in _PREFIXES[match]
                    )
            else:
                present = frozenset(char for char in _ALPHABET if char in lowered)
                self._found = frozenset(
                    literal
                    for literal, chars in _LITERAL_CHARS
                    if chars <= present and (len(literal) == 1 or literal in lowered)
                )
        return self._found

    def _in_text(self, literal: str) -> bool:
        """Whether a case-sensitive literal occurs (asked once per literal)."""
        if literal not in self._occurs:
            self._occurs[literal] = literal in self.text
        return self._occurs[literal]

    def ranges(self, rule: Rule) -> Iterator[Span]:
        """Where to run `rule`: the whole text, or the lines holding what it needs."""
        if not (rule.per_line and self.prechecks):
            yield 0, len(self.text)
            return
        target = self.lowered if rule.lowered else self.text
        lines: set[int] = set()
        for literal in rule.needs:
            index = target.find(literal)
            while index >= 0:
                start = target.rfind("\n", 0, index) + 1
                end = target.find("\n", index)
                end = len(target) if end < 0 else end
                if start not in lines:
                    lines.add(start)
                    yield start, end
                index = target.find(literal, end)


def _lowered(text: str) -> str:
    """`text` in lower case, one character for one, so that positions carry over."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    # "İ" (U+0130) is the one character that lowercases to two (a test checks it): an "i" here.
    return text.replace("\u0130", "i").lower()


def _rule_spans(text: Text, rule: Rule) -> Iterator[Span]:
    target = text.lowered if rule.lowered else text.text
    keyword = rule.groups == VALUE_GROUPS and rule.lowered
    for start, end in text.ranges(rule):
        for match in rule.pattern.finditer(target, start, end):
            if rule.found is not None:
                yield from rule.found(text.text, match)
                continue
            found = [group for group in rule.groups if match.group(group) is not None]
            for group in found or ([] if rule.groups else [0]):
                begin, finish = match.span(group)
                if begin == finish:
                    continue
                if keyword and group == "bare" and finish - begin > 1:
                    if target[finish - 1] in ".:":
                        finish -= 1  # the full stop that ends the sentence
                    if target[begin:finish] in NOT_SECRETS or target[finish : finish + 1] in (
                        "(",
                        "[",
                    ):
                        continue  # a word of prose, a call or a subscript in code
                if rule.valid is not None and not rule.valid(match, text.text[begin:finish]):
                    continue
                yield begin, finish


def replaced(text: str, spans: list[Span]) -> str:
    """`text` with every span (overlapping spans merged) replaced by REDACTED."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    pieces: list[str] = []
    position = 0
    for start, end in merged:
        pieces += [text[position:start], REDACTED]
        position = end
    pieces.append(text[position:])
    return "".join(pieces)


_CASE_RULES = LIBRARY_RULES + TOKEN_RULES + PRIVATE_KEYS + COMMAND_RULES + LINE_RULES
_WORD_RULES = BEARER + PASSWORDS + ASSIGNMENTS + CODES + FOREIGN_ASCII + [SSN_RULE]
RULES = _CASE_RULES + _WORD_RULES + FOREIGN_OTHER

# Texts up to this length look for every rule's literal with one regex (a trie of them, each
# position looked ahead from, so that overlapping literals are all found): a microsecond or two
# for a short string, where a search per literal costs ~130 calls; but ~35 ns per character.
_SHORT = 256


def _trie(words: set[str]) -> str:
    """A regex matching any of `words`, as a trie (one branch per first character)."""
    tree: dict[str, Any] = {}
    for word in words:
        node = tree
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def branch(node: dict[str, Any]) -> str:
        alternatives = [
            re.escape(char) + branch(rest) for char, rest in sorted(node.items()) if char
        ]
        if not alternatives:
            return ""
        either = alternatives[0] if len(alternatives) == 1 else f"(?:{'|'.join(alternatives)})"
        return f"(?:{either})?" if "" in node else either

    return branch(tree)


_ALL_LITERALS = {literal.lower() for rule in RULES for literal in rule.needs}
_ANY_LITERAL = re.compile(_trie(_ALL_LITERALS))
_LITERALS = re.compile(f"(?=({_ANY_LITERAL.pattern}))")
# The literals found by a match of the trie: the longest one there, and those it starts with.
_PREFIXES = {
    literal: frozenset(other for other in _ALL_LITERALS if literal.startswith(other))
    for literal in _ALL_LITERALS
}


# Each literal (lowercased) with its characters, and every character of them.
_LITERAL_CHARS = [(literal, frozenset(literal)) for literal in sorted(_ALL_LITERALS)]
_ALPHABET = sorted({char for literal in _ALL_LITERALS for char in literal})
# The rules that need each literal (lowercased), in the order of RULES.
_RULES_NEEDING = {
    literal: [rule for rule in RULES if literal in {need.lower() for need in rule.needs}]
    for literal in _ALL_LITERALS
}
_ORDER = {id(rule): index for index, rule in enumerate(RULES)}


def _candidates(text: Text) -> list[Rule]:
    """The rules to try on the text: those whose literal occurs."""
    if not text.prechecks:
        return RULES
    found = text.literals_found()
    if not found:
        return []
    rules = {id(rule): rule for literal in found for rule in _RULES_NEEDING[literal]}
    return sorted(rules.values(), key=lambda rule: _ORDER[id(rule)])


def secret_spans(text: Text) -> list[Span]:
    """The spans of every secret the rules find in the text."""
    spans: list[Span] = []
    value = text.text
    for rule in _candidates(text):
        if text.holds(rule):
            spans += _rule_spans(text, rule)
    if text.may_hold_card():
        for match in CARD_RUN.finditer(value):
            spans += card_spans(value, match)
    if text.may_hold_iban():
        for match in IBAN_RUN.finditer(value):
            spans += iban_spans(value, match)
    return spans
