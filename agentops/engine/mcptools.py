"""MCP tools in the registry: servers declared per agent, their tools discovered and governed.

An agent lists `McpServer`s, each a stdio command or a streamable-HTTP URL. A worker lists a
server's tools when a step needs them: before the step's model call (the server of the tool its
plan names; every server of the agent when it names none) and before every call of one of its
tools. Each becomes a registry `Tool` named `<server>__<tool>` (`McpTool`), so the runner, the
policy lanes, the ledger, redaction and the reviewer's record treat it like a Python tool.

- Side-effect class: `read` when the tool's annotations say `readOnlyHint`; else `destructive`
  when they say `destructiveHint`, `write` when they deny it; an absent hint takes the MCP
  default (not read-only, destructive, not idempotent, open world), the conservative reading.
  The declaration may set a tool's class (`side_effects`), and the policy routes any tool by
  class or by name like every other.
- Lost outcomes: a read or an `idempotentHint` tool is asked again; any other call whose answer
  is lost (a timeout, a dead server, a killed worker) is `executed_unknown`: "did it happen?".
  MCP has no idempotency key: the ledger's key is recorded, never sent.
- Failures: a server that cannot be listed or started fails with its own words (the last lines
  of a stdio server's stderr); only the steps that need it stop (`registry.step_sources`).
- Schema: every step that proposes an MCP tool records the tool's schema digest (its input and
  output schemas and annotations) and definition in `Step.spec["tool_schema"]`. Before a call
  the live definition must still have the digest the task first recorded for the tool and the
  one the step was proposed (and perhaps approved) under; otherwise the call is not sent and
  the step fails with `tool_schema_changed`, naming what changed.
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import settings

from agentops.engine.crashpoints import crashpoint
from agentops.engine.errors import FailureKind, ModelFailure, ToolFailure
from agentops.engine.jsonvalues import digest
from agentops.engine.outbound import outbound_check
from agentops.engine.redaction import redacted, redacted_cut
from agentops.engine.registry import SIDE_EFFECT_CLASSES, Tool, ToolContext, json_path, tool_add

if TYPE_CHECKING:
    from mcp_types import CallToolResult

    from agentops.engine.mcpclient import Endpoint

# The SDK (`mcp`, `mcp_types`), the connections and jsonschema are imported when a worker
# first talks to a server: declaring servers (every process imports the agents) costs nothing,
# and the web tier, which reads tools from their records, never imports them.

logger = logging.getLogger(__name__)

SEPARATOR = "__"
# What the model adapters accept as a function name (OpenAI: 64 characters of these).
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SERVER_NAME = re.compile(r"^[a-z][a-z0-9-]*(?:_[a-z0-9-]+)*$")
# JSON-RPC's codes for a request the server would not run: unknown method, invalid params.
_NOT_RUN = (-32601, -32602)
# The MCP specification's values for hints a server leaves out.
HINT_DEFAULTS: Mapping[str, bool] = {
    "readOnlyHint": False,
    "destructiveHint": True,
    "idempotentHint": False,
    "openWorldHint": True,
}
_HINT_FIELDS = {
    "readOnlyHint": "read_only_hint",
    "destructiveHint": "destructive_hint",
    "idempotentHint": "idempotent_hint",
    "openWorldHint": "open_world_hint",
}


@dataclass(frozen=True, eq=False)
class McpServer:
    """An MCP server an agent takes tools from: a stdio `command` (argv) or a streamable-HTTP
    `url`. Its tools are named `<name>__<tool>` and touch the system `name` (plus `systems`).

    `side_effects` sets the class of named tools (the server's own names), over their
    annotations; `timeout` bounds each request (None: AGENTOPS_TOOL_TIMEOUT_SECONDS) and
    `start_timeout` the spawn and handshake (None: AGENTOPS_MCP_START_TIMEOUT_SECONDS).
    """

    name: str
    command: tuple[str, ...] = ()
    url: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    systems: tuple[str, ...] = ()
    side_effects: Mapping[str, str] = field(default_factory=dict)
    timeout: float | None = None
    start_timeout: float | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if not _SERVER_NAME.match(self.name) or SEPARATOR in self.name:
            raise ValueError(
                f"MCP server name {self.name!r}: lowercase letters, digits, '-' and single '_', "
                "starting with a letter"
            )
        if bool(self.command) == bool(self.url):
            raise ValueError(f"MCP server {self.name}: give exactly one of command= or url=")
        if isinstance(self.command, str):
            raise ValueError(f"MCP server {self.name}: command= is an argv tuple, not a string")
        for tool, side_effect in self.side_effects.items():
            if side_effect not in SIDE_EFFECT_CLASSES:
                raise ValueError(
                    f"MCP server {self.name}: side_effects[{tool!r}] must be one of "
                    f"{SIDE_EFFECT_CLASSES}"
                )

    # -- what the registry asks (agentops.engine.registry.ToolSource) --------------------------

    def tool_names(self, *, refresh: bool = False) -> list[str]:
        """The names of the server's tools, listed now if this process has not yet (or if
        `refresh`)."""
        known = _DISCOVERED.get(self.name)
        if known is None or refresh:
            known = discover(self)
        return sorted(known)

    def recorded(self, name: str) -> Tool | None:
        """The tool as the newest step that proposed it recorded it (no request to the
        server: the web tier and a worker resuming a recorded step read it from the database)."""
        from agentops.models import Step

        spec = (
            Step.objects.filter(spec__tool_schema__tool=name)
            .order_by("-id")
            .values_list("spec", flat=True)
            .first()
        )
        record = (spec or {}).get("tool_schema") if isinstance(spec, dict) else None
        if not isinstance(record, dict) or not isinstance(record.get("definition"), dict):
            return None
        tool = tool_from(self, record["definition"])
        if tool is not None:
            tool_add(tool)
        return tool

    def recorded_names(self) -> list[str]:
        """The server's tools that steps recorded, newest listing at most a minute old (the
        policy editor's checks ask; steps are not indexed by tool, so the answer is kept)."""
        import time

        from agentops.models import Step

        kept = _RECORDED_NAMES.get(self.name)
        if kept is not None and time.monotonic() - kept[0] < RECORDED_NAMES_SECONDS:
            return kept[1]
        names = sorted(
            str(name)
            for name in Step.objects.filter(spec__tool_schema__server=self.name)
            .values_list("spec__tool_schema__tool", flat=True)
            .distinct()
        )
        _RECORDED_NAMES[self.name] = (time.monotonic(), names)
        return names

    # -- connecting -------------------------------------------------------------------------

    @property
    def request_timeout(self) -> float:
        if self.timeout is not None:
            return self.timeout
        return float(settings.AGENTOPS["TOOL_TIMEOUT_SECONDS"])

    def endpoint(self) -> Endpoint:
        from mcp import StdioServerParameters

        from agentops.engine.mcpclient import Endpoint

        start = self.start_timeout
        if start is None:
            start = float(settings.AGENTOPS["MCP_START_TIMEOUT_SECONDS"])
        if self.url:
            return Endpoint(
                key=self.name,
                target=self.url,
                start_timeout=start,
                headers=tuple(self.headers.items()),
            )
        program, *args = self.command
        params = StdioServerParameters(
            command=program,
            args=list(args),
            env=dict(self.env) or None,
            cwd=self.cwd or None,
        )
        return Endpoint(key=self.name, target=params, start_timeout=start)

    def where(self) -> str:
        return self.url or shlex.join(self.command)


