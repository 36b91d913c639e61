"""Agents of installed packages: the `agentops.agents` entry-point group, loaded once at start-up.

Each entry point of the group names a module (`parcel_notice = "agentops_example_agent.agent"`)
whose import registers agents and tools through `agentops.sdk`. The product's own agents come the
same way (its pyproject.toml names `agentops.agents`) and first; then the other distributions', by
name. Every process loads them in `AgentopsConfig.ready()`, so the web tier, the workers and the
sweeper know the same agents.

The constraint: fail closed. An entry point whose module does not import, that names something
other than a module, or that re-declares an agent or a tool already registered, stops the process
at start-up with one error naming the distribution and the entry point (`AgentPackageRefused`,
logged first as one line). Skipping it would start a worker that claims the missing agent's tasks
and stops each one as `unknown_agent`, or one that runs another package's function for a tool
the ledger recorded under that name; a deploy that refuses to start keeps the running processes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import NoReturn

from django.core.exceptions import ImproperlyConfigured

from agentops.engine import registry

GROUP = "agentops.agents"
# The distribution whose entry point brings the shipped agents.
PRODUCT = "agentops"

logger = logging.getLogger(__name__)


class AgentPackageRefused(ImproperlyConfigured):
    """An entry point of the group cannot be loaded: the process does not start."""


@dataclass(frozen=True)
class AgentPackage:
    """What one entry point brought: where it comes from and the names it registered."""

    distribution: str
    version: str
    entry_point: str
    module: str
    agents: tuple[str, ...]
    tools: tuple[str, ...]


_LOADED: list[AgentPackage] = []


def agent_packages_load() -> list[AgentPackage]:
    """Import the module of every entry point of the group, the product's first; raise
    AgentPackageRefused for the first one that fails, or when the product's own is missing
    (its metadata is not installed: `make install`, or the wheel, installs it)."""
    points = sorted(entry_points(group=GROUP), key=_order)
    if not any(_distribution(point) == PRODUCT for point in points):
        _refuse(
            f"no entry point of group {GROUP!r} comes from the {PRODUCT} distribution, so its "
            "own agents would not load: install the product (make install, or pip install the "
            "wheel) instead of running it from an uninstalled source tree"
        )
    return [agent_package_load(point) for point in points]


def agent_package_load(point: EntryPoint) -> AgentPackage:
    """Import the module `point` names, which registers its agents and tools; raise
    AgentPackageRefused (after logging it) if it fails to import, names something other than a
    module, or replaces an agent or a tool registered before it."""
    where = (
        f"entry point {point.name!r} = {point.value!r} of distribution "
        f"{_distribution(point) or '(unknown)'} {_version(point)}".rstrip()
    )
    agents_before = {agent.name: agent for agent in registry.agents()}
    tools_before = {tool.name: tool for tool in registry.tools()}
    try:
        loaded = point.load()
    except Exception as exc:  # whatever a package's import raises, it is named and refused
        _refuse(f"{where} failed to import: {type(exc).__name__}: {exc}", cause=exc)
    if not isinstance(loaded, ModuleType):
        _refuse(f"{where} names {type(loaded).__name__} {point.attr!r}, not a module")
    agents_after = {agent.name: agent for agent in registry.agents()}
    tools_after = {tool.name: tool for tool in registry.tools()}
    replaced = _replaced("agent", agents_before, agents_after)
    replaced += _replaced("tool", tools_before, tools_after)
    if replaced:
        _refuse(
            f"{where} re-declares {', '.join(replaced)}, registered before it: agent and tool "
            "names are one namespace per deployment, so rename them in the package"
        )
    package = AgentPackage(
        distribution=_distribution(point),
        version=_version(point),
        entry_point=point.name,
        module=point.module,
        agents=tuple(sorted(set(agents_after) - set(agents_before))),
        tools=tuple(sorted(set(tools_after) - set(tools_before))),
    )
    _LOADED.append(package)
    return package


def agent_packages_log() -> None:
    """One line per package of another distribution whose agents this process loaded, for a
    long-running process to say at start what it can run (a worker); a command that answers in
    one line (`check`, `migrate`, `runstack`'s refusal) stays one line."""
    for package in _LOADED:
        if package.distribution != PRODUCT:
            logger.info(
                "agents of %s %s (entry point %s): %s",
                package.distribution,
                package.version,
                package.entry_point,
                ", ".join(package.agents) or "none new",
            )


def agent_packages() -> list[AgentPackage]:
    """The entry points this process loaded, in the order it loaded them."""
    return list(_LOADED)


def _refuse(message: str, *, cause: BaseException | None = None) -> NoReturn:
    logger.error("agent package refused: %s", message)
    raise AgentPackageRefused(message) from cause


def _replaced(kind: str, before: Mapping[str, object], after: Mapping[str, object]) -> list[str]:
    """The names registered before whose object is another one now (a later declaration won)."""
    return [f"{kind} {name!r}" for name, value in before.items() if after[name] is not value]


def _order(point: EntryPoint) -> tuple[bool, str, str]:
    return (_distribution(point) != PRODUCT, _distribution(point), point.name)


def _distribution(point: EntryPoint) -> str:
    """The distribution's normalized name (PEP 503), "" for an entry point made by hand."""
    name = point.dist.name if point.dist is not None else ""
    return re.sub(r"[-_.]+", "-", name).lower()


def _version(point: EntryPoint) -> str:
    return point.dist.version if point.dist is not None else ""
