#!/usr/bin/env python
"""Django's command-line utility for a checkout; an installed wheel has the same as `agentops`."""

from __future__ import annotations

from agentops.cli import main

if __name__ == "__main__":
    main()
