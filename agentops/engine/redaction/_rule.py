"""A rule: a pattern, what it needs to be worth running, and what its matches hold."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

REDACTED = "[redacted]"

# Zero-width and invisible characters someone may leave inside a secret (or a tool may insert).
INVISIBLE = re.compile("[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")

Span = tuple[int, int]


@dataclass(frozen=True)
class Rule:
    """A pattern and what its matches hold.

    `needs`: substrings one of which every match contains (searched in the lowercased text when
    `lowered`); the rule runs only when one occurs, and with `per_line` only on the lines that
    hold one (for a regex with no literal to start from, or a case-insensitive one).
    `groups`: the groups that are the secret (the whole match
    when empty; a group that did not take part is skipped). `valid`: a check of the secret
    (a checksum, a library's own check). `lowered`: the pattern runs on the lowercased copy."""

    pattern: re.Pattern[str]
    needs: tuple[str, ...] = ()
    groups: tuple[int | str, ...] = ()
    valid: Callable[[re.Match[str], str], bool] | None = None
    lowered: bool = False
    per_line: bool = False
    # The secrets' spans in a match, when they are not groups of it.
    found: Callable[[str, re.Match[str]], Iterator[Span]] | None = None


# A value on a command line or in a `.env` line: quoted (the quotes stay), or up to a space.
QUOTED_OR_BARE = r"(?:(?P<quote>[\"'])(?P<quoted>[^\n]*?)(?P=quote)|(?P<bare>[^\s\"'`]+))"
VALUE_GROUPS = ("quoted", "bare")
