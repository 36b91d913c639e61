"""What PostgreSQL cannot store in text (NUL, lone surrogates): the check and the replacement.

A leaf of the engine (it imports no other engine module), so both the JSON validation in
`jsonvalues` and the failure records of `errors` use it without importing each other.
"""

from __future__ import annotations

import re
from typing import Any

# What PostgreSQL's jsonb refuses in text: NUL, and UTF-16 surrogates that pair with nothing.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def text_refusal(text: str) -> str | None:
    """Why PostgreSQL cannot store `text`, or None."""
    if text.isascii() and "\x00" not in text:
        # The common case, without the regex (~5 ms on 500 KB).
        return None
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    char = found.group()
    what = "a NUL character" if char == "\x00" else f"a lone surrogate (\\u{ord(char):04x})"
    return f"contains {what}, which cannot be stored"


def storable_texts(value: Any) -> Any:
    """`value` with NUL characters and lone surrogates in its strings (keys too) replaced by
    U+FFFD: for what the engine writes about the world (a failure's message and detail, which
    quote what a tool or a remote said), stored whatever the world sent. Engine-built values
    only (shallow); values from outside are refused instead (`validated`)."""
    if isinstance(value, str):
        return value if text_refusal(value) is None else _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {storable_texts(key): storable_texts(item) for key, item in value.items()}
    if isinstance(value, list):
        return [storable_texts(item) for item in value]
    return value
