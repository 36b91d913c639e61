"""The runner's heap: a large buffer freed is reused, not faulted in again page by page."""

from __future__ import annotations

import gc
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from agentops.engine import heap

ROOT = Path(__file__).resolve().parents[2]

# Minor page faults per 500 KB JSON of a new string (what a step with a 500 KB value makes).
FAULTS_PER_VALUE = """
import resource, sys
import pydantic_core
from agentops.engine.heap import heap_keep_freed

if sys.argv[1] == "kept":
    assert heap_keep_freed()
for n in range(5):
    pydantic_core.to_json(("step %d " % n) * 64_000)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for n in range(40):
    pydantic_core.to_json(("step %d " % n) * 64_000)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 40)
"""


def _faults_per_value(mode: str, **extra: str) -> float:
    env = {k: v for k, v in os.environ.items() if k not in heap._OPERATOR_SETTINGS} | extra
    done = subprocess.run(
        [sys.executable, "-c", FAULTS_PER_VALUE, mode],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc thresholds")
def test_freed_large_buffers_are_kept_for_the_next_large_value():
    kept, default = _faults_per_value("kept"), _faults_per_value("default")

    assert kept < 20
    assert kept * 5 < default


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc thresholds")
def test_the_heap_environment_gives_a_child_process_the_same_settings():
    # What `bench checkpoint --peers` hands the peers' processes, which run no code of ours.
    assert _faults_per_value("default", **heap.heap_environment()) < 20


def test_malloc_tuned_by_the_operator_is_left_alone(monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1048576")
    monkeypatch.setattr(heap.ctypes, "CDLL", lambda *args: pytest.fail("mallopt called"))

    assert heap.heap_keep_freed() is False
    # A child process gets the operator's settings too, not ours.
    expected = {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1048576"}
    assert heap.heap_environment() == (expected if platform.libc_ver()[0] == "glibc" else {})


def test_the_worker_keeps_freed_buffers(monkeypatch, redis_clean, db):
    from agentops.management.commands import worker

    started: list[bool] = []
    frozen: list[bool] = []
    monkeypatch.setattr(worker, "heap_keep_freed", lambda: started.append(True) or True)
    # Asked for, not done: this test's process must not freeze what it holds.
    monkeypatch.setattr(worker, "heap_startup_frozen", lambda: frozen.append(True))

    call_command("worker", "--burst")

    assert started == [True]
    assert frozen == [True]


def test_a_block_frozen_as_a_worker_gives_the_objects_back_unless_they_were_frozen_before():
    gc.unfreeze()  # whatever an earlier test of this process left (none should)
    with heap.heap_frozen_while():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0

    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with heap.heap_frozen_while():
            pass
        assert gc.get_freeze_count() >= frozen  # still frozen: it was not the block's to undo
    finally:
        gc.unfreeze()
