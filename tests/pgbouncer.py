"""A real PgBouncer in transaction pooling in front of the test database's server.

Debian's `pgbouncer` (1.18 on bookworm; `.ci/run` installs it). It refuses to run as root, so as
root it runs as the user that owns the server's socket directory (the embedded server's system
user, whose data directory holds its socket) or, for a server on TCP, as `nobody`, with its files
in a directory of its own that this user may read. It
trusts its clients, as the test servers do, and passes every database name through to the
server, so each xdist worker's test database is reached by its own name.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
START_SECONDS = 60  # against a hang only: it listens within milliseconds on a quiet machine


class PgBouncer:
    def __init__(self, server: dict[str, Any], port: int) -> None:
        """`server`: Django's settings of the test database (its HOST may be a socket directory)."""
        self.server = server
        self.port = port
        self.root = Path(tempfile.mkdtemp(prefix="agentops-pgbouncer-"))
        self.root.chmod(0o755)
        self.process: subprocess.Popen[bytes] | None = None
        self._configure()

    def url(self, database: str) -> str:
        user = quote(self.server.get("USER") or "postgres", safe="")
        return f"postgres://{user}@127.0.0.1:{self.port}/{quote(database)}"

    @property
    def log(self) -> str:
        return (self.root / "pgbouncer.log").read_text(errors="replace")

    def start(self) -> None:
        if not os.path.exists(PGBOUNCER):
            raise RuntimeError(
                "the PgBouncer tests need Debian's pgbouncer: apt-get install pgbouncer "
                "(.ci/run installs it)"
            )
        self.process = subprocess.Popen(
            [PGBOUNCER, str(self.root / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "stderr.log", "wb"),  # noqa: SIM115
            **self._user(),
        )
        deadline = time.monotonic() + START_SECONDS
        while not self._listening():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"pgbouncer did not start: {(self.root / 'stderr.log').read_text()}{self.log}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # its immediate shutdown
            self.process.wait(timeout=30)

    def restart(self) -> None:
        """A new start: its server connections are opened again (with the role's defaults)."""
        self.stop()
        self.start()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def _configure(self) -> None:
        host = self.server.get("HOST") or "127.0.0.1"
        port = self.server.get("PORT") or 5432
        user = self.server.get("USER") or "postgres"
        (self.root / "users.txt").write_text(f'"{user}" ""\n')
        (self.root / "pgbouncer.ini").write_text(
            f"""[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.root / "users.txt"}
pool_mode = transaction
max_client_conn = 400
default_pool_size = 20
server_lifetime = 3600
logfile = {self.root / "pgbouncer.log"}
pidfile = {self.root / "pgbouncer.pid"}
ignore_startup_parameters = extra_float_digits
"""
        )
        for path in self.root.iterdir():
            path.chmod(0o644)
        if "user" in self._user():
            os.chown(self.root, self._user()["user"], self._user()["group"])

    def _user(self) -> dict[str, Any]:
        """Popen's arguments that run it as another user when the tests run as root."""
        if os.geteuid() != 0:
            return {}
        host = self.server.get("HOST") or ""
        owner = os.stat(host).st_uid if host.startswith("/") else 0
        user = pwd.getpwuid(owner) if owner else pwd.getpwnam("nobody")
        return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
