"""Connections to MCP servers: one per declared server and worker process, over one event loop.

The `mcp` SDK is async and the engine is not. A process runs one event-loop thread (an anyio
blocking portal), started by its first MCP request; each server is connected on first use (a
stdio command is spawned, a streamable-HTTP URL is opened), held open by a task on that loop,
connected again when it is found dead, and closed when the process exits. Every request has a
deadline twice over: the loop's own (`anyio.fail_after`) and, should the loop itself stall, the
calling thread's wait on the request's future. A stdio server's stderr goes to the worker's log
line by line, redacted (`ServerLog`), and its last lines are quoted when the server fails to
start or its connection breaks, so the failure says what the server said. Nothing here touches
the database; the callers (`agentops.engine.mcptools`) make no request with a transaction open.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import os
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import httpx2
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT, CallToolResult, Tool

from agentops.engine.redaction import redacted

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Extra seconds the calling thread waits past a request's deadline before it gives up on the
# loop itself (a loop that cannot even deliver its own timeout).
LOOP_GRACE_SECONDS = 5.0
# At most this many pages of a tool list (a server that paginates forever cannot hang a call).
MAX_TOOL_PAGES = 50
# What a failure quotes of a stdio server's stderr: its last lines, at most this many characters.
STDERR_TAIL_LINES = 20
STDERR_TAIL_CHARS = 800
# How long a failure waits for the rest of a stopped server's stderr to be read.
STDERR_DRAIN_SECONDS = 2.0


class McpUnreachable(Exception):
    """The server could not be asked, or stopped answering. `sent`: the request may have
    reached it (a call may have taken effect)."""

    def __init__(
        self, message: str, *, sent: bool, timed_out: bool = False, started: bool = True
    ) -> None:
        super().__init__(message)
        self.sent = sent
        self.timed_out = timed_out
        # False: the server itself failed to start (starting it again at once will not help).
        self.started = started


class McpRefused(Exception):
    """The server answered the request with a JSON-RPC error (it did not run it)."""

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Endpoint:
    """Where a server is: a stdio command or a streamable-HTTP URL, and how long it may take to
    start (spawn and handshake)."""

    key: str
    target: StdioServerParameters | str
    start_timeout: float
    # Headers sent with every request to a streamable-HTTP server (its credentials).
    headers: tuple[tuple[str, str], ...] = ()

    def client(self, *, timeout: float, log: ServerLog | None = None) -> Client:
        """A client of the server; a stdio server's stderr goes to `log`."""
        # The SDK's response cache is off: a tool list is always asked for (its digests are
        # compared on every call).
        if isinstance(self.target, str) and self.headers:
            transport = _http_with_headers(self.target, dict(self.headers), timeout)
            return Client(transport, read_timeout_seconds=timeout, cache=None)
        if isinstance(self.target, StdioServerParameters) and log is not None:
            spawned = stdio_client(self.target, errlog=log.sink)
            return Client(spawned, read_timeout_seconds=timeout, cache=None)
        return Client(self.target, read_timeout_seconds=timeout, cache=None)


class ServerLog:
    """A stdio server's stderr, read through a pipe by a thread of its own: each line goes to
    the worker's log (naming the server), and the last lines are kept for a failure to quote.
    The thread ends when the server and everything it started have closed their stderr."""

    def __init__(self, key: str) -> None:
        self.key = key
        read_fd, write_fd = os.pipe()
        # The server's stderr: the child gets its own copy at spawn (`spawned` closes this one).
        self.sink = os.fdopen(write_fd, "w")
        self._lines: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._relay, args=(read_fd,), name=f"mcp-stderr-{key}", daemon=True
        )
        self._thread.start()

    def _relay(self, read_fd: int) -> None:
        with open(read_fd, "rb") as pipe:
            for raw in pipe:
                line = raw.decode("utf-8", "replace").rstrip()
                if line:
                    # Logs and failures leave the machine: a server that prints its credentials
                    # is redacted, the whole line before its tail is kept (cut first, a secret
                    # would lose the key word that finds it).
                    said = redacted(line)
                    with self._lock:
                        self._lines.append(said[-STDERR_TAIL_CHARS:])
                    logger.info("MCP server %s: %s", self.key, said)

    def spawned(self) -> None:
        """Close this process's end of the pipe once the server is spawned (or failed to be):
        the pipe then ends when the server's copies close."""
        self.sink.close()

    def tail(self, *, drain: bool = False) -> str:
        """The last lines the server wrote, at most STDERR_TAIL_CHARS characters (a longer line
        keeps its end). `drain`: the server has stopped; wait (boundedly) for its last words."""
        if drain:
            self._thread.join(STDERR_DRAIN_SECONDS)
        with self._lock:
            lines = list(self._lines)
        kept: list[str] = []
        size = 0
        for line in reversed(lines):
            if size + len(line) > STDERR_TAIL_CHARS:
                break
            kept.append(line)
            size += len(line) + 1
        return "\n".join(reversed(kept))


