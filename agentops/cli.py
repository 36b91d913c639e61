"""The `agentops` command (and `manage.py` in a checkout): Django's management commands with the
product's settings.

`agentops embedded status|stop` runs without loading Django: the settings start the embedded
servers, and a status or a stop must not.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    if sys.argv[1:2] == ["embedded"]:
        from agentops.dev.embedded import command

        command(sys.argv[2:])
        return
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
