"""Settings for the test suite: development mode on the same settings as production.

`AGENTOPS_DEV=1` is set in the environment, so the processes the tests start (workers, the
sweeper, the simulated services) inherit it. Test runs keep the database limits but allow a test
transaction to stay idle longer (a test may wait on a process while it holds one).
"""

from __future__ import annotations

import os

os.environ["AGENTOPS_DEV"] = "1"
os.environ.setdefault("AGENTOPS_DB_IDLE_IN_TRANSACTION_TIMEOUT", "120s")
# On the embedded Redis, tests flush a database of their own, not the one `make run` uses.
os.environ.setdefault("AGENTOPS_EMBEDDED_REDIS_DB", "15")

from agentops.settings import *  # noqa: F403
