"""The RQ queue and its Redis client: one client per process and connection settings.

`django_rq.get_queue` builds a new Redis client, with a connection pool of its own, on every call
(django-rq #210), so every enqueue, every sweep's look at the queue and every health check opened
a new TCP connection to Redis and dropped it again. The queue here is built on one client per
process (redis-py's pool is safe across threads, and a forked child opens connections of its
own); a connection that a Redis restart broke is replaced on the next command (redis-py retries
a connection error on a new connection).
"""

from __future__ import annotations

import functools

import django_rq
from django_rq.connection_utils import filter_connection_params
from django_rq.settings import QUEUES
from redis import Redis
from rq.queue import Queue

DEFAULT = "default"


def redis_client(name: str = DEFAULT) -> Redis[bytes]:
    """The Redis client of queue `name`'s connection settings (RQ_QUEUES), made once per process."""
    params = filter_connection_params(QUEUES[name])
    return _client(tuple(sorted((key, repr(value)) for key, value in params.items())), name)


@functools.cache
def _client(settings_key: tuple[tuple[str, str], ...], name: str) -> Redis[bytes]:
    del settings_key  # the cache's key: a queue whose settings changed gets a client of its own
    return django_rq.get_connection(name)


def queue(name: str = DEFAULT) -> Queue:
    """The RQ queue `name` on this process's client."""
    return django_rq.get_queue(name, connection=redis_client(name))