# server name -> (monotonic time, the tool names its steps recorded then).
_RECORDED_NAMES: dict[str, tuple[float, list[str]]] = {}
RECORDED_NAMES_SECONDS = 60.0


@dataclass
class McpTool(Tool):
    """A tool of an MCP server, as the registry holds it. `fn` calls the server."""

    server: McpServer | None = None
    remote_name: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)
    # The annotations' hints, with the MCP defaults for those the server left out.
    hints: dict[str, bool] = field(default_factory=dict)
    hinted: tuple[str, ...] = ()
    # What a step records of the tool: the definition as listed (JSON).
    definition: dict[str, Any] = field(default_factory=dict)

    def check_arguments(self, arguments: dict[str, Any], *, text: bytes | None = None) -> None:
        """The arguments against the tool's JSON Schema; the message names each path."""
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError

        try:
            errors = sorted(
                Draft202012Validator(self.input_schema).iter_errors(arguments),
                key=lambda e: list(map(str, e.absolute_path)),
            )
        except SchemaError as exc:
            raise ModelFailure(
                f"tool {self.name}: its input schema is invalid: {exc.message}",
                kind=FailureKind.OUTPUT_INVALID,
            ) from None
        if errors:
            found = "; ".join(
                f"{json_path('arguments', tuple(e.absolute_path))}: {e.message}" for e in errors
            )
            raise ModelFailure(f"tool {self.name}: {found}", kind=FailureKind.OUTPUT_INVALID)

    def parameters(self) -> dict[str, type]:
        return {name: object for name in self.input_schema.get("properties") or {}}

    @property
    def repeat_safe(self) -> str:
        # MCP carries no idempotency key: a repeat is safe because of what the tool is.
        if self.read_only:
            return "the tool only reads: asked again"
        return "the server marks the tool idempotent (idempotentHint): asked again"

    def schema(self) -> dict[str, Any]:
        parameters = {k: v for k, v in self.input_schema.items() if k != "title"}
        return {"name": self.name, "description": self.description, "parameters": parameters}

    def step_fields(self, spec: dict[str, Any]) -> dict[str, Any]:
        return {"spec": {**spec, "tool_schema": self.record()}}

    def record(self) -> dict[str, Any]:
        """What a step stores about the tool it proposes: `Step.spec["tool_schema"]`."""
        assert self.server is not None
        return {
            "tool": self.name,
            "server": self.server.name,
            "digest": self.schema_digest,
            "side_effect": self.side_effect,
            "hints": self.hints,
            "hinted": list(self.hinted),
            "definition": self.definition,
        }

    def call(self, ctx: ToolContext, **arguments: Any) -> dict[str, Any]:
        """Check the live definition against the task's record, then call the server once."""
        assert self.server is not None
        live = discover(self.server).get(self.name)
        changed = schema_change(self.name, live, ctx)
        if changed is not None:
            raise changed
        assert live is not None
        result = _called(self.server, live, arguments)
        crashpoint("mcp_answered", step=ctx.step)
        return _result_of(self.name, result)