@asynccontextmanager
async def _http_with_headers(
    url: str, headers: dict[str, str], timeout: float
) -> AsyncIterator[Any]:
    """A streamable-HTTP transport whose requests carry `headers`; its HTTP client is closed
    with it."""
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout)) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


@dataclass
class _Held:
    """One open connection, held by a task on the loop until `stop` is set."""

    endpoint: Endpoint
    ready: threading.Event = field(default_factory=threading.Event)
    # A stdio server's stderr (None for a streamable-HTTP server).
    log: ServerLog | None = None
    client: Client | None = None
    stop: anyio.Event | None = None
    error: BaseException | None = None
    task: concurrent.futures.Future[None] | None = None

    @property
    def alive(self) -> bool:
        return self.client is not None and self.task is not None and not self.task.done()


class Connections:
    """The process's MCP connections. Thread-safe; one request per server at a time is what a
    worker makes (it runs one job at a time)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._held: dict[str, _Held] = {}
        self.starts: dict[str, int] = {}

    # -- requests ------------------------------------------------------------------------------

    def list_tools(self, endpoint: Endpoint, *, timeout: float) -> list[Tool]:
        """Every tool the server offers (all pages)."""

        async def ask(client: Client) -> list[Tool]:
            tools: list[Tool] = []
            cursor: str | None = None
            for _ in range(MAX_TOOL_PAGES):
                page = await client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
            return tools

        return self._request(endpoint, ask, timeout=timeout, what="tools/list")

    def call_tool(
        self, endpoint: Endpoint, name: str, arguments: dict[str, Any], *, timeout: float
    ) -> CallToolResult:
        async def ask(client: Client) -> CallToolResult:
            return await client.call_tool(name, arguments, read_timeout_seconds=timeout)

        return self._request(endpoint, ask, timeout=timeout, what=f"tools/call {name}")

    def _request(
        self,
        endpoint: Endpoint,
        ask: Callable[[Client], Awaitable[T]],
        *,
        timeout: float,
        what: str,
    ) -> T:
        held = self._connected(endpoint)
        client = held.client
        assert client is not None

        async def bounded() -> T:
            with anyio.fail_after(timeout):
                return await ask(client)

        future = self._loop().start_task_soon(bounded)
        try:
            return future.result(timeout + LOOP_GRACE_SECONDS)
        except (TimeoutError, concurrent.futures.TimeoutError):
            future.cancel()
            self.drop(endpoint.key)
            raise McpUnreachable(
                f"{endpoint.key}: {what} did not answer within {timeout:g} s",
                sent=True,
                timed_out=True,
            ) from None
        except MCPError as error:
            if error.code == REQUEST_TIMEOUT:
                self.drop(endpoint.key)
                raise McpUnreachable(
                    f"{endpoint.key}: {what}: {error.message}", sent=True, timed_out=True
                ) from None
            if error.code == CONNECTION_CLOSED:
                self.drop(endpoint.key)
                raise McpUnreachable(
                    f"{endpoint.key}: {what}: {error.message}{_said(held, drain=True)}", sent=True
                ) from None
            raise McpRefused(f"{endpoint.key}: {what}: {error.message}", code=error.code) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as error:
            self.drop(endpoint.key)
            raise McpUnreachable(
                f"{endpoint.key}: {what}: the connection broke ({type(error).__name__})"
                f"{_said(held, drain=True)}",
                sent=True,
            ) from None
        except Exception as error:  # the SDK's other errors (a reply it cannot parse, a stream
            # that ended): the request may have run; the connection is not trusted again.
            self.drop(endpoint.key)
            raise McpUnreachable(
                f"{endpoint.key}: {what}: {_error_text(error)}{_said(held, drain=True)}",
                sent=True,
            ) from None

    # -- connections ---------------------------------------------------------------------------

    def _connected(self, endpoint: Endpoint) -> _Held:
        """The open connection to `endpoint`, (re)started if there is none or it died."""
        with self._lock:
            held = self._held.get(endpoint.key)
            if held is not None and held.alive:
                return held
            if held is not None:
                logger.warning("MCP server %s is gone; starting it again", endpoint.key)
                self._stop(held)
            held = self._start(endpoint)
            self._held[endpoint.key] = held
            return held

    def _start(self, endpoint: Endpoint) -> _Held:
        stdio = isinstance(endpoint.target, StdioServerParameters)
        held = _Held(endpoint, log=ServerLog(endpoint.key) if stdio else None)
        client = endpoint.client(timeout=endpoint.start_timeout, log=held.log)

        async def hold() -> None:
            try:
                await client.__aenter__()
            except BaseException as error:  # reported to the thread that waits for it
                held.error = error
                _spawned(held)
                held.ready.set()
                raise
            _spawned(held)
            held.client = client
            held.stop = anyio.Event()
            held.ready.set()
            try:
                await held.stop.wait()
            finally:
                # In this task, which entered it (the SDK's task groups are this task's); the
                # SDK bounds a stdio server's shutdown and shields it from cancellation.
                await client.__aexit__(None, None, None)

        held.task = self._loop().start_task_soon(hold)
        self.starts[endpoint.key] = self.starts.get(endpoint.key, 0) + 1
        if not held.ready.wait(endpoint.start_timeout) or held.error is not None:
            held.task.cancel()
            cause = held.error
            if cause is None:
                why = f"did not start within {endpoint.start_timeout:g} s{_said(held)}"
            else:
                # The SDK stopped the server when its start failed: its last words are in the pipe.
                why = f"failed to start ({_error_text(cause)}){_said(held, drain=True)}"
            raise McpUnreachable(
                f"MCP server {endpoint.key} {why}",
                sent=False,
                started=False,
            )
        return held

    def drop(self, key: str) -> None:
        """Close the connection to `key` (the next request starts it again)."""
        with self._lock:
            held = self._held.pop(key, None)
        if held is not None:
            self._stop(held)

    def _stop(self, held: _Held) -> None:
        portal = self._portal
        if portal is None or held.task is None:
            return
        if held.stop is not None and not held.task.done():
            try:
                portal.call(held.stop.set)
                # The SDK bounds a stdio server's shutdown (stdin closed, then SIGTERM, SIGKILL).
                held.task.result(timeout=10)
            except Exception as error:  # a server that dies on the way out is closed all the same
                logger.info("closing MCP server %s: %s", held.endpoint.key, error)
        held.task.cancel()

    def close_all(self) -> None:
        """Close every connection and stop the loop (at process exit, and in tests)."""
        with self._lock:
            held, self._held = list(self._held.values()), {}
            for one in held:
                self._stop(one)
            if self._portal_cm is not None:
                cm, self._portal_cm, self._portal = self._portal_cm, None, None
                try:
                    cm.__exit__(None, None, None)
                except Exception as error:  # the loop ends with the process anyway
                    logger.info("stopping the MCP event loop: %s", error)

    def _loop(self) -> BlockingPortal:
        with self._lock:
            if self._portal is None:
                self._portal_cm = start_blocking_portal(name="mcp-loop")
                self._portal = self._portal_cm.__enter__()
            return self._portal


def _error_text(error: BaseException) -> str:
    """`Type: text` of the first leaf of an exception group (the SDK's task groups wrap what
    went wrong)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _spawned(held: _Held) -> None:
    if held.log is not None:
        held.log.spawned()


def _said(held: _Held, *, drain: bool = False) -> str:
    """What a failure adds of the server's stderr, redacted ("" when it wrote none, or is not
    stdio): the failure is logged and stored."""
    said = held.log.tail(drain=drain) if held.log is not None else ""
    return f"; its stderr ended: {redacted(said)}" if said else ""


connections = Connections()
atexit.register(connections.close_all)
