"""`bench redaction`: what `redacted` costs on large values that hold no secret.

Each kind of value is built to `size_kb` (deterministic, no secret in it), then `redacted` is
called `repeat` times on it and each call's process CPU time taken; the figure is the median.
The cache of short strings' answers is emptied before each call (a value repeats its statuses
and dates within itself, but not the previous call's).
With `against`, the redactor of that git revision (its `agentops/engine/redaction.py`, loaded
as a module of its own) is timed in the same loop, call for call alternating, so that both
see the same load. Each kind also says whether the value came back unchanged.
"""

from __future__ import annotations

import importlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from django.conf import settings

from agentops.engine import redaction

_SENTENCES = (
    "The customer asked on 2024-01-15 whether order 48213 could ship before the holidays.",
    "Step 12 called the refund tool with an amount of 123.45 EUR and it answered in 84 ms.",
    "See https://example.com/help/orders?page=2 for the policy on returns and exchanges.",
    "The reviewer approved the gate after checking the invoice, the address and the items.",
    "Please reset the password policy text in the settings page, it reads too long today.",
    "A token budget of 4000 tokens was enough for the summary; the next step used 1200.",
    "Version 3.2.1 fixed the timeout; the worker retried twice and then succeeded at 10:30.",
)


def _prose(size: int) -> str:
    words: list[str] = []
    total = 0
    index = 0
    while total < size:
        sentence = _SENTENCES[index % len(_SENTENCES)]
        words.append(sentence)
        total += len(sentence) + 1
        index += 1
        if index % 5 == 0:
            words.append("\n")
    return " ".join(words)[:size]


def _records(size: int) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    total = 0
    index = 0
    while total < size:
        record = {
            "id": f"{index:08x}-4f2a-4c1b-9e7d-{index * 7919:012x}",
            "order": f"ORD-2024-{index:06d}",
            "sha": f"{index * 2654435761:040x}"[-40:],
            "status": "shipped" if index % 3 else "pending",
            "amount": round(index * 1.37 % 1000, 2),
            "created": f"2024-{index % 12 + 1:02d}-{index % 28 + 1:02d}T10:30:00Z",
            "note": "Customer asked for a refund; max_tokens 12; see step 4",
        }
        records.append(record)
        total += len(json.dumps(record)) + 2
        index += 1
    return records


def _log_lines(size: int) -> str:
    lines: list[str] = []
    total = 0
    index = 0
    while total < size:
        line = f"ts=2024-01-15T10:{index % 60:02d}:00Z level=info task={index} step={index % 20} "
        line += f"tool=refund status=ok duration_ms={index % 97} attempt=1"
        lines.append(line)
        total += len(line) + 1
        index += 1
    return "\n".join(lines)[:size]


def _repeated(unit: str) -> Callable[[int], str]:
    return lambda size: (unit * (size // len(unit) + 1))[:size]


# The kinds of value measured: a name and a builder of one value of about `size` characters.
KINDS: dict[str, Callable[[int], Any]] = {
    "step 12 ... (the checkpoint bench's payload)": _repeated("step 12 "),
    "English prose": _prose,
    "JSON text (records with UUIDs, SHAs, amounts)": lambda size: json.dumps(_records(size)),
    "the same records as a JSON value": _records,
    "key=value log lines": _log_lines,
    "accented Latin": _repeated("Café n° 12, crème brûlée à 4,50 € ; "),
    "Chinese": _repeated("订单 12 号已发货，客户请求退款。"),  # noqa: RUF001
}


_PACKAGE = "agentops.engine.redaction"
_BEFORE = "redaction_before"


def _git(*arguments: str) -> bytes:
    return subprocess.run(
        ["git", *arguments], cwd=settings.BASE_DIR, capture_output=True, check=True
    ).stdout


def _module_at(revision: str) -> ModuleType:
    """The redactor as it was at `revision` (a module, or a package whose imports of itself are
    renamed), imported under a name of its own from a temporary directory."""
    path = _PACKAGE.replace(".", "/")
    files = _git("ls-tree", "-r", "--name-only", revision, "--", path, f"{path}.py").decode()
    directory = Path(tempfile.mkdtemp(prefix="redaction-"))
    for name in files.split():
        source = _git("show", f"{revision}:{name}").replace(_PACKAGE.encode(), _BEFORE.encode())
        if name == f"{path}.py":
            target = directory / f"{_BEFORE}.py"
        else:
            target = directory / _BEFORE / Path(name).relative_to(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source)
    sys.path.insert(0, str(directory))
    try:
        return importlib.import_module(_BEFORE)
    finally:
        sys.path.remove(str(directory))


def _cpu_ms(function: Callable[[Any], Any], value: Any) -> float:
    began = time.process_time()
    function(value)
    return (time.process_time() - began) * 1000


def redaction_bench(*, size_kb: int, repeat: int, against: str | None) -> dict[str, Any]:
    """Median CPU milliseconds of `redacted` per kind of value (and `against`'s, alternating)."""
    before = _module_at(against) if against else None
    kinds: dict[str, Any] = {}
    for name, build in KINDS.items():
        value = build(size_kb * 1024)
        figures: dict[str, Any] = {"unchanged": redaction.redacted(value) == value}
        after_ms: list[float] = []
        before_ms: list[float] = []
        for _ in range(repeat):
            # A cold cache of short strings: each call finds its strings anew.
            redaction.short_cache_clear()
            after_ms.append(_cpu_ms(redaction.redacted, value))
            if before is not None:
                if hasattr(before, "short_cache_clear"):
                    before.short_cache_clear()
                before_ms.append(_cpu_ms(before.redacted, value))
        figures["after_ms"] = round(statistics.median(after_ms), 3)
        if before is not None:
            figures["before_ms"] = round(statistics.median(before_ms), 3)
            figures["before_unchanged"] = before.redacted(value) == value
        kinds[name] = figures
    return {"size_kb": size_kb, "repeat": repeat, "against": against, "kinds": kinds}


def redaction_table(report: dict[str, Any]) -> str:
    against = report["against"]
    head = f"| value ({report['size_kb']} KB) | "
    head += f"before ({against}) | after |" if against else "after |"
    lines = [
        f"Median process CPU time of `redacted`, {report['repeat']} calls each",
        "",
        head,
        "|---|---|---|" if against else "|---|---|",
    ]
    for name, figures in report["kinds"].items():
        after = f"{figures['after_ms']:.2f} ms" + ("" if figures["unchanged"] else " (changed!)")
        if against:
            before = f"{figures['before_ms']:.2f} ms"
            before += "" if figures["before_unchanged"] else " (changed!)"
            lines.append(f"| {name} | {before} | {after} |")
        else:
            lines.append(f"| {name} | {after} |")
    return "\n".join(lines) + "\n"
