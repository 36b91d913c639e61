"""Commits as the code sees them, in a test wrapped in a transaction that is rolled back.

A rollback-isolated test runs inside atomic blocks of its own (Django marks them
`_from_testcase`), so nothing the code does ever commits, and `transaction.on_commit` callbacks
(the engine's enqueue of a task's next slice, the metrics counted once a checkpoint commits)
would never run. `code_commits()` makes them run when the code's own transaction would have
committed: at once when the code registers one outside any block of its own (autocommit, for
the code), and when the code's outermost block exits without error. Blocks of the code that roll
back drop their callbacks, as Django does. Nothing here is used outside the tests; production
code keeps Django's own rules (tests/test_boundaries.py and tests/agentops/test_outbound.py
prove that the transaction checks still refuse there).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.transaction import Atomic


def only_testcase_blocks(connection: BaseDatabaseWrapper) -> bool:
    """True when blocks are open on `connection` and every one is the test case's own."""
    blocks = connection.atomic_blocks
    return bool(blocks) and all(getattr(block, "_from_testcase", False) for block in blocks)


@contextmanager
def code_commits(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    original_on_commit = BaseDatabaseWrapper.on_commit
    original_exit = Atomic.__exit__

    def on_commit(self: BaseDatabaseWrapper, func: Callable[[], Any], robust: bool = False) -> None:
        original_on_commit(self, func, robust)
        if only_testcase_blocks(self):
            _run_pending(self)

    def exit(self: Atomic, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        original_exit(self, exc_type, exc_value, traceback)
        if getattr(self, "_from_testcase", False) or exc_type is not None:
            return
        connection = transaction.get_connection(self.using)
        if only_testcase_blocks(connection) and not connection.needs_rollback:
            _run_pending(connection)

    monkeypatch.setattr(BaseDatabaseWrapper, "on_commit", on_commit)
    monkeypatch.setattr(Atomic, "__exit__", exit)
    yield


def _run_pending(connection: BaseDatabaseWrapper) -> None:
    """Run (and forget) the callbacks registered so far, as a commit would."""
    while connection.run_on_commit:
        _, func, robust = connection.run_on_commit.pop(0)
        if robust:
            try:
                func()
            except Exception:  # as Django does with robust callbacks: logged, not raised
                import logging

                logging.getLogger("django.db.backends.base").exception("on_commit callback")
        else:
            func()
