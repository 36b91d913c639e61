"""Guessing is throttled: failed password and bearer-token attempts (and single sign-on callbacks
that sign nobody in, per address: agentops.login) are counted in Redis, and a key
(an account from one client address, a client address) that fails too often in a window is
locked out for a while. An account is counted per address, never alone: a lockout of the account
itself would let anyone lock a colleague out by guessing at their username, from anywhere.

A lockout that follows soon after the previous one on the same key is twice as long (up to a
ceiling), so a guesser is slowed, then refused for longer and longer, while nobody's request ever
waits in a web thread: the refusal itself says when to come back. Successful attempts are never
counted. The counters are ephemeral by design: Redis stays transport, never the truth, and losing
them (a flush, an outage) only resets the limits. When Redis does not answer, attempts are let
through and the lapse is logged, so a Redis outage never locks everyone out.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import logging
import math
import time
from dataclasses import dataclass
from enum import StrEnum

import redis
from django.conf import settings
from django.http import HttpRequest
from django.utils.translation import ngettext
from redis.backoff import NoBackoff
from redis.commands.core import Script
from redis.exceptions import RedisError
from redis.retry import Retry

logger = logging.getLogger(__name__)

PREFIX = "agentops:throttle:"
# A deadline on every Redis call, retried once (a pooled connection may be stale): a stuck Redis
# must not hold a sign-in for long.
REDIS_TIMEOUT_SECONDS = 0.5
# After Redis failed to answer, this process leaves it alone (and says so once) for this long, so
# an outage costs each request nothing rather than a timeout per call.
LAPSE_SECONDS = 10.0

_lapsed_until: dict[str, float] = {}

# KEYS: failures, lock, strikes. ARGV: attempts, window ms, first lockout ms, longest lockout ms.
# Counts one failure; at the limit, starts a lockout twice as long as the previous one (when that
# one ended less than a window ago) and returns its length in ms, else 0.
_FAIL = """
local failures = redis.call('INCR', KEYS[1])
if failures == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if failures < tonumber(ARGV[1]) then return {failures, 0} end
redis.call('DEL', KEYS[1])
local strikes = redis.call('INCR', KEYS[3])
local lockout = math.floor(math.min(tonumber(ARGV[3]) * 2 ^ (strikes - 1), tonumber(ARGV[4])))
redis.call('SET', KEYS[2], strikes, 'PX', lockout)
redis.call('PEXPIRE', KEYS[3], lockout + tonumber(ARGV[2]))
return {failures, lockout}
"""


class Scope(StrEnum):
    """What is counted: failed logins per account from one address and per address, bad tokens
    per address."""

    LOGIN_ACCOUNT = "login.account"
    LOGIN_ADDRESS = "login.address"
    API_ADDRESS = "api.address"

    @property
    def attempts(self) -> int:
        setting = {
            Scope.LOGIN_ACCOUNT: "LOGIN_USER_ATTEMPTS",
            Scope.LOGIN_ADDRESS: "LOGIN_ADDRESS_ATTEMPTS",
            Scope.API_ADDRESS: "API_ADDRESS_ATTEMPTS",
        }[self]
        return int(settings.AGENTOPS[setting])


@dataclass(frozen=True)
class Key:
    """One counted thing: a scope and what it counts (a username as typed with an address, or an
    address)."""

    scope: Scope
    subject: str

    def redis_key(self, kind: str) -> str:
        # Hashed: a username is anything a stranger types. The braces keep a key's three parts
        # in one Redis Cluster slot, as the script needs.
        digest = hashlib.sha256(self.subject.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return f"{PREFIX}{{{self.scope}:{digest}}}:{kind}"


def account_key(username: str, address: str) -> Key:
    """The sign-in attempts at `username` from the client at `address`."""
    return Key(Scope.LOGIN_ACCOUNT, f"{username} from {address_bucket(address)}")


def address_key(scope: Scope, address: str) -> Key:
    return Key(scope, address_bucket(address))


def client_address(request: HttpRequest) -> str:
    """The client's address: REMOTE_ADDR, or, behind `TRUSTED_PROXY_HOPS` proxies that each append
    the address they saw to X-Forwarded-For, the entry that many from the right (what the
    outermost trusted proxy saw; entries further left are whatever the client sent)."""
    address = str(request.META.get("REMOTE_ADDR") or "")
    hops = int(settings.AGENTOPS["TRUSTED_PROXY_HOPS"])
    if hops > 0:
        forwarded = [
            part.strip()
            for part in str(request.META.get("HTTP_X_FORWARDED_FOR", "")).split(",")
            if part.strip()
        ]
        if forwarded:
            address = forwarded[max(len(forwarded) - hops, 0)]
    return address


def address_bucket(address: str) -> str:
    """What is counted for an address: the address itself, an IPv6 client's whole /64 (one
    subscriber usually holds one, so counting single addresses would be no limit at all)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:100] or "unknown"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def throttle_wait(keys: list[Key]) -> int:
    """Seconds until every key in `keys` is out of lockout; 0 when none is locked."""
    keys = _counted(keys)
    if not keys:
        return 0
    try:
        pipe = _redis().pipeline(transaction=False)
        for key in keys:
            pipe.pttl(key.redis_key("lock"))
        remaining = pipe.execute()
    except RedisError as error:
        _lapse(error)
        return 0
    return _seconds(max(int(ms) for ms in remaining))


