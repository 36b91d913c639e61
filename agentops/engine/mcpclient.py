"""Connections to MCP servers: one per declared server and worker process, over one event loop.

The `mcp` SDK is async and the engine is not. A process runs one event-loop thread (an anyio
blocking portal), started by its first MCP request; each server is connected on first use (a
stdio command is spawned, a streamable-HTTP URL is opened), held open by a task on that loop,
connected again when it is found dead, and closed when the process exits. Every request has a
deadline twice over: the loop's own (`anyio.fail_after`) and, should the loop itself stall, the
calling thread's wait on the request's future. Nothing here touches the database; the callers
(`agentops.engine.mcptools`) make no request with a transaction open.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import httpx2
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT, CallToolResult, Tool

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Extra seconds the calling thread waits past a request's deadline before it gives up on the
# loop itself (a loop that cannot even deliver its own timeout).
LOOP_GRACE_SECONDS = 5.0
# At most this many pages of a tool list (a server that paginates forever cannot hang a call).
MAX_TOOL_PAGES = 50


class McpUnreachable(Exception):
    """The server could not be asked, or stopped answering. `sent`: the request may have
    reached it (a call may have taken effect)."""

    def __init__(self, message: str, *, sent: bool, timed_out: bool = False) -> None:
        super().__init__(message)
        self.sent = sent
        self.timed_out = timed_out


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

    def client(self, *, timeout: float) -> Client:
        # The SDK's response cache is off: a tool list is always asked for (its digests are
        # compared on every call).
        if isinstance(self.target, str) and self.headers:
            transport = _http_with_headers(self.target, dict(self.headers), timeout)
            return Client(transport, read_timeout_seconds=timeout, cache=None)
        return Client(self.target, read_timeout_seconds=timeout, cache=None)


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
            if error.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                self.drop(endpoint.key)
                raise McpUnreachable(
                    f"{endpoint.key}: {what}: {error.message}",
                    sent=True,
                    timed_out=error.code == REQUEST_TIMEOUT,
                ) from None
            raise McpRefused(f"{endpoint.key}: {what}: {error.message}", code=error.code) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as error:
            self.drop(endpoint.key)
            raise McpUnreachable(
                f"{endpoint.key}: {what}: the connection broke ({type(error).__name__})", sent=True
            ) from None
        except Exception as error:  # the SDK's other errors (a reply it cannot parse, a stream
            # that ended): the request may have run; the connection is not trusted again.
            self.drop(endpoint.key)
            raise McpUnreachable(
                f"{endpoint.key}: {what}: {type(error).__name__}: {_first_error(error)}", sent=True
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
        held = _Held(endpoint)
        client = endpoint.client(timeout=endpoint.start_timeout)

        async def hold() -> None:
            try:
                await client.__aenter__()
            except BaseException as error:  # reported to the thread that waits for it
                held.error = error
                held.ready.set()
                raise
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
            why = (
                f"did not start within {endpoint.start_timeout:g} s"
                if cause is None
                else f"failed to start: {type(cause).__name__}: {_first_error(cause)}"
            )
            raise McpUnreachable(f"MCP server {endpoint.key} {why}", sent=False)
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


def _first_error(error: BaseException) -> str:
    """The first leaf of an exception group (the SDK's task groups wrap what went wrong)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return str(error) or type(error).__name__


connections = Connections()
atexit.register(connections.close_all)