def _unbound(ctx: ToolContext, **arguments: Any) -> dict[str, Any]:
    raise AssertionError("an MCP tool runs through McpTool.call")


def tool_from(server: McpServer, definition: Mapping[str, Any]) -> McpTool | None:
    """The registry tool for one listed MCP tool, from its definition as JSON (the wire names:
    `inputSchema`, `annotations.readOnlyHint` ...). None: its name cannot be a function name."""
    name = f"{server.name}{SEPARATOR}{definition.get('name')}"
    if not _TOOL_NAME.match(name):
        logger.warning("MCP server %s: tool %r skipped (not a valid tool name)", server.name, name)
        return None
    annotations = definition.get("annotations") or {}
    given = {hint: annotations[hint] for hint in HINT_DEFAULTS if annotations.get(hint) is not None}
    hints = {**HINT_DEFAULTS, **given}
    remote = str(definition["name"])
    side_effect = server.side_effects.get(remote) or side_effect_of(hints)
    tool = McpTool(
        name=name,
        fn=_unbound,
        side_effect=side_effect,
        systems=tuple(dict.fromkeys((server.name, *server.systems))),
        # Asking again is safe: the tool only reads, or the server says a repeat changes nothing.
        idempotent_remote=side_effect == "read" or bool(hints["idempotentHint"]),
        description=str(definition.get("description") or definition.get("title") or "").strip(),
        server=server,
        remote_name=remote,
        input_schema=dict(definition.get("inputSchema") or {"type": "object"}),
        hints=hints,
        hinted=tuple(sorted(given)),
        definition=dict(definition),
        schema_digest=schema_digest(definition),
    )
    tool.fn = tool.call
    return tool


