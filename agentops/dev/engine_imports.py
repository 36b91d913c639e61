"""The engine's import graph in figures: its modules, the module-level imports between them and
the longest chain of those imports (its depth). Run `python -m agentops.dev.engine_imports` (add
`-v` for each module's depth and imports); docs/architecture.md quotes its figures.

Read from the source with `ast`, importing nothing: a module is a file of `agentops/engine/`, but a
sub-package (`advisor/`) counts as one module; an import counts when it is a statement at module
level (those under `if TYPE_CHECKING:` too) and names another engine module. The imports made
inside functions are not counted here (`tests/test_boundaries.py` checks those for cycles).
"""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1] / "engine"
PACKAGE = "agentops.engine"


def module_of(path: Path) -> str:
    """The engine module a file belongs to: its name, or its sub-package's."""
    parts = path.relative_to(ENGINE).with_suffix("").parts
    return parts[0] if len(parts) > 1 else parts[-1]


def targets(node: ast.stmt, path: Path, modules: set[str]) -> set[str]:
    """The engine modules an import statement at module level names."""
    if isinstance(node, ast.If):
        return {t for child in node.body for t in targets(child, path, modules)}
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            package = [PACKAGE, *path.relative_to(ENGINE).parent.parts]
            base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
        # `from agentops.engine import gates` names a module; any other name is the door's.
        names = [f"{base}.{alias.name}" if base == PACKAGE else base for alias in node.names]
    found = set()
    for name in names:
        first = name.removeprefix(f"{PACKAGE}.").split(".")[0]
        if name.startswith(f"{PACKAGE}."):
            found.add(first if first in modules else "__init__")
    return found


def import_graph() -> dict[str, set[str]]:
    """Each engine module and the engine modules it imports at module level."""
    paths = sorted(ENGINE.rglob("*.py"))
    modules = {module_of(path) for path in paths}
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for path in paths:
        module = module_of(path)
        for node in ast.parse(path.read_text()).body:
            graph[module] |= targets(node, path, modules) - {module}
    return graph


def depths(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each module's depth: 1 for one that imports no engine module, else one more than the
    deepest module it imports (a cycle raises RecursionError: there must be none)."""

    @functools.cache
    def depth(module: str) -> int:
        return 1 + max((depth(t) for t in graph[module]), default=0)

    return {module: depth(module) for module in graph}


def main(argv: list[str]) -> None:
    graph = import_graph()
    depth = depths(graph)
    imports = sum(len(t) for t in graph.values())
    print(f"modules {len(graph)}, imports {imports}, depth {max(depth.values())}")
    if "-v" in argv:
        for module in sorted(graph, key=lambda m: (-depth[m], m)):
            print(f"{depth[module]:3} {module}: {' '.join(sorted(graph[module]))}")


if __name__ == "__main__":
    main(sys.argv[1:])
