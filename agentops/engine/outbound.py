"""The rule every outbound call keeps: none is made with a database transaction open.

A model call, a tool call, a probe or a notification waits on a remote that may hang until its
deadline (each client's timeout; docs/operations.md lists them). Made inside a transaction, that
wait would hold the transaction and its row locks and stall every worker that needs the rows, so
phases before and after a call commit on their own and the call runs between them. The engine's
calls pass through `Heartbeat.call()`, notifications through their sender: both check here.
"""

from __future__ import annotations

import functools
import ssl

import httpx
from django.db import DEFAULT_DB_ALIAS, connections


class OutboundInTransaction(RuntimeError):
    """A programming error: an outbound call was about to be made inside a transaction."""


def in_transaction() -> bool:
    """True when a transaction of the code is open on this thread's connection. The transaction a
    rollback-isolated test wraps around each test does not count (Django marks it, as it does to
    let a durable block run inside it). The connection itself is read once, not through the
    `connection` proxy (a thread-local lookup per attribute): the runner asks twice a step."""
    db = connections[DEFAULT_DB_ALIAS]
    return db.in_atomic_block and any(
        not getattr(block, "_from_testcase", False) for block in db.atomic_blocks
    )


def outbound_check(what: str) -> None:
    """Raise OutboundInTransaction unless `what`, an outbound call, may be made now."""
    if in_transaction():
        raise OutboundInTransaction(
            f"{what} would wait on a remote inside a database transaction; commit first"
        )


@functools.cache
def outbound_tls() -> ssl.SSLContext:
    """The TLS context of the calls made with `httpx.post` (notifications, Slack): httpx's
    default, verifying against its CA bundle, built once per process. A call without it builds
    its own, and building one loads the whole bundle (some 30 ms of CPU a call)."""
    return httpx.create_ssl_context()