def side_effect_of(hints: Mapping[str, bool]) -> str:
    """The class a tool's hints give: `read` when read-only; else `destructive` when it may
    destroy or overwrite (the MCP default), `write` when it only adds."""
    if hints["readOnlyHint"]:
        return "read"
    return "destructive" if hints["destructiveHint"] else "write"


def schema_digest(definition: Mapping[str, Any]) -> str:
    """What a task relies on: the input and output schemas and the behaviour hints (not the
    description's wording, nor the display title)."""
    hints = {k: v for k, v in (definition.get("annotations") or {}).items() if k != "title"}
    return digest(
        {
            "name": definition.get("name"),
            "inputSchema": definition.get("inputSchema"),
            "outputSchema": definition.get("outputSchema"),
            "annotations": hints,
        }
    )


# -- discovery -----------------------------------------------------------------------------------

# server name -> tool name -> tool, as this process last listed them.
_DISCOVERED: dict[str, dict[str, McpTool]] = {}


def discover(server: McpServer) -> dict[str, McpTool]:
    """List the server's tools now (starting it if needed, once more if it died) and register
    them. Raises ToolFailure(unavailable) when it cannot be asked: nothing was sent."""
    from agentops.engine.mcpclient import McpRefused, McpUnreachable, connections

    outbound_check(f"listing the tools of MCP server {server.name}")
    endpoint = server.endpoint()
    try:
        try:
            listed = connections.list_tools(endpoint, timeout=server.request_timeout)
        except McpUnreachable as lost:
            if lost.timed_out or not lost.started:
                raise
            # The connection held from an earlier request died: start the server again.
            listed = connections.list_tools(endpoint, timeout=server.request_timeout)
    except McpUnreachable as exc:
        # The server's own words first (a recovery panel shows the message's start), then where
        # it is; redacted here, as it is logged before it is stored.
        raise ToolFailure(
            redacted(f"{exc} [{_clipped(server.where())}]"),
            kind=FailureKind.UNAVAILABLE,
            retryable=True,
            detail={"maybe_executed": False, "server": server.name},
        ) from None
    except McpRefused as exc:
        raise ToolFailure(
            f"MCP server {server.name} refused to list its tools: {exc}",
            kind=FailureKind.UNAVAILABLE,
            retryable=True,
            detail={"maybe_executed": False, "server": server.name},
        ) from None
    definitions = [
        wire.model_dump(mode="json", by_alias=True, exclude_none=True) for wire in listed
    ]
    tools = {t.name: t for t in (tool_from(server, d) for d in definitions) if t is not None}
    before = _DISCOVERED.get(server.name) or {}
    for name, tool in tools.items():
        if name in before and before[name].schema_digest != tool.schema_digest:
            logger.warning("MCP tool %s changed its schema (digest %s)", name, tool.schema_digest)
        tool_add(tool)
    _DISCOVERED[server.name] = tools
    return tools


def _clipped(text: str, size: int = 200) -> str:
    return text if len(text) <= size else text[: size - 3] + "..."


def forget_discovered() -> None:
    """Forget what this process listed and read of the records (tests; the registry keeps the
    tools)."""
    _DISCOVERED.clear()
    _RECORDED_NAMES.clear()


# -- a changed schema ----------------------------------------------------------------------------


def schema_change(name: str, live: McpTool | None, ctx: ToolContext) -> ToolFailure | None:
    """A failure naming how the tool changed since the task recorded it, or None. The call is
    not sent (nothing was executed)."""
    from agentops.models import Step

    records = [
        (ordinal, spec["tool_schema"])
        for ordinal, spec in Step.objects.filter(task_id=ctx.task_id, spec__tool_schema__tool=name)
        .order_by("ordinal")
        .values_list("ordinal", "spec")
    ]
    if not records:
        return None
    first_step, first = records[0]
    own = next((record for ordinal, record in records if ordinal == ctx.step), first)
    if live is not None and live.schema_digest == first["digest"] == own["digest"]:
        return None
    expected = own if own["digest"] != first["digest"] else first
    if live is None:
        changes = [f"the server no longer offers {name.split(SEPARATOR, 1)[1]}"]
        current = None
    else:
        changes = definition_changes(expected.get("definition") or {}, live.definition)
        current = live.schema_digest
    return ToolFailure(
        f"{name}: the MCP server changed this tool since the task recorded it at step "
        f"{first_step + 1} ({'; '.join(changes) or 'its schema digest differs'}); the call "
        "was not sent",
        kind=FailureKind.TOOL_SCHEMA_CHANGED,
        retryable=False,
        detail={
            "maybe_executed": False,
            "tool": name,
            "recorded_digest": first["digest"],
            "proposed_digest": own["digest"],
            "current_digest": current,
            "changes": changes,
        },
    )


