"""Settings for the test suite: development mode on the same settings as production.

`AGENTOPS_DEV=1` is set in the environment, so the processes the tests start (workers, the
sweeper, the simulated services) inherit it. Test runs keep the database limits but allow a test
transaction to stay idle longer (a test may wait on a process while it holds one).

Under pytest-xdist (`make test` runs workers in parallel) each worker has a database of its own
(pytest-django suffixes the test database's name with `_gwN`; tests/conftest.py copies it from
one migrated template) and a Redis database of its own,
numbered here: a worker's tests flush their Redis database, and must not flush another's queue.
"""

from __future__ import annotations

import os
import re

os.environ["AGENTOPS_DEV"] = "1"
os.environ.setdefault("AGENTOPS_DB_IDLE_IN_TRANSACTION_TIMEOUT", "120s")

# Redis has databases 0-15. The suite's own is 15 on the embedded Redis (not the one `make run`
# uses) or REDIS_URL's; xdist worker gwN takes the one N places below it.
REDIS_DATABASES = 16
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ... or unset


def xdist_worker_number(worker: str) -> int:
    """0 for `gw0` and for a run without xdist; N for `gwN`."""
    return int(worker[2:]) if re.fullmatch(r"gw\d+", worker) else 0


def redis_db_shifted(url: str, places: int) -> str:
    """`url` naming the Redis database `places` below its own (`redis://h:p/3`, or `?db=3`)."""
    if match := re.search(r"([?&]db=)(\d+)", url):
        db = (int(match.group(2)) - places) % REDIS_DATABASES
        return f"{url[: match.start(2)]}{db}{url[match.end(2) :]}"
    head, _, query = url.partition("?")
    base, slash, db_text = head.rpartition("/")
    if not slash or not db_text.isdigit() or base.endswith("/"):
        base, db_text = head.rstrip("/"), "0"
    db = (int(db_text) - places) % REDIS_DATABASES
    return f"{base}/{db}" + (f"?{query}" if query else "")


# Once per worker: the processes a test starts inherit the environment (REDIS_URL as already
# chosen, and this mark), so they choose nothing again.
if XDIST_WORKER and os.environ.get("AGENTOPS_TEST_REDIS_WORKER") != XDIST_WORKER:
    _places = xdist_worker_number(XDIST_WORKER)
    if "REDIS_URL" in os.environ:
        os.environ["REDIS_URL"] = redis_db_shifted(os.environ["REDIS_URL"], _places)
    else:
        os.environ["AGENTOPS_EMBEDDED_REDIS_DB"] = str(15 - _places)
    os.environ["AGENTOPS_TEST_REDIS_WORKER"] = XDIST_WORKER
os.environ.setdefault("AGENTOPS_EMBEDDED_REDIS_DB", "15")

from agentops.settings import *  # noqa: E402, F403

# The tests create many users (several per test, a role each): a fast password hasher instead of
# PBKDF2's million rounds. Only the test settings; production keeps Django's default.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
