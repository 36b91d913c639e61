"""What one commit's artifact pointers need durable before its statement is sent.

A large value's file is written when the commit offloads it, and must be on disk, with the name
of its directory, before the statement that points at it commits. Its fsync (about 1 ms for
500 KB on a local disk) starts on a thread of its own as soon as the file is written, so the
commit goes on building (the next value's bytes, digest and scan) while the disk works; the
statement waits for it (`Syncs.wait`). A file stored twice in one commit (the same content) is
fsynced once.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor


def fsync_directory(path: str) -> None:
    """Make the names of files created in `path` durable."""
    directory = os.open(path, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _fsync_closed(handle: int) -> None:
    """fsync an open file, then close it."""
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


# The threads that fsync files, per process (a forked child starts its own: threads do not
# survive a fork). Made once: a thread started per file waits for the scheduler to run it.
_POOL: tuple[int, ThreadPoolExecutor] | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL[0] != os.getpid():
            _POOL = (os.getpid(), ThreadPoolExecutor(4, thread_name_prefix="agentops-fsync"))
        return _POOL[1]


class Syncs:
    """The files one commit wrote or reused, each being fsynced, and their directories."""

    def __init__(self) -> None:
        self.directories: set[str] = set()
        self._files: dict[str, Future[None]] = {}

    def has(self, path: str) -> bool:
        """Whether `path` is already made durable by this commit."""
        return path in self._files

    def file(self, path: str, handle: int) -> None:
        """Start making the file open as `handle` durable; the handle is closed once it is."""
        self._files[path] = _pool().submit(_fsync_closed, handle)

    def wait(self) -> None:
        """Return once every file is durable, then every directory (fsynced here, in order);
        raise the first file's error instead."""
        errors = [sync.exception() for sync in list(self._files.values())]
        for error in errors:
            if error is not None:
                raise error
        for directory in sorted(self.directories):
            fsync_directory(directory)
