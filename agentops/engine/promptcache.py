"""What building prompts made, kept for the next prompts of the same run: each step's exchange
and summary line, the goal message (`PromptCache`, bounded by bytes), reused while the rows they
were made from are the same objects (`remembered`). `agentops.engine.context` builds the prompts.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

from agentops.engine.jsonvalues import ARTIFACT_KEY, is_pointer

T = TypeVar("T")

# What a run's `PromptCache` may hold: the latest five exchanges (the ones prompts send) fit
# many times over even when each carries a result just under the artifact threshold (256 KB)
# and arguments as large; a long task's summary lines (about 250 bytes a step) fit too.
CACHE_BYTES = 8 * 1024 * 1024

Slot = tuple[str, int]


def text_bytes(texts: Iterable[str]) -> int:
    """The memory the strings take (`sys.getsizeof`), each counted once."""
    return sum(sys.getsizeof(text) for text in {id(text): text for text in texts}.values())


class PromptCache:
    """What building prompts made, for the next prompts of the same run (one task, one time
    slice): each step's exchange and summary line, the goal message, and the task's summary
    lines as last built. Entries are reused while the rows they were made from are the same
    objects, so the next slice, which reads the rows again, could not reuse any: the runner
    drops its cache when the slice ends (`clear`).

    Bounded by `max_bytes` of what the entries made (their text; the rows they were made from
    are the run's): the least recently used entries go first, and an entry heavier than the
    whole bound is not kept. `peak_bytes` is the most it held; `made` counts the values made
    (not reused) per kind: "exchange", "summary", "goal"."""

    def __init__(self, max_bytes: int = CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.peak_bytes = 0
        self.made: Counter[str] = Counter()
        # Values stored as artifacts by the commit being assembled, by artifact id: the next
        # step's prompt is built inside that commit, before its statement inserts their rows,
        # and reads them from here (`remember`); the run empties it before each step's
        # completion (earlier commits' artifacts are in their rows by then).
        self.artifacts: dict[int, Any] = {}
        # Least recently used first (a dict keeps its insertion order).
        self._entries: dict[Slot, tuple[Any, int]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, slot: Slot, *, touch: bool = True) -> Any:
        """The value kept in `slot` (now the most recently used, when `touch`), or None."""
        if not touch:
            entry = self._entries.get(slot)
            return None if entry is None else entry[0]
        entry = self._entries.pop(slot, None)
        if entry is None:
            return None
        self._entries[slot] = entry
        return entry[0]

    def put(self, slot: Slot, value: Any, weight: int) -> None:
        """Keep `value` in `slot`, weighing `weight` bytes, dropping the least recently used
        entries until it fits."""
        self._drop(slot)
        if weight > self.max_bytes:
            return
        while self.bytes + weight > self.max_bytes:
            self._drop(next(iter(self._entries)))
        self._entries[slot] = (value, weight)
        self.bytes += weight
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0
        self.artifacts.clear()

    def remember(self, stored: Any, value: Any) -> None:
        """`value`, just stored as `stored`: kept in `artifacts` when that is a pointer."""
        if is_pointer(stored):
            self.artifacts[int(stored[ARTIFACT_KEY])] = value

    def _drop(self, slot: Slot) -> None:
        entry = self._entries.pop(slot, None)
        if entry is not None:
            self.bytes -= entry[1]


def remembered(
    cache: PromptCache,
    slot: tuple[str, int | None],
    key: tuple[Any, ...],
    sources: tuple[Any, ...],
    make: Callable[[], T],
    weigh: Callable[[T], int],
) -> T:
    """`make()`, remembered in `slot` (a kind and a row's id; id None: not remembered) while
    `key` is equal and every one of `sources` is the same object (identity means the same
    recorded values); it weighs `weigh(value)` bytes."""
    kind, pk = slot
    cached = recalled(cache, slot, key, sources)
    if cached is not None:
        return cast(T, cached)
    value = make()
    cache.made[kind] += 1
    if pk is not None:
        # The sources are kept (not their ids), so they cannot be reused by other objects.
        cache.put((kind, pk), (key, sources, value), weigh(value))
    return value


def recalled(
    cache: PromptCache,
    slot: tuple[str, int | None],
    key: tuple[Any, ...],
    sources: tuple[Any, ...],
    *,
    touch: bool = True,
) -> Any:
    """What `remembered` keeps in `slot` for `key` and `sources`, or None. `touch`: the entry
    becomes the most recently used."""
    kind, pk = slot
    cached = cache.get((kind, pk), touch=touch) if pk is not None else None
    if (
        cached is not None
        and cached[0] == key
        and all(a is b for a, b in zip(cached[1], sources, strict=True))
    ):
        return cached[2]
    return None
