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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Page

# Names and codes that are the same in any language.
ALLOWED = frozenset(
    {
        "agentops",  # the product's name
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


# The same reading in a browser, on the page as laid out: the text of the elements someone can see
# (not hidden by `hidden`, `display: none` or `visibility: hidden`, nor in a closed `<details>`)
# and the read attributes of those elements, outside `translate="no"`, script and style. `READ`
# is READ_ATTRIBUTES; the elements read are those of `within` (a CSS selector) but not of
# `outside` (one, or null). A select's options count when the select can be seen (the options
# of a closed select have no box of their own). Returns the texts in page order, each with
# whether it is an attribute's, and the text of the page's `translate="no"` elements someone sees.
VISIBLE_TEXT = """([READ, within, outside]) => {
  const SKIPPED = new Set(['SCRIPT', 'STYLE', 'TEMPLATE', 'NOSCRIPT']);
  const seen = element => {
    const box = element.closest('select') || element;
    return box.checkVisibility({visibilityProperty: true});
  };
  // The text of a closed <details> beside its summary is not shown (its elements are not seen).
  const laid = text => !(text.parentElement.tagName === 'DETAILS' && !text.parentElement.open);
  const texts = [];
  const walk = element => {
    if (SKIPPED.has(element.tagName) || element.getAttribute('translate') === 'no') return;
    if ((outside && element.matches(outside)) || !seen(element)) return;
    for (const name of READ) {
      if (element.hasAttribute(name)) texts.push([element.getAttribute(name), true]);
    }
    if (element.tagName === 'OPTGROUP' && element.label) texts.push([element.label, false]);
    if (element.tagName === 'INPUT' && ['submit', 'button', 'reset'].includes(element.type)) {
      texts.push([element.value, false]);
    }
    for (const child of element.childNodes) {
      if (child.nodeType === Node.TEXT_NODE && laid(child)) texts.push([child.data, false]);
      else if (child.nodeType === Node.ELEMENT_NODE) walk(child);
    }
  };
  const roots = [...document.querySelectorAll(within)];
  roots.filter(root => !roots.some(other => other !== root && other.contains(root))).forEach(walk);
  const kept = [...document.querySelectorAll('[translate="no"]')]
    .filter(element => element.checkVisibility({visibilityProperty: true}))
    .map(element => element.textContent);
  return {texts: texts.filter(([text]) => text.trim()), kept};
}"""


def english_seen(
    page: Page, *, within: str = "body", outside: str | None = None, title: bool = True
) -> list[str]:
    """The English words someone reading `page` (a Playwright page, as it is now) meets: in its
    title (the tab's) unless `title` is false, and in the elements of the CSS selector `within`
    that are not in those of `outside`.

    A title or an attribute cannot mark part of itself `translate="no"`: in them, a word the page
    shows as written (in a `translate="no"` element someone sees) is that name again (a policy's
    name in the tab's title, the signed-in person's in the account link's), not English."""
    read = page.evaluate(VISIBLE_TEXT, [list(READ_ATTRIBUTES), within, outside])
    names = set(WORD.findall(" ".join(read["kept"])))
    texts = [(page.title(), True)] if title else []
    texts.extend((text, attribute) for text, attribute in read["texts"])
    return [
        word
        for text, attribute in texts
        for word in english_words(text)
        if not (attribute and word in names)
    ]
