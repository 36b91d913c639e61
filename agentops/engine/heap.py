"""The runner's heap: freed large buffers stay with the process instead of going back to the kernel.

A step with a large value (a 500 KB tool result) makes and drops buffers of about that size several
times (the value's JSON, its copies, the output pydantic-core grows by doubling). glibc's malloc
returns a freed block above its mmap threshold, and the top of the heap above its trim threshold,
to the kernel, so the next buffer of that size is faulted in again page by page: on this project's
machine a fault costs about 2 µs, and a 500 KB `pydantic_core.to_json` of a new string took 0.98 ms
with 360 faults against 0.22 ms with 6 once the thresholds were raised. The processes that run the
runner (the worker, and the checkpoint benchmark that stands for it) raise them once at start.

They also leave what they made while starting up out of Python's cyclic garbage collector
(`heap_startup_frozen`): Django, the apps and their modules are some 122,000 objects that live as
long as the process, and every full collection walked all of them again.
"""

from __future__ import annotations

import ctypes
import gc
import os
import platform
from collections.abc import Iterator
from contextlib import contextmanager

# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Blocks up to this size come from the heap: a value of TOOL_RESULT_MAX_BYTES (8 MB) and the
# buffers of its JSON.
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
# At most this much freed memory stays at the top of the heap.
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024
# An operator who tunes malloc through the environment keeps their settings.
_OPERATOR_SETTINGS = ("GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def _operator_settings() -> dict[str, str]:
    return {name: os.environ[name] for name in _OPERATOR_SETTINGS if name in os.environ}


def heap_keep_freed() -> bool:
    """Raise glibc malloc's mmap and trim thresholds for this process (fixed from then on:
    glibc stops adjusting them); True when both were set. Returns False without a call under
    another C library or when the environment already tunes malloc."""
    if platform.libc_ver()[0] != "glibc" or _operator_settings():
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )


def heap_environment() -> dict[str, str]:
    """The heap this process runs with, as the environment variables glibc reads when a process
    starts (for a child that runs no code of ours): the operator's own settings when there are
    any, else ours; nothing under another C library."""
    if platform.libc_ver()[0] != "glibc":
        return {}
    return _operator_settings() or {
        "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD_BYTES),
        "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD_BYTES),
    }


def heap_startup_frozen() -> None:
    """Move every object the process holds now (what starting it up made: Django, the apps, the
    registry) to the collector's permanent generation, so that a full collection walks only
    what was made since (`gc.freeze`). Full collections are rare (one in 200 twenty-step tasks
    of the checkpoint benchmark), but each walked the start-up's objects again: 140 ms, against
    12 ms once they are frozen. Nothing is freed later that would have been: what start-up made
    stays referenced for the life of the process."""
    gc.collect()
    gc.freeze()


@contextmanager
def heap_frozen_while() -> Iterator[None]:
    """`heap_startup_frozen` for a block that stands for a worker inside another process (the
    checkpoint benchmark, which a test may run): the objects go back to the collector when the
    block ends, unless the process had frozen them before it."""
    frozen_before = gc.get_freeze_count() > 0
    heap_startup_frozen()
    try:
        yield
    finally:
        if not frozen_before:
            gc.unfreeze()
