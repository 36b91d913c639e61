"""Small rooms: no Python module of the project is over 600 lines.

A module past the limit is split by sub-domain into a package whose `__init__` re-exports its
public names (as `reviews.services`, `reviews.selectors` and `reviews.views` are). The modules
still over the limit are listed below with their line count as a ceiling, so they cannot grow
while they wait for their split; a module leaves the list when it is split. Migrations are
generated and excluded.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APPS = ("agentops", "policies", "reviews")
LIMIT = 600

# Still over the limit, each with its line count today as a ceiling. An entry names the module
# by its last path parts, so it keeps matching when its folder moves inside its app; it must match
# exactly one module. Empty: every module is under the limit, and a new big one fails the test.
OVER_LIMIT: dict[str, int] = {}


def line_count(path: Path) -> int:
    with path.open("rb") as lines:
        return sum(1 for _ in lines)


def project_modules() -> list[Path]:
    """Every .py file of the three apps, migrations excluded."""
    return sorted(
        path
        for app in APPS
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.relative_to(ROOT).parts
    )


def matches(entry: str, path: Path) -> bool:
    """Whether the listed `entry` names `path` (the same last path parts)."""
    name = path.relative_to(ROOT).as_posix()
    return name == entry or name.endswith(f"/{entry}")


def rooms_too_big(counts: dict[Path, int], ceilings: dict[str, int]) -> dict[str, str]:
    """The modules over `LIMIT` that are not listed in `ceilings`, and the listed ones over
    their ceiling, with why."""
    found = {}
    for path, lines in counts.items():
        listed = [entry for entry in ceilings if matches(entry, path)]
        name = path.relative_to(ROOT).as_posix()
        if listed and lines > ceilings[listed[0]]:
            found[name] = f"{lines} lines, grew past its ceiling of {ceilings[listed[0]]}"
        elif not listed and lines > LIMIT:
            found[name] = f"{lines} lines, over the limit of {LIMIT}: split it by sub-domain"
    return found


def test_no_module_is_over_600_lines_but_the_listed_ones_which_cannot_grow() -> None:
    counts = {path: line_count(path) for path in project_modules()}

    assert rooms_too_big(counts, OVER_LIMIT) == {}


def test_each_listed_module_exists_once_and_is_still_over_the_limit() -> None:
    # A module split since leaves the list, so the list says only what is still to do.
    for entry in sorted(OVER_LIMIT):
        found = [path for path in project_modules() if matches(entry, path)]

        assert len(found) == 1, found
        assert line_count(found[0]) > LIMIT, entry


def test_the_reviews_rooms_are_packages_of_modules_under_the_limit() -> None:
    for package in ("views", "selectors", "services"):
        modules = sorted((ROOT / "reviews" / package).glob("*.py"))

        assert not (ROOT / "reviews" / f"{package}.py").exists()
        assert len(modules) > 2 and (ROOT / "reviews" / package / "__init__.py") in modules
        assert max(line_count(path) for path in modules) <= LIMIT


def test_the_size_check_sees_a_new_big_module_and_a_listed_one_that_grew() -> None:
    counts = {
        ROOT / "reviews" / "big.py": 601,
        ROOT / "reviews" / "small.py": 600,
        ROOT / "agentops" / "engine" / "runner.py": 1022,
        ROOT / "agentops" / "dev" / "benchmarks" / "checkpoint.py": 797,
        ROOT / "agentops" / "notbenchmarks" / "checkpoint.py": 700,
    }

    ceilings = {"agentops/engine/runner.py": 1021, "benchmarks/checkpoint.py": 797}

    assert rooms_too_big(counts, ceilings) == {
        "reviews/big.py": "601 lines, over the limit of 600: split it by sub-domain",
        "agentops/engine/runner.py": "1022 lines, grew past its ceiling of 1021",
        "agentops/notbenchmarks/checkpoint.py": (
            "700 lines, over the limit of 600: split it by sub-domain"
        ),
    }