def throttle_fail(keys: list[Key], *, client: str, username: str | None = None) -> int:
    """Count one failed attempt against each key; the seconds of the longest lockout that this
    failure started (each lockout is logged once, without any secret), or 0."""
    keys = _counted(keys)
    if not keys:
        return 0
    limits = _limits_ms()
    try:
        pipe = _redis().pipeline(transaction=False)
        for key in keys:
            _fail_script()(
                keys=[key.redis_key(kind) for kind in ("fail", "lock", "strikes")],
                args=[key.scope.attempts, *limits],
                client=pipe,
            )
        outcomes = pipe.execute()
    except RedisError as error:
        _lapse(error)
        return 0
    longest = 0
    for key, (failures, lockout_ms) in zip(keys, outcomes, strict=True):
        if lockout_ms:
            seconds = _seconds(int(lockout_ms))
            longest = max(longest, seconds)
            _log_lockout(
                key, client=client, username=username, failures=int(failures), seconds=seconds
            )
    return longest


def throttle_forget(keys: list[Key]) -> None:
    """Clear the failures, lockouts and escalation of `keys` (after a successful login, or an
    operator's `manage.py throttle clear`)."""
    names = [key.redis_key(kind) for key in keys for kind in ("fail", "lock", "strikes")]
    try:
        if names:
            _redis().delete(*names)
    except RedisError as error:
        _lapse(error)


def throttle_state(key: Key) -> tuple[int, int]:
    """(failures counted in the current window, seconds of lockout left) for `key`."""
    pipe = _redis().pipeline(transaction=False)
    pipe.get(key.redis_key("fail"))
    pipe.pttl(key.redis_key("lock"))
    failures, lock_ms = pipe.execute()
    return int(failures or 0), _seconds(int(lock_ms))


def throttle_forget_all() -> int:
    """Clear every counter and lockout; returns how many Redis keys went."""
    client = _redis()
    names = list(client.scan_iter(match=f"{PREFIX}*", count=1000))
    for start in range(0, len(names), 1000):
        client.delete(*names[start : start + 1000])
    return len(names)


def minutes_text(seconds: int) -> str:
    """How long a lockout lasts, in whole minutes, in the request's language."""
    minutes = max(1, math.ceil(seconds / 60))
    return ngettext("%(count)d minute", "%(count)d minutes", minutes) % {"count": minutes}


def _counted(keys: list[Key]) -> list[Key]:
    """The keys whose scope is limited (a limit of 0 attempts turns that scope off)."""
    return [key for key in keys if key.scope.attempts > 0]


def _limits_ms() -> tuple[int, int, int]:
    config = settings.AGENTOPS
    window = float(config["THROTTLE_WINDOW_SECONDS"])
    lockout = float(config["THROTTLE_LOCKOUT_SECONDS"])
    longest = max(float(config["THROTTLE_LOCKOUT_MAX_SECONDS"]), lockout)
    return max(1, round(window * 1000)), max(1, round(lockout * 1000)), round(longest * 1000)


def _seconds(ms: int) -> int:
    return math.ceil(ms / 1000) if ms > 0 else 0


@functools.cache
def _client(url: str) -> redis.Redis[bytes]:
    return redis.Redis.from_url(
        url,
        socket_timeout=REDIS_TIMEOUT_SECONDS,
        socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
        retry=Retry(NoBackoff(), 1),
    )


def _redis() -> redis.Redis[bytes]:
    """The throttle's Redis client; raises RedisError while an outage is being sat out."""
    url = settings.REDIS_URL
    if time.monotonic() < _lapsed_until.get(url, 0.0):
        raise _Lapsed
    return _client(url)


class _Lapsed(RedisError):
    """Redis failed to answer a moment ago: not asked again yet."""


@functools.cache
def _script(url: str) -> Script:
    return _client(url).register_script(_FAIL)


def _fail_script() -> Script:
    return _script(settings.REDIS_URL)


def _log_lockout(
    key: Key, *, client: str, username: str | None, failures: int, seconds: int
) -> None:
    logger.warning(
        "agentops.plumbing.throttle.locked: too many failed attempts",
        extra={
            "scope": str(key.scope),
            "client": client,
            # The username is what an operator clears the lockout by; the password never
            # reaches this module, and neither does a token.
            "username": username if key.scope == Scope.LOGIN_ACCOUNT else None,
            "failures": failures,
            "lockout_seconds": seconds,
        },
    )


def _lapse(error: RedisError) -> None:
    if isinstance(error, _Lapsed):
        return
    _lapsed_until[settings.REDIS_URL] = time.monotonic() + LAPSE_SECONDS
    logger.error(
        "agentops.throttle.unavailable: Redis did not answer (%s); attempts are not limited "
        "for the next %g seconds",
        error.__class__.__name__,
        LAPSE_SECONDS,
    )
