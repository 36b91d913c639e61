"""This process's name in the record: host, pid and a token of its own.

Host and pid alone do not tell processes apart across machines: containers on two hosts may share
a hostname and all be pid 1. The token (random, made once per process, again in a forked child)
does. Leases, claims and the log name their holder with it.
"""

from __future__ import annotations

import os
import secrets
import socket

_identity: str | None = None


def process_identity() -> str:
    """`host:pid:token`, the same for the life of this process."""
    global _identity
    if _identity is None:
        _identity = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
    return _identity


def _forgotten() -> None:
    global _identity
    _identity = None


os.register_at_fork(after_in_child=_forgotten)
