"""The RQ queues and their Redis client: one client per process.

`django_rq.get_queue` builds a new Redis client, with a connection pool of its own, on every call
(django-rq #210), so every enqueue, every sweep's look at the queue and every health check opened
a new TCP connection to Redis and dropped it again. The queue here is built on one client per
process (redis-py's pool is safe across threads, and a forked child opens connections of its
own); a connection that a Redis restart broke is replaced on the next command (redis-py retries
a connection error on a new connection). django-rq reads RQ_QUEUES once, at import, so the
client's settings cannot change under it.

Every command on that client answers within `DEADLINE_SECONDS` or raises `redis.TimeoutError`: a
Redis that accepts connections and never answers must not hold a web request, a readiness probe
or a sweep for longer. (The worker's own connection, rq's, raises its timeout above the blocking
pop's when it starts.)
"""

from __future__ import annotations

import functools

import django_rq
from redis import Redis
from rq.queue import Queue

# Queues by kind, each with workers of its own (`manage.py worker --queues ...`): a step's job
# never waits behind a notice whose receiver hangs until its timeout.
STEPS = "default"
NOTICES = "notices"
KINDS = (STEPS, NOTICES)
# A command or a connect that takes longer fails (commands are a few small round trips).
DEADLINE_SECONDS = 2.0


@functools.cache
def redis_client() -> Redis[bytes]:
    """The Redis client of the queue's connection settings (RQ_QUEUES), made once per process."""
    return with_deadline(django_rq.get_connection(STEPS))


def with_deadline(client: Redis[bytes]) -> Redis[bytes]:
    """`client`, its connections made from now on bound by `DEADLINE_SECONDS` (django-rq takes
    no timeout with a URL; rq's worker sets its own the same way)."""
    client.connection_pool.connection_kwargs.update(
        socket_timeout=DEADLINE_SECONDS, socket_connect_timeout=DEADLINE_SECONDS
    )
    return client


def queue(name: str = STEPS) -> Queue:
    """The RQ queue `name` (the steps' unless said) on this process's client."""
    return django_rq.get_queue(name, connection=redis_client())