def definition_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """What a person reads about a changed tool: arguments added, removed, retyped, newly
    required, and hints that moved."""
    old_in = before.get("inputSchema") or {}
    new_in = after.get("inputSchema") or {}
    old_props, new_props = old_in.get("properties") or {}, new_in.get("properties") or {}
    old_req, new_req = set(old_in.get("required") or ()), set(new_in.get("required") or ())
    changes = [f"argument {p!r} added" for p in sorted(set(new_props) - set(old_props))]
    changes += [f"argument {p!r} removed" for p in sorted(set(old_props) - set(new_props))]
    changes += [
        f"argument {p!r} changed"
        for p in sorted(set(old_props) & set(new_props))
        if old_props[p] != new_props[p]
    ]
    changes += [f"argument {p!r} is now required" for p in sorted(new_req - old_req)]
    changes += [f"argument {p!r} is no longer required" for p in sorted(old_req - new_req)]
    if before.get("outputSchema") != after.get("outputSchema"):
        changes.append("its output schema changed")
    old_hints, new_hints = before.get("annotations") or {}, after.get("annotations") or {}
    for hint in HINT_DEFAULTS:
        was, now = old_hints.get(hint), new_hints.get(hint)
        if was != now:
            changes.append(f"{hint} {_hint(was)} -> {_hint(now)}")
    return changes


def _hint(value: Any) -> str:
    return "absent" if value is None else str(value).lower()


# -- the call ------------------------------------------------------------------------------------


def _called(server: McpServer, tool: McpTool, arguments: dict[str, Any]) -> CallToolResult:
    """One tools/call, its failures classified for the ledger (`maybe_executed`: the request may
    have reached the server, so the ledger reconciles before anything is repeated)."""
    from agentops.engine.mcpclient import McpRefused, McpUnreachable, connections

    try:
        return connections.call_tool(
            server.endpoint(), tool.remote_name, arguments, timeout=server.request_timeout
        )
    except McpUnreachable as exc:
        raise ToolFailure(
            f"{tool.name}: {exc}",
            kind=FailureKind.TIMEOUT if exc.timed_out else FailureKind.UNAVAILABLE,
            retryable=True,
            detail={"maybe_executed": exc.sent},
        ) from None
    except McpRefused as exc:
        rejected = exc.code in _NOT_RUN
        raise ToolFailure(
            f"{tool.name}: the server answered with error {exc.code}: {exc}",
            kind=FailureKind.BAD_REQUEST if rejected else FailureKind.UNAVAILABLE,
            retryable=not rejected,
            detail={"maybe_executed": not rejected},
        ) from None


def _result_of(name: str, result: CallToolResult) -> dict[str, Any]:
    """The ledger's record of a result: its content blocks, and its structured content if any.
    A result flagged `isError` is the tool saying it failed (it did not act)."""
    content = [
        block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content
    ]
    if result.is_error:
        said = " ".join(str(block.get("text", "")) for block in content).strip()
        raise ToolFailure(
            f"{name} reported an error: {redacted_cut(said, 500) or 'no detail'}",
            kind=FailureKind.TOOL_ERROR,
            retryable=False,
            detail={"maybe_executed": False},
        )
    recorded: dict[str, Any] = {"content": content}
    if result.structured_content is not None:
        recorded["structured"] = result.structured_content
    return recorded
