"""A stop's breakpoint is stored in the decision that resolves it (`reviews.services.recovery`):
where a task no step of which is stuck stopped reads the same English whatever language the
person who resolves it reads, and their language only when it is shown."""

from __future__ import annotations

import pytest
from django.utils import translation

from agentops.engine.recovery import PHASE_WHERE, breakpoint_where
from agentops.models import Task
from agentops.states import Phase, TaskStatus
from policies.phrases import shown


@pytest.mark.parametrize("phase", [*Phase.values, ""])
def test_the_breakpoint_without_a_stuck_step_is_english_whatever_the_reader(phase: str) -> None:
    task = Task(status=TaskStatus.NEEDS_ATTENTION, phase=phase)
    english = phase.replace("_", " ") if phase else "not started"
    english = {"model_result": "model result recorded"}.get(phase, english)

    with translation.override("zh-hans"):
        where = breakpoint_where(task, None, [])
        in_chinese = shown(where)

    assert str(where) == english
    assert in_chinese != english
    assert not any("a" <= c <= "z" for c in in_chinese)


def test_every_phase_has_its_words() -> None:
    assert set(PHASE_WHERE) == set(Phase.values)
