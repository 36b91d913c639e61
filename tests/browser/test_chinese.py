"""Every page, as every role sees it, in Simplified Chinese: a browser whose language is zh-Hans
(Playwright's `zh-CN` locale, and Accept-Language `zh-Hans,zh;q=0.9`) is answered in zh-hans, and
nothing a person reads on the page is English, apart from what stays as written: the record
(goals, tool arguments, decisions' reasons), names and codes, each marked `translate="no"` in the
templates, and the few names of tests/english.py's ALLOWED. A stop is in force, so the banner every
page then shows is read too. Each page also fits a 390 px phone and
a 1280 px screen in Chinese (the width check of test_accessibility.py).

The pages, their rows and the roles are tests/browser/sweep.py's. What is read is the page as laid
out, at each width: the text of the elements someone can see and the attributes people read
(tests/english.py, `english_seen`), with folded details open. One browser; each role signs in
through the login form (in Chinese) and opens each page once. The sign-in form, the 403 and 404
pages (the pages a role is refused) and the CSRF failure page are read too.
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from reviews.services.stops import fleet_stop_apply
from tests.browser.conftest import ACTION_TIMEOUT_MS, VIEWPORT
from tests.browser.sweep import (
    DETAILS_OPEN,
    REFUSED,
    ROLES,
    SETTLED,
    overflowing,
    pages_made,
    signed_in_by_form,
)
from tests.english import english_seen

pytestmark = [pytest.mark.browser]

# A browser set to Simplified Chinese.
CHINESE_BROWSER: dict[str, Any] = {
    "locale": "zh-CN",
    "extra_http_headers": {"Accept-Language": "zh-Hans,zh;q=0.9"},
}
# The language Django must answer it in (settings.LANGUAGES).
CHINESE = "zh-hans"
# How many of a page's English words a failure names.
SHOWN_WORDS = 20


@pytest.fixture
def pages(roles: None, sim: str, django_user_model: Any) -> dict[str, str]:
    """The product's pages over rows the engine made, with a stop in force (its banner is on
    every page): of an agent none of the tasks runs, so it pauses none of them; name -> path."""
    made = pages_made(django_user_model)
    on_call = django_user_model.objects.get(username=ROLES["operator on call"][0])
    stop = fleet_stop_apply(
        scope="agent", target="procurement", reason="Supplier outage", actor=on_call
    )
    assert stop.paused == [] and stop.running == []
    return made


# The frame of every page (templates/base.html): the skip link, the header with the navigation
# and the account, the banner of a stop in force. Read once per role, apart from each page's own.
FRAME = "body > .skip-link, body > header, body > .fleet-stop-banner"
FRAME_NAME = "every page's frame (templates/base.html)"


class Reading:
    """What a sweep found: per page (the 403 and 404 pages apart from the page refused), per
    role, the English words met (in page order, each once), the pages answered in another
    language, and the pages wider than the screen."""

    def __init__(self) -> None:
        self.english: dict[str, dict[str, list[str]]] = {}
        self.languages: list[str] = []
        self.overflowing: list[str] = []

    def read(self, page: Page, name: str, role: str, status: int, language: str | None) -> None:
        """Read `page` as it is now, at each width; `status` and `language` (Content-Language)
        are its response's."""
        lang = page.evaluate("() => document.documentElement.lang")
        if (lang, language) != (CHINESE, CHINESE):
            self.languages.append(
                f"{name} as {role}: <html lang={lang!r}>, Content-Language {language!r}"
            )
        own: list[str] = []
        frame: list[str] = []

        def read_here() -> None:
            own.extend(english_seen(page, outside=FRAME))
            frame.extend(english_seen(page, within=FRAME, title=False))

        page.evaluate(DETAILS_OPEN)
        self.overflowing.extend(
            f"{line} (as {role})" for line in overflowing(page, name, at_each=read_here)
        )
        if status == 200:
            self._met(name, role, own)
        else:
            self._met(f"the {status} page", f"{role} ({name})", own)
        self._met(FRAME_NAME, role, frame)

    def _met(self, name: str, who: str, words: list[str]) -> None:
        if words:
            met = self.english.setdefault(name, {})
            met[who] = list(dict.fromkeys([*met.get(who, []), *words]))

    def english_report(self) -> str:
        """Per page, the roles that met the same English words, and the first of those words."""
        lines = []
        for name, by_role in sorted(self.english.items()):
            lines.append(f"{name}:")
            alike: dict[tuple[str, ...], list[str]] = {}
            for who, words in by_role.items():
                alike.setdefault(tuple(words), []).append(who)
            for words_met, who in alike.items():
                more = len(words_met) - SHOWN_WORDS
                lines.append(
                    f"  as {', '.join(who)}: {' '.join(words_met[:SHOWN_WORDS])}"
                    + (f" (and {more} more)" if more > 0 else "")
                )
        return "\n".join(lines)


