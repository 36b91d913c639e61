"""Hosts of our own on this machine, for running the product on several hosts in one test.

A host is a network namespace joined to this one by a veth pair on private addresses; each process
started on it also gets a hostname and a pid space of its own, whose pid 1 is a shell that starts
it (so processes on different hosts have the same pids, as in containers; the shell rather than
the process is pid 1 because pid 1 cannot signal itself, which the crash points do). Its processes
reach PostgreSQL, Redis and the simulated services over that link only: those listen on 127.0.0.1
or on Unix sockets here, so a forwarder of ours accepts on our end of the link and passes each
connection through. Files are not isolated: a host keeps its artifacts apart only if it is given
a MEDIA_ROOT of its own.

Creating namespaces takes root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2's `ip`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

# RFC 2544's benchmarking range: no real network uses it.
ADDRESSES = ipaddress.IPv4Network("198.18.0.0/15")
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


class HostsUnavailable(RuntimeError):
    """This process may not create network namespaces (not root, or no `ip`)."""


def hosts_unavailable() -> str | None:
    """Why hosts cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "several hosts need root (network namespaces)"
    try:
        subprocess.run(["ip", "-V"], check=True, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "several hosts need iproute2's `ip`"
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise HostsUnavailable(f"ip {' '.join(args)}: {done.stderr.strip()}")


class Forwarder:
    """Accepts on (`address`, a free port) and pipes each connection to `target`: a (host, port)
    or a Unix socket's path."""

    def __init__(self, address: str, target: tuple[str, int] | str) -> None:
        self.target = target
        self.server = socket.create_server((address, 0))
        self.port: int = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = self._connect()
            except OSError:
                client.close()
                continue
            # Each small write goes out at once, as the clients' and servers' own sockets do
            # (libpq and redis-py set it): Nagle's wait here cost up to 40 ms a round trip.
            for end in (client, upstream):
                if end.family != socket.AF_UNIX:
                    end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(source, sink), daemon=True).start()

    def _connect(self) -> socket.socket:
        return connected(self.target)


def connected(target: tuple[str, int] | str) -> socket.socket:
    """A connection to `target`: a (host, port), or a Unix socket's path. Connecting gives up
    after 10 s; the connection then waits as long as its ends do (a worker's Redis connection
    is idle for 15 s at a time between jobs)."""
    if isinstance(target, str):
        upstream = socket.socket(socket.AF_UNIX)
        upstream.connect(target)
        return upstream
    upstream = socket.create_connection(target, timeout=10)
    upstream.settimeout(None)
    return upstream


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


@dataclass
class Host:
    name: str
    namespace: str
    address: str  # the host's address on its link
    gateway: str  # ours, where its forwarders listen
    forwarders: dict[tuple[str, int] | str, Forwarder] = field(default_factory=dict)

    def command(self, *argv: str) -> list[str]:
        """`argv` run on this host: in its namespace, with its hostname, as pid 2 of a pid space
        of its own (all of it killed if the `unshare` above it dies)."""
        return [
            "ip", "netns", "exec", self.namespace,
            "unshare", "--uts", "--pid", "--fork", "--mount-proc", "--kill-child",
            "sh", "-c", 'hostname "$0" && "$@"', self.name, *argv,
        ]  # fmt: skip

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """`env` with the servers it names (the database, Redis, the simulated services) as this
        host reaches them."""
        served = ("DATABASE_URL", "REDIS_URL", "AGENTOPS_SIM_BASE_URL")
        return {key: self.reach(value) if key in served else value for key, value in env.items()}

    def reach(self, url: str) -> str:
        """`url` (PostgreSQL, Redis or HTTP) as this host reaches it: through a forwarder when it
        names this machine (127.0.0.1, localhost or a Unix socket); any other URL as it is."""
        parts = urlsplit(url)
        if parts.scheme == "unix":  # redis-py's unix:///path?db=N
            query = parse_qs(parts.query)
            database = query.get("db", ["0"])[0]
            forwarder = self._forwarder(parts.path)
            return f"redis://{self.gateway}:{forwarder.port}/{database}"
        host = unquote(parts.hostname or "")
        if host.startswith("/"):  # libpq's socket directory as the host
            target: tuple[str, int] | str = f"{host}/.s.PGSQL.{parts.port or 5432}"
        elif host in LOCAL_HOSTS:
            target = ("127.0.0.1", parts.port or _default_port(parts.scheme))
        else:
            return url
        forwarder = self._forwarder(target)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@" if userinfo else ""
        return urlunsplit(parts._replace(netloc=f"{netloc}{self.gateway}:{forwarder.port}"))

    def _forwarder(self, target: tuple[str, int] | str) -> Forwarder:
        if target not in self.forwarders:
            self.forwarders[target] = Forwarder(self.gateway, target)
        return self.forwarders[target]

    def remove(self) -> None:
        for forwarder in self.forwarders.values():
            forwarder.close()
        # Deleting the namespace deletes its end of the pair, and with it ours.
        subprocess.run(["ip", "netns", "delete", self.namespace], capture_output=True, timeout=30)


def _default_port(scheme: str) -> int:
    return {"postgres": 5432, "postgresql": 5432, "redis": 6379, "https": 443}.get(scheme, 80)


def hosts_create(names: list[str]) -> list[Host]:
    """A host per name, each on a /30 of its own; `HostsUnavailable` says why not."""
    why = hosts_unavailable()
    if why:
        raise HostsUnavailable(why)
    run = secrets.token_hex(3)
    made: list[Host] = []
    try:
        for index, name in enumerate(names):
            made.append(_host_create(name, f"{run}{index}"))
    except BaseException:
        for host in made:
            host.remove()
        raise
    return made


def _host_create(name: str, tag: str) -> Host:
    subnet = ADDRESSES.network_address + 4 * secrets.randbelow(ADDRESSES.num_addresses // 4)
    gateway, address = str(subnet + 1), str(subnet + 2)
    namespace, ours, theirs = f"agentops-{tag}", f"ao{tag}", f"ao{tag}p"
    _ip("netns", "add", namespace)
    host = Host(name, namespace, address, gateway)
    try:
        _ip("link", "add", ours, "type", "veth", "peer", "name", theirs)
        _ip("link", "set", theirs, "netns", namespace)
        _ip("addr", "add", f"{gateway}/30", "dev", ours)
        _ip("link", "set", ours, "up")
        for args in (
            ("addr", "add", f"{address}/30", "dev", theirs),
            ("link", "set", theirs, "up"),
            ("link", "set", "lo", "up"),
        ):
            _ip("netns", "exec", namespace, "ip", *args)
    except BaseException:
        host.remove()
        subprocess.run(["ip", "link", "delete", ours], capture_output=True, timeout=30)
        raise
    return host
