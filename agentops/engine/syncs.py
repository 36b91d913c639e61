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


def fsync_directory(path: str) -> None:
    """Make the names of files created in `path` durable."""
    directory = os.open(path, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class _FileSync(threading.Thread):
    """fsync one open file, then close it; the error, if any, is kept for `Syncs.wait`."""

    def __init__(self, handle: int) -> None:
        super().__init__(name="agentops-fsync", daemon=True)
        self.handle = handle
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            os.fsync(self.handle)
        except BaseException as exc:
            self.error = exc
        finally:
            os.close(self.handle)


class Syncs:
    """The files one commit wrote or reused, each being fsynced, and their directories."""

    def __init__(self) -> None:
        self.directories: set[str] = set()
        self._files: dict[str, _FileSync] = {}

    def has(self, path: str) -> bool:
        """Whether `path` is already made durable by this commit."""
        return path in self._files

    def file(self, path: str, handle: int) -> None:
        """Start making the file open as `handle` durable; the handle is closed once it is."""
        sync = self._files[path] = _FileSync(handle)
        sync.start()

    def wait(self) -> None:
        """Return once every file is durable, then every directory (fsynced here, in order);
        raise the first file's error instead."""
        errors = []
        for sync in self._files.values():
            sync.join()
            if sync.error is not None:
                errors.append(sync.error)
        if errors:
            raise errors[0]
        for directory in sorted(self.directories):
            fsync_directory(directory)
