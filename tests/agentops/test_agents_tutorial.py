"""docs/agents.md's tutorial is the example agent package, verbatim: each of the package's files
is a block of the tutorial (```python file=<path>), and each such block is the file as it is.
The package itself runs end to end on a real worker (test_example_agent.py) and passes mypy
strict and the boundary test, so the tutorial's code is the code that runs."""

from __future__ import annotations

import re

from tests.conftest import ROOT

TUTORIAL = ROOT / "docs" / "agents.md"
EXAMPLE = ROOT / "tests" / "example_agent"
# A fenced block that says which file it shows: ```python file=tests/example_agent/...
FILE_BLOCK = re.compile(r"^```\w+ file=(\S+)\n(.*?)^```$", re.S | re.M)


def tutorial_blocks(text: str) -> dict[str, str]:
    """The file blocks of a Markdown text: path -> the block's text."""
    blocks: dict[str, str] = {}
    for path, code in FILE_BLOCK.findall(text):
        assert path not in blocks, f"{path} is shown twice"
        blocks[path] = code
    return blocks


def package_files() -> dict[str, str]:
    """The example package's source files (not what an install builds beside them)."""
    return {
        str(path.relative_to(ROOT)): path.read_text()
        for path in sorted(EXAMPLE.rglob("*"))
        if path.suffix in (".py", ".toml") and not {"__pycache__", "build"} & set(path.parts)
        if not any(part.endswith(".egg-info") for part in path.parts)
    }


def test_each_file_of_the_example_package_is_in_the_tutorial_verbatim() -> None:
    files = package_files()

    assert len(files) == 4  # pyproject.toml, __init__.py, tools.py, agent.py
    assert tutorial_blocks(TUTORIAL.read_text()) == files


def test_the_block_scan_sees_a_changed_line_and_a_missing_file() -> None:
    text = "intro\n```python file=a.py\nx = 1\n```\n\n```toml file=b.toml\n[a]\n```\n"

    assert tutorial_blocks(text) == {"a.py": "x = 1\n", "b.toml": "[a]\n"}
    assert tutorial_blocks(text.replace("x = 1", "x = 2")) != {"a.py": "x = 1\n", "b.toml": "[a]\n"}
    assert "b.toml" not in tutorial_blocks(text.replace("file=b.toml", ""))
