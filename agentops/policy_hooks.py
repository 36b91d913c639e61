"""Tell the policy engine about agentops' tools and recorded steps (`policies` imports no app).

`register()` installs two providers in `policies.catalog`: the tool registry as
`{name: (side_effect, systems)}` (a read-only view the registry keeps up to date), and the
routed steps since a time as `RecordedAction`s for dry-runs. Call it once from
`AgentopsConfig.ready()`; calling it again replaces the providers. How long people took to decide
gates comes from the gates themselves: pass `decision_seconds` (step ids -> seconds,
`agentops.engine.gates.gate_decision_seconds`) to include it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from agentops.plumbing.paging import keyset_rows
from policies import catalog
from policies.catalog import RecordedAction
from policies.engine import Action


def known_tools() -> Mapping[str, tuple[str, tuple[str, ...]]]:
    from agentops.engine.registry import tool_entries

    return tool_entries()


def step_action(
    *, agent: str, ordinal: int, response: dict[str, Any], approval: dict[str, Any] | None = None
) -> Action | None:
    """The Action a routed step took, from its recorded model response (None: no tool); built by
    `policies.catalog.action_for`, as the runner's are.

    A person's approval of the step (possibly with edited arguments) wins over the proposal: the
    action is judged by the arguments the ledger ran and carries the edit flag."""
    calls = response.get("tool_calls") or []
    if not calls:
        return None
    name = str(calls[0].get("name", ""))
    arguments = calls[0].get("arguments")
    edited = bool(response.get("edited", False))
    if isinstance(approval, dict) and approval.get("tool") == name:
        arguments = approval.get("arguments") or arguments
        edited = edited or bool(approval.get("edited"))
    confidence = response.get("confidence")
    return catalog.action_for(
        tool=name,
        arguments=arguments if isinstance(arguments, dict) else None,
        agent=agent,
        step=ordinal,
        confidence=float(confidence) if isinstance(confidence, (int, float)) else None,
        edited=edited,
    )


DecisionSeconds = Callable[[list[int]], Mapping[int, float]]
CHUNK = 500


def _chunks(rows: Iterable[tuple[Any, ...]]) -> Iterator[list[tuple[Any, ...]]]:
    chunk: list[tuple[Any, ...]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def recorded_actions(
    since: datetime, *, decision_seconds: DecisionSeconds | None = None
) -> Iterator[RecordedAction]:
    """Every step routed since `since` (it has a route and a recorded model response), with the
    time a person took to decide it when `decision_seconds` knows it (one lookup per chunk)."""
    from agentops.engine.model import loaded_response
    from agentops.models import Step

    rows = (
        Step.objects.filter(started_at__gte=since, model_response__isnull=False)
        .exclude(route="")
        .values_list(
            "pk", "task__agent", "ordinal", "route", "started_at", "model_response", "approval"
        )
    )
    ordered = keyset_rows(
        rows, order=("started_at", "pk"), size=CHUNK, key=lambda row: (row[4], row[0])
    )
    for chunk in _chunks(ordered):
        decided = decision_seconds([row[0] for row in chunk]) if decision_seconds else {}
        for pk, agent, ordinal, route, started_at, record, approval in chunk:
            response = loaded_response(record)
            if not isinstance(response, dict):
                continue
            action = step_action(agent=agent, ordinal=ordinal, response=response, approval=approval)
            if action is not None:
                yield RecordedAction(
                    action=action, routed=route, decided_seconds=decided.get(pk), at=started_at
                )


def register(*, decision_seconds: DecisionSeconds | None = None) -> None:
    def history(since: datetime) -> Iterator[RecordedAction]:
        return recorded_actions(since, decision_seconds=decision_seconds)

    catalog.register(tools=known_tools, history=history)
