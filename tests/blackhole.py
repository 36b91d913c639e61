"""A TCP server that accepts connections and never answers: a hung SMTP server, webhook or Redis."""

from __future__ import annotations

import socket
import threading
import time


class BlackHole:
    """A TCP server that accepts every connection, reads what it is sent and never answers (a
    hung SMTP server or webhook), or says `greeting` once and then nothing. Per connection: when
    it was accepted and when the client hung up (None while it holds on)."""

    def __init__(self, greeting: bytes = b"") -> None:
        self.greeting = greeting
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.connections: list[list[float | None]] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return  # closed at teardown
            held: list[float | None] = [time.monotonic(), None]
            self.connections.append(held)
            threading.Thread(target=self._hold, args=(client, held), daemon=True).start()

    def _hold(self, client: socket.socket, held: list[float | None]) -> None:
        with client:
            try:
                client.sendall(self.greeting)
                while client.recv(65536):
                    pass
            except OSError:
                pass  # a reset is a hang-up too
        held[1] = time.monotonic()

    def held_seconds(self) -> list[float]:
        """How long each finished connection was held by its client."""
        return [end - start for start, end in self.connections if start and end]

    def close(self) -> None:
        self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
