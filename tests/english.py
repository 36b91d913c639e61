"""English left on a page that should read in another language: the words of its text and of the
attributes people read (a title, an aria-label, a placeholder, an image's alt, a button's value)
outside any element marked `translate="no"`, the HTML attribute the templates put on the record
(goals, tool arguments and results, decisions' reasons), names and codes, which stay as written.

A word is a run of two or more Latin letters; the few that are names or codes in any language
(API, JSON, Slack, UTC, ...) are allowed.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

# Names and codes that are the same in any language.
ALLOWED = frozenset(
    {
        "API",
        "CSV",
        "JSON",
        "JSONL",
        "Lines",  # "JSON Lines", a format's name
        "Slack",
        "OpenID",
        "Connect",  # "OpenID Connect"
        "OIDC",
        "URL",
        "ID",
        "UTC",
        "HTTP",
        "HTTPS",
        "SSO",
        "MCP",
        "LLM",
        "PDF",
        "English",  # the language switch names each language in itself
        "Bearer",
        "Authorization",  # an HTTP header's name
        "Krippendorff",
        "Cohen",
        "AI",
        "EU",
        "Art",  # "EU AI Act Art. 14"
        "Act",
    }
)
WORD = re.compile(r"[A-Za-z][A-Za-z'\u2019]*[A-Za-z]")
READ_ATTRIBUTES = ("title", "aria-label", "placeholder", "alt", "aria-description")
# Elements without an end tag.
VOID = frozenset(
    ("area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track")
)


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool]] = []  # (tag, kept as written)
        self.texts: list[str] = []

    def _kept(self) -> bool:
        return any(kept or tag in ("script", "style", "template") for tag, kept in self.stack)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        kept = named.get("translate") == "no" or "hidden" in named
        if not kept and not self._kept():
            self.texts.extend(named[name] or "" for name in READ_ATTRIBUTES if name in named)
            if tag == "input" and named.get("type") in ("submit", "button", "reset"):
                self.texts.append(named.get("value") or "")
        if tag not in VOID:
            self.stack.append((tag, kept))

    def handle_endtag(self, tag: str) -> None:
        for index in range(len(self.stack) - 1, -1, -1):
            if self.stack[index][0] == tag:
                del self.stack[index:]
                return

    def handle_data(self, data: str) -> None:
        if not self._kept():
            self.texts.append(data)


def page_text(page: str) -> str:
    """The text of `page` (and its read attributes) outside `translate="no"`, script and style."""
    parser = _Text()
    parser.feed(page)
    parser.close()
    return " ".join(" ".join(parser.texts).split())


def english_words(text: str) -> list[str]:
    """The words of `text` that are English (not a name or code of ALLOWED)."""
    return [word for word in WORD.findall(text) if word not in ALLOWED]


def english_left(page: str) -> list[str]:
    """The English words a reader of `page` in another language would meet, in page order."""
    return english_words(page_text(page))
