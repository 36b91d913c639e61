#!/usr/bin/env python
from __future__ import annotations

import os
import sys


def main() -> None:
    if sys.argv[1:2] == ["embedded"]:
        # The settings start the embedded servers: their own status and stop run without them.
        from agentops.embedded import command

        command(sys.argv[2:])
        return
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
