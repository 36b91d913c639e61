"""A worker process whose registry also holds `tests.agentops.traced_agent`'s agent. Run as
`python -m tests.agentops.traced_worker [worker options]` with the environment of
`tests.conftest.Processes`.
"""

from __future__ import annotations

import os
import sys

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
    django.setup()
    from django.core.management import call_command

    import tests.agentops.traced_agent  # noqa: F401 - registers the agent

    call_command("worker", *sys.argv[1:])


if __name__ == "__main__":
    main()
