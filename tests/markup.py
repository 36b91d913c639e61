"""What a page's markup is, apart from its text: for tests that what people and agents send is
shown as text and never becomes markup."""

from __future__ import annotations

import re
from html.parser import HTMLParser


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, tuple[str, ...]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, tuple(sorted(name for name, _ in attrs))))


def markup(page: str) -> list[tuple[str, tuple[str, ...]]]:
    """The page's start tags in order, each with its attributes' names: what a text rendered
    unescaped would change (a tag of its own, or an attribute it breaks out into)."""
    parser = _Tags()
    parser.feed(page)
    parser.close()
    return parser.tags


def plain(text: str) -> str:
    """A harmless text of the same shape (length, whitespace, lines) to render in its place: the
    page's markup is the same for both when the text is escaped."""
    return re.sub(r"\S", "x", text)