def csrf_refused(page: Page) -> str | None:
    """The CSRF failure page: the login form sent without its token and cookie. Returns the
    response's Content-Language."""
    page.goto("/login/")
    page.context.clear_cookies()
    page.locator("input[name=csrfmiddlewaretoken]").evaluate("input => input.remove()")
    page.locator("input[name=username]").fill("nobody")
    page.locator("input[name=password]").fill("nothing")
    with page.expect_response(lambda response: response.request.method == "POST") as posted:
        page.locator("form[action='/login/'] button[type=submit]").click()
    page.wait_for_load_state()
    assert posted.value.status == 403
    return posted.value.header_value("content-language")


@pytest.mark.django_db(transaction=True)
def test_every_page_reads_in_chinese_for_every_role_and_fits_a_phone_and_a_laptop(
    chromium: Browser, live_server: Any, pages: dict[str, str]
):
    reading = Reading()
    statuses: dict[str, dict[str, int]] = {}
    for role, (username, _groups) in ROLES.items():
        context = chromium.new_context(
            viewport=VIEWPORT, base_url=live_server.url, **CHINESE_BROWSER
        )
        context.set_default_timeout(ACTION_TIMEOUT_MS)
        page = context.new_page()
        try:
            if username is not None:
                signed_in_by_form(page, username)
            statuses[role] = {}
            for name, path in pages.items():
                response = page.goto(path)
                assert response is not None
                statuses[role][name] = response.status
                if username is None:
                    assert page.url.startswith(f"{live_server.url}/login/"), page.url
                page.wait_for_function(SETTLED)
                language = response.header_value("content-language")
                reading.read(page, name, role, response.status, language)
            if username is None:
                language = csrf_refused(page)
                reading.read(page, "the CSRF failure page", role, 200, language)
        finally:
            context.close()
    refused = {
        role: {name for name, status in by_page.items() if status != 200}
        for role, by_page in statuses.items()
    }
    unexpected = {
        role: f"refused {sorted(refused[role] - REFUSED[role])}, "
        f"opened {sorted(REFUSED[role] - refused[role])}"
        for role in ROLES
        if refused[role] != REFUSED[role]
    }
    assert not unexpected, f"pages answered otherwise than REFUSED says: {unexpected}"
    assert not reading.languages, "pages not answered in zh-hans:\n" + "\n".join(reading.languages)
    # English and width together: a failure says all that is left to do.
    problems = []
    if reading.english:
        problems.append(
            "English left on pages read in zh-Hans (mark the string for translation, or the "
            'record with translate="no"):\n' + reading.english_report()
        )
    if reading.overflowing:
        problems.append(
            "pages wider than the screen in zh-Hans:\n" + "\n".join(reading.overflowing[:40])
        )
    assert not problems, "\n".join(problems)


# A page set in the browser: the English someone reads there, and the English they do not.
READ_AND_NOT = """<!doctype html><html lang="zh-hans"><head><title>Tab title</title></head><body>
<main><h1>任务 Heading</h1>
<p translate="no">Refund order A1001 <span>kept as written</span></p>
<p hidden>hidden words</p><p style="display: none">undisplayed words</p>
<p style="visibility: hidden">invisible words</p>
<details><summary>摘要 Summary</summary>folded words</details>
<a href="/" title="Link title" aria-label="Link label">链接</a>
<input placeholder="Placeholder words"><input type="submit" value="Submit value">
<input type="hidden" value="hidden value">
<select><option>Option words</option><option translate="no">refund</option></select>
<img alt="Image words" src="data:,"><script>var scripted = "script words";</script>
<p>API JSON agentops 2026年12月7日 18:25 UTC</p>
<p><a href="/" title="账户 olga, not vic"><span translate="no">olga</span></a></p>
<p>策略 <span translate="no">default</span> default</p></main></body></html>"""


def test_what_someone_reads_on_a_page_is_what_the_sweep_reads(chromium: Browser):
    context = chromium.new_context(viewport=VIEWPORT)
    page = context.new_page()
    try:
        page.set_content(READ_AND_NOT)
        read = english_seen(page)
        page.evaluate(DETAILS_OPEN)
        opened = english_seen(page)
        main_only = english_seen(page, within="main", outside="details, select", title=False)
    finally:
        context.close()
    # A name the page shows as written is not English in an attribute (olga), but is in text
    # (default, outside its span) and where the page does not show it so (not, vic).
    shown = [
        *("Tab", "title", "Heading", "Summary", "Link", "title", "Link", "label"),
        *("Placeholder", "words", "Submit", "value", "Option", "words", "Image", "words"),
        *("not", "vic", "default"),
    ]
    assert read == shown
    assert opened == [*shown[:4], "folded", "words", *shown[4:]]
    assert main_only == [
        *("Heading", "Link", "title", "Link", "label", "Placeholder", "words", "Submit", "value"),
        *("Image", "words", "not", "vic", "default"),
    ]
