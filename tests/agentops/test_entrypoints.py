"""Agents of installed packages (`agentops.engine.entrypoints`): the entry points of the group
`agentops.agents` load at start-up, the product's first, and one that cannot load stops the
process with one error naming its distribution and entry point (fail closed).

The broken packages here are real distributions: a `.dist-info` directory with its
`entry_points.txt`, found by `importlib.metadata` on a path of their own."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import EntryPoint, distributions
from pathlib import Path

import pytest

from agentops.engine import entrypoints, registry
from agentops.engine.entrypoints import AgentPackageRefused, agent_package_load
from tests.conftest import ROOT


def installed(site: Path, *, name: str, entry_points: str, modules: dict[str, str]) -> EntryPoint:
    """A distribution `name` 1.0 installed into `site` with these entry points of the group and
    these modules; its first entry point."""
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[agentops.agents]\n{entry_points}\n")
    for module, text in modules.items():
        (site / f"{module}.py").write_text(text)
    (dist,) = distributions(path=[str(site)])
    return next(iter(dist.entry_points.select(group=entrypoints.GROUP)))


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on sys.path for the test's packages; the registry and the list of loaded
    packages as they were are restored after (a refused package may have registered before it
    was refused)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("_AGENTS", "_TOOLS", "_TOOL_ENTRIES"):
        monkeypatch.setattr(registry, name, dict(getattr(registry, name)))
    monkeypatch.setattr(entrypoints, "_LOADED", list(entrypoints._LOADED))
    before = set(sys.modules)
    yield tmp_path
    for module in set(sys.modules) - before:
        if module.startswith("fake_agents"):
            del sys.modules[module]


def test_the_shipped_agents_load_first_then_the_installed_packages() -> None:
    loaded = entrypoints.agent_packages()

    assert [(p.distribution, p.entry_point, p.module) for p in loaded] == [
        ("agentops", "agentops", "agentops.agents"),
        ("agentops-example-agent", "parcel_notice", "agentops_example_agent.agent"),
    ]
    assert {"refund", "trip", "procurement"} <= set(loaded[0].agents)
    assert loaded[1].agents == ("parcel_notice",)
    assert loaded[1].tools == ("locate_parcel", "notify_customer")
    assert registry.get_agent("parcel_notice").tools == ["locate_parcel", "notify_customer"]


def test_an_entry_point_that_fails_to_import_refuses_naming_distribution_and_entry_point(
    site: Path, caplog: pytest.LogCaptureFixture
) -> None:
    point = installed(
        site,
        name="acme-agents",
        entry_points="acme = fake_agents_broken",
        modules={"fake_agents_broken": "import fake_agents_no_such_dependency\n"},
    )

    with pytest.raises(AgentPackageRefused) as refused:
        agent_package_load(point)

    message = str(refused.value)
    assert message == (
        "entry point 'acme' = 'fake_agents_broken' of distribution acme-agents 1.0 failed to "
        "import: ModuleNotFoundError: No module named 'fake_agents_no_such_dependency'"
    )
    assert isinstance(refused.value.__cause__, ModuleNotFoundError)
    errors = [r for r in caplog.records if r.name == entrypoints.__name__]
    assert [(r.levelname, r.getMessage()) for r in errors] == [
        ("ERROR", f"agent package refused: {message}")
    ]


def test_an_entry_point_that_names_no_module_is_refused(site: Path) -> None:
    point = installed(
        site,
        name="acme-agents",
        entry_points="acme = fake_agents_attr:register",
        modules={"fake_agents_attr": "def register():\n    pass\n"},
    )

    with pytest.raises(AgentPackageRefused, match=r"names function 'register', not a module"):
        agent_package_load(point)


def test_a_package_that_re_declares_a_shipped_tool_is_refused(site: Path) -> None:
    shipped = registry.get_tool("lookup_order")
    point = installed(
        site,
        name="acme-agents",
        entry_points="acme = fake_agents_clash",
        modules={
            "fake_agents_clash": (
                "from __future__ import annotations\n"
                "from agentops.sdk import ToolContext, tool\n"
                "@tool(side_effect='read')\n"
                "def lookup_order(call: ToolContext, *, order_id: str) -> dict[str, str]:\n"
                "    return {}\n"
            )
        },
    )

    with pytest.raises(AgentPackageRefused) as refused:
        agent_package_load(point)

    assert "of distribution acme-agents 1.0 re-declares tool 'lookup_order'" in str(refused.value)
    assert registry.get_tool("lookup_order") is not shipped  # why the process may not start


def test_a_package_that_declares_new_agents_is_loaded_and_reported(site: Path) -> None:
    point = installed(
        site,
        name="acme-agents",
        entry_points="acme = fake_agents_fine",
        modules={
            "fake_agents_fine": (
                "from __future__ import annotations\n"
                "from agentops.sdk import Agent, PlanStep, register_agent\n"
                "register_agent(Agent(name='acme_lookup', system_prompt='Look it up.',\n"
                "    tools=['lookup_order'], plan=[PlanStep('Look up', 'lookup_order')]))\n"
            )
        },
    )

    package = agent_package_load(point)

    assert (package.distribution, package.version, package.agents, package.tools) == (
        "acme-agents",
        "1.0",
        ("acme_lookup",),
        (),
    )


def test_without_the_product_s_own_entry_point_nothing_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    others = [
        point
        for point in entrypoints.entry_points(group=entrypoints.GROUP)
        if point.dist is not None and point.dist.name != "agentops"
    ]
    monkeypatch.setattr(entrypoints, "entry_points", lambda group: others)

    with pytest.raises(AgentPackageRefused, match=r"from the agentops distribution"):
        entrypoints.agent_packages_load()


def test_a_process_with_a_broken_agent_package_installed_refuses_to_start(tmp_path: Path) -> None:
    installed(
        tmp_path,
        name="acme-agents",
        entry_points="acme = fake_agents_broken",
        modules={"fake_agents_broken": "raise RuntimeError('no ACME_TOKEN in the environment')\n"},
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}

    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 1
    refusals = [line for line in done.stderr.splitlines() if "agent package refused" in line]
    assert len(refusals) == 1
    assert (
        "entry point 'acme' = 'fake_agents_broken' of distribution acme-agents 1.0 failed to "
        "import: RuntimeError: no ACME_TOKEN in the environment"
    ) in refusals[0]
    assert done.stderr.rstrip().endswith(
        "AgentPackageRefused: entry point 'acme' = 'fake_agents_broken' of distribution "
        "acme-agents 1.0 failed to import: RuntimeError: no ACME_TOKEN in the environment"
    )
