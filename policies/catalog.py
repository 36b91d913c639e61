"""What the policy engine knows about the host's tools and history, without importing the host.

`policies` imports no other app. The host app registers two callables at startup: one returning
the known tools (`{name: (side_effect, systems)}`), one returning the recorded actions since a
time (for dry-runs). Until it does, no tool is known (every tool is unknown, hence never `auto`)
and the history is empty.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from policies.engine import Action, ToolInfo

# The side-effect classes a rule may name even before the host registers any tool of that class
# (`destructive`: a write that may delete or overwrite, which a rule can gate apart from `write`).
BASE_CLASSES = ("read", "write", "destructive", "notify", "financial")

# The host's tools, `{name: (side_effect, systems)}`: a mapping it keeps (routing looks up one
# entry per proposed call, so the provider should not build it on every call).
ToolsProvider = Callable[[], Mapping[str, tuple[str, tuple[str, ...]]]]


@dataclass(frozen=True)
class RecordedAction:
    """One routed action from history: what it was, the lane it took, how long a human took to
    decide it (gates only, None when unknown), and when it was proposed."""

    action: Action
    routed: str
    decided_seconds: float | None
    at: datetime


HistoryProvider = Callable[[datetime], Iterable[RecordedAction]]


@dataclass
class _Registry:
    tools: ToolsProvider | None = None
    history: HistoryProvider | None = None


_registry = _Registry()
_lock = threading.Lock()


def register(*, tools: ToolsProvider, history: HistoryProvider | None = None) -> None:
    """Install the host's providers, replacing any earlier ones (safe to call twice)."""
    with _lock:
        _registry.tools = tools
        _registry.history = history


def is_registered() -> bool:
    return _registry.tools is not None


def known_tools() -> dict[str, ToolInfo]:
    provider = _registry.tools
    if provider is None:
        return {}
    return {name: _info(entry) for name, entry in provider().items()}


def _info(entry: tuple[str, tuple[str, ...]]) -> ToolInfo:
    side_effect, systems = entry
    return ToolInfo(side_effect=side_effect, systems=tuple(systems))


def known_classes() -> tuple[str, ...]:
    classes = set(BASE_CLASSES) | {info.side_effect for info in known_tools().values()}
    return tuple(sorted(classes))


def tool_info(name: str) -> ToolInfo | None:
    """One tool's entry (routing asks once per proposed call): only that one is wrapped."""
    provider = _registry.tools
    entry = None if provider is None else provider().get(name)
    return None if entry is None else _info(entry)


def amount_of(arguments: Mapping[str, Any]) -> float | None:
    """The amount an action moves: its numeric `amount` argument, if it has one. An integer too
    large for a float is as large as an amount can be (infinite, with its sign): a rule "amount
    above X" holds for it."""
    value = arguments.get("amount")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def action_for(
    *,
    tool: str,
    arguments: Mapping[str, Any] | None = None,
    agent: str = "",
    step: int = 0,
    confidence: float | None = None,
    edited: bool = False,
    systems: Iterable[str] = (),
    amount: float | None = None,
) -> Action:
    """Build the Action for a proposed tool call, with the side effect and systems the catalog
    knows (an unknown tool gets side effect None) plus any `systems` given. `amount` defaults to
    the numeric `amount` argument."""
    info = tool_info(tool)
    known_systems = info.systems if info is not None else ()
    return Action(
        tool=tool,
        side_effect=info.side_effect if info is not None else None,
        systems=tuple(dict.fromkeys((*known_systems, *systems))),
        amount=amount if amount is not None else amount_of(arguments or {}),
        confidence=confidence,
        agent=agent,
        step=step,
        edited=edited,
    )


def recorded_actions(since: datetime) -> list[RecordedAction]:
    provider = _registry.history
    if provider is None:
        return []
    return [record for record in provider(since) if record.at >= since]


@contextmanager
def registered(*, tools: ToolsProvider, history: HistoryProvider | None = None) -> Iterator[None]:
    """Install providers for the duration of a block, then restore the previous ones (tests)."""
    with _lock:
        previous = (_registry.tools, _registry.history)
        _registry.tools, _registry.history = tools, history
    try:
        yield
    finally:
        with _lock:
            _registry.tools, _registry.history = previous
