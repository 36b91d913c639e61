"""How a plan repair is told to people: each line of its diff, and why a step goes. Phrases
(policies.phrases): English as a string, which the record keeps (a removed step's `spec.removed`),
rendered in the reader's language on a page with titles, instructions and names as written.
"""

from __future__ import annotations

from typing import Any

from policies.phrases import Phrase, gettext_noop


def change_text(change: dict[str, Any]) -> str:
    """One line of the diff, as a person reads it: a Phrase, English as a string, rendered in the
    reader's language on a page with the titles, instructions and names as written."""
    op, step, title = change["op"], change.get("step"), change.get("title", "")
    if op == "instruct":
        return Phrase(
            gettext_noop("step %(step)s '%(title)s': instruction %(before)s -> %(after)s"),
            {
                "step": step,
                "title": title,
                "before": repr(change["before"]),
                "after": repr(change["after"]),
            },
        )
    if op == "insert" and change.get("tool"):
        return Phrase(
            gettext_noop("new step %(step)s '%(title)s' (%(tool)s)"),
            {"step": step, "title": title, "tool": change["tool"]},
        )
    if op == "insert":
        return Phrase(
            gettext_noop("new step %(step)s '%(title)s' (no tool)"), {"step": step, "title": title}
        )
    if op == "move":
        return Phrase(
            gettext_noop("step %(from)s '%(title)s' is now step %(step)s"),
            {"from": change["from"], "title": title, "step": step},
        )
    if op == "remove":
        return Phrase(
            gettext_noop("step %(step)s '%(title)s' removed (%(why)s)"),
            {"step": step, "title": title, "why": change.get("why", "")},
        )
    if op == "depends" and change["after"]:
        return Phrase(
            gettext_noop("step %(step)s '%(title)s' now depends on %(after)s"),
            {"step": step, "title": title, "after": change["after"]},
        )
    if op == "depends":
        return Phrase(
            gettext_noop("step %(step)s '%(title)s' now depends on nothing"),
            {"step": step, "title": title},
        )
    if op == "strategy":
        return Phrase(
            gettext_noop("strategy %(before)s -> %(after)s"),
            {"before": change["before"], "after": change["after"]},
        )
    return str(change)


def replaced_by(strategy: str) -> Phrase:
    """Why the stuck step goes when another strategy replaces it (its `spec.removed`)."""
    return Phrase(gettext_noop("replaced by strategy %(strategy)s"), {"strategy": strategy})


def not_in(strategy: str) -> Phrase:
    """Why an open step goes when another strategy has no such step (its `spec.removed`)."""
    return Phrase(gettext_noop("not in strategy %(strategy)s"), {"strategy": strategy})
