"""The RQ queue and its Redis client: one client per process.

`django_rq.get_queue` builds a new Redis client, with a connection pool of its own, on every call
(django-rq #210), so every enqueue, every sweep's look at the queue and every health check opened
a new TCP connection to Redis and dropped it again. The queue here is built on one client per
process (redis-py's pool is safe across threads, and a forked child opens connections of its
own); a connection that a Redis restart broke is replaced on the next command (redis-py retries
a connection error on a new connection). django-rq reads RQ_QUEUES once, at import, so the
client's settings cannot change under it.
"""

from __future__ import annotations

import functools

import django_rq
from redis import Redis
from rq.queue import Queue

NAME = "default"


@functools.cache
def redis_client() -> Redis[bytes]:
    """The Redis client of the queue's connection settings (RQ_QUEUES), made once per process."""
    return django_rq.get_connection(NAME)


def queue() -> Queue:
    """The RQ queue on this process's client."""
    return django_rq.get_queue(NAME, connection=redis_client())
