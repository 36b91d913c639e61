"""A worker process whose registry holds a re-declared trip agent: what a deploy that changed the
agent's prompt starts. Run as `python -m tests.agentops.redeclared_worker [--burst]` with the
environment of `tests.conftest.Processes`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace

import django

EXTRA_PROMPT = " Prefer aisle seats."


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
    django.setup()
    from django.core.management import call_command

    from agentops.engine.registry import get_agent, register_agent

    trip = get_agent("trip")
    register_agent(replace(trip, system_prompt=trip.system_prompt + EXTRA_PROMPT))
    call_command("worker", *sys.argv[1:])


if __name__ == "__main__":
    main()
