"""A TCP proxy that can be cut off from its server as a network partition would be.

While whole, it forwards each connection to the server. Once `cut()`, nothing gets through either
way on the connections it holds (what a client sends is read and dropped, nothing comes back, no
connection is closed), and a new connection is accepted and held the same way: a client sees a
server that stopped answering, not one that went away. After `heal()` new connections reach the
server again; the ones cut stay silent, as connections a partition outlasted do until their
client gives up on them.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from agentops.dev.hosts import connected


class Partition:
    def __init__(self, target: tuple[str, int] | str) -> None:
        """`target`: the server's (host, port), or the path of its Unix socket."""
        self.target = target
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self._whole = threading.Event()
        self._whole.set()
        self._cut_generation = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        self._cut_generation += 1
        self._whole.clear()

    def heal(self) -> None:
        self._whole.set()

    def close(self) -> None:
        self.server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if self._whole.is_set():
                upstream = self._connect()
                generation = self._cut_generation
                for source, sink in ((client, upstream), (upstream, client)):
                    threading.Thread(
                        target=self._pipe, args=(source, sink, generation), daemon=True
                    ).start()
            else:
                threading.Thread(target=self._drain, args=(client,), daemon=True).start()

    def _connect(self) -> socket.socket:
        return connected(self.target)

    def _pipe(self, source: socket.socket, sink: socket.socket, generation: int) -> None:
        """Forward until the connection is cut (then drop what comes) or closed."""
        try:
            while data := source.recv(65536):
                if self._cut_generation == generation:
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            if self._cut_generation == generation:  # a close passes while whole
                for end in (source, sink):
                    with contextlib.suppress(OSError):
                        end.shutdown(socket.SHUT_RDWR)

    @staticmethod
    def _drain(client: socket.socket) -> None:
        with client:
            try:
                while client.recv(65536):
                    pass
            except OSError:
                pass
