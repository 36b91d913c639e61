"""Serving a stand-in (an HTTP server of the tests) from a thread of the test process."""

from __future__ import annotations

import threading
from socketserver import BaseServer

# How often `serve_forever` looks for a `shutdown()`: that call waits up to this long, once per
# test that stops its stand-in (socketserver's default is half a second).
SHUTDOWN_POLL_SECONDS = 0.02


def serve_in_thread(server: BaseServer) -> threading.Thread:
    """Run `server.serve_forever` in a daemon thread; `server.shutdown()` stops it promptly."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS}, daemon=True
    )
    thread.start()
    return thread
