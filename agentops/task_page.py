"""Sections other apps add to the task page, without agentops importing them.

An app registers a section in its `AppConfig.ready()`: a callable `(request, task) -> str` that
renders its HTML with a template (or returns "" to show nothing, e.g. to a reader without the
role). The task page renders
the sections in registration order, below the goal. The section checks its reader itself.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest

from agentops.models import Task

Section = Callable[[HttpRequest, Task], str]
SECTIONS: list[Section] = []


def section_register(section: Section) -> None:
    if section not in SECTIONS:
        SECTIONS.append(section)


def sections_render(request: HttpRequest, task: Task) -> list[str]:
    """The registered sections' HTML for `task`, as `request`'s user may see it (empty ones
    left out). A section renders through a template (`render_to_string`, which escapes the data
    and returns a SafeString); a plain string it returns is escaped by the page."""
    rendered = (section(request, task) for section in SECTIONS)
    return [html for html in rendered if html]
