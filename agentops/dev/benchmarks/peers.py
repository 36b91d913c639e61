"""The peers' price of a model+tool step, measured the way `bench checkpoint` measures ours.

Run by `manage.py bench checkpoint --peers` in a separate virtualenv that has the peers' packages
(`make peers-venv`: LangGraph with its PostgreSQL checkpointer, DBOS); it imports nothing from
this project and no Django, so it runs as a plain script:

    python agentops/dev/benchmarks/peers.py --peer langgraph

The first line of its input names a JSON file that holds the database's URL (`database_url`:
not on the command line, where `ps` shows it) and the same work our benchmark does: `arguments`,
each step's tool arguments as the bench agent's scripted model proposes them, and `floor_rows`,
how many rows the floor inserts (the tool results, in turn). Each step is one "model" call that
proposes the call and one tool call that echoes its arguments as its result, the same in-process
no-op work as our `bench_noop` agent, run through the peer's own durable execution:

- `langgraph`: a `StateGraph` with a model node and a tool node, `messages` kept with the
  `add_messages` reducer (the shape of LangGraph's ReAct agent), `PostgresSaver` as the
  checkpointer and `durability="sync"` (each superstep persisted before the next starts).
- `langgraph-delta`: the same graph, with `messages` a `DeltaChannel` (only each step's new
  messages are written; snapshots every 100 updates).
- `dbos`: a DBOS workflow calling two `@DBOS.step`s per step (model, then tool); DBOS records
  each step's output in its system database before the next runs.

A pair, as in ours: the floor (one raw `INSERT` + commit of a tool result per row, on a psycopg
autocommit connection), then one run of all the steps; the driver asks for one pair at a time
(see `main`), between its own. The durability of the three differs from ours: none records a
call's intent before the tool runs.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from importlib import metadata
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import psycopg

FLOOR_TABLE = "agentops_bench_peer_floor"
PEERS = ("langgraph", "langgraph-delta", "dbos")


def floor_seconds(conn: psycopg.Connection, rows: list[str]) -> float:
    sql = f"INSERT INTO {FLOOR_TABLE} (payload) VALUES (%s)"
    began = time.perf_counter()
    for row in rows:
        conn.execute(sql, (row,))  # autocommit: one round trip, one commit
    return time.perf_counter() - began


def tool_result(arguments: dict[str, Any]) -> dict[str, Any]:
    """The bench tool: it returns its payload (our `bench_echo`)."""
    return {"n": arguments["n"], "payload": arguments["payload"]}


def floor_rows(arguments: list[dict[str, Any]], count: int) -> list[str]:
    """The floor's rows, as ours (`checkpoint.floor_rows`): each step's tool result in turn."""
    return [json.dumps(tool_result(arguments[row % len(arguments)])) for row in range(count)]


# -- LangGraph ---------------------------------------------------------------------------------


def langgraph_runner(
    url: str, arguments: list[dict[str, Any]], *, delta: bool
) -> Callable[[], None]:
    from typing import Annotated, TypedDict

    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.channels.delta import DeltaChannel
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages

    def batched(state: list[Any] | None, writes: list[Any]) -> list[Any]:
        return functools.reduce(add_messages, writes, state or [])

    messages_channel: Any = DeltaChannel(batched) if delta else add_messages

    # The functional form: annotations are strings in this module, and the channel is chosen
    # at run time.
    State = TypedDict(  # noqa: UP013
        "State", {"messages": Annotated[list[Any], messages_channel], "step": int}
    )

    steps = len(arguments)

    def model(state: dict[str, Any]) -> dict[str, Any]:
        i = state["step"]
        call = {"name": "bench_echo", "args": arguments[i], "id": f"call_{i}", "type": "tool_call"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    def tool(state: dict[str, Any]) -> dict[str, Any]:
        call = state["messages"][-1].tool_calls[0]
        result = ToolMessage(content=json.dumps(tool_result(call["args"])), tool_call_id=call["id"])
        return {"messages": [result], "step": state["step"] + 1}

    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_node("tool", tool)
    builder.add_edge(START, "model")
    builder.add_edge("model", "tool")
    builder.add_conditional_edges("tool", lambda s: "model" if s["step"] < steps else END)
    conn = psycopg.connect(url, autocommit=True, prepare_threshold=0)
    saver = PostgresSaver(conn)
    saver.setup()
    graph = builder.compile(checkpointer=saver)

    def run() -> None:
        config = {
            "configurable": {"thread_id": str(uuid.uuid4())},
            "recursion_limit": 4 * steps + 10,
        }
        final = graph.invoke({"messages": [], "step": 0}, config, durability="sync")
        assert final["step"] == steps and len(final["messages"]) == 2 * steps

    return run


# -- DBOS ----------------------------------------------------------------------------------------


def sqlalchemy_url(url: str) -> str:
    """`url` as SQLAlchemy (DBOS) reads it. libpq takes a socket directory as a percent-encoded
    host (the embedded server's URL), SQLAlchemy does not: there the directory goes in the query
    (`postgresql://user@/db?host=/dir&port=N`), which it hands to the driver as it is."""
    parts = urlsplit(url)
    host = unquote(parts.hostname or "")
    if not host.startswith("/"):
        return url
    userinfo = parts.netloc.rpartition("@")[0]
    query = [*parse_qsl(parts.query), ("host", host)]
    if parts.port:
        query.append(("port", str(parts.port)))
    return urlunsplit(("postgresql", f"{userinfo}@", parts.path, urlencode(query), ""))


def dbos_runner(url: str, arguments: list[dict[str, Any]]) -> Callable[[], None]:
    """The workflow's runner; DBOS itself is destroyed (its threads stopped) at the end."""
    from dbos import DBOS

    DBOS(
        config={
            "name": "agentops-bench-peer",
            "system_database_url": sqlalchemy_url(url),
            "log_level": "WARNING",
        }
    )

    @DBOS.step()
    def model_step(i: int) -> dict[str, Any]:
        return {"name": "bench_echo", "arguments": arguments[i]}

    @DBOS.step()
    def tool_step(call: dict[str, Any]) -> dict[str, Any]:
        return tool_result(call["arguments"])

    @DBOS.workflow()
    def agent(steps: int) -> int:
        done = 0
        for i in range(steps):
            result = tool_step(model_step(i))
            done += result["n"] == arguments[i]["n"]
        return done

    DBOS.launch()

    def run() -> None:
        assert agent(len(arguments)) == len(arguments)

    return run


# -- the pairs ------------------------------------------------------------------------------------


class Peer:
    """One peer, its floor connection and its runner, measuring a pair on request."""

    def __init__(self, peer: str, work: dict[str, Any]) -> None:
        url = work["database_url"]
        self.arguments = work["arguments"]
        self.rows = floor_rows(self.arguments, work["floor_rows"])
        if peer == "dbos":
            self.run = dbos_runner(url, self.arguments)
            packages: tuple[str, ...] = ("dbos",)
        else:
            self.run = langgraph_runner(url, self.arguments, delta=peer == "langgraph-delta")
            packages = ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-postgres")
        self.version = ", ".join(f"{name} {metadata.version(name)}" for name in packages)
        self.floor = psycopg.connect(url, autocommit=True)
        self.floor.execute(f"DROP TABLE IF EXISTS {FLOOR_TABLE}")
        self.floor.execute(
            f"CREATE TABLE {FLOOR_TABLE} (id bigserial PRIMARY KEY, payload jsonb NOT NULL)"
        )

    def pair(self) -> dict[str, float]:
        """The floor, then one run of every step: per-step milliseconds of each."""
        steps = len(self.arguments)
        floor_ms = floor_seconds(self.floor, self.rows) * 1000 / len(self.rows)
        began, cpu = time.perf_counter(), time.process_time()
        self.run()
        return {
            "floor_ms_per_step": floor_ms,
            "task_ms_per_step": (time.perf_counter() - began) * 1000 / steps,
            "cpu_ms_per_step": (time.process_time() - cpu) * 1000 / steps,
        }


def main() -> None:
    """Line protocol on stdin and on the standard output as it was at start, so that a driver can
    interleave several peers' pairs with its own: the first line in names the work's file; after one
    unmeasured warm-up pair, the first line out is `{"version": ...}`; then each line in asks for
    a pair, answered by one line of JSON. End of input ends the process. Whatever else writes to
    the standard output (a library's print) goes to the standard error instead."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", choices=PEERS, required=True)
    options = parser.parse_args()
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    with open(sys.stdin.readline().rstrip("\n")) as work:
        peer = Peer(options.peer, json.load(work))
    peer.pair()
    print(json.dumps({"version": peer.version}), file=answers, flush=True)
    for _ in sys.stdin:
        print(json.dumps(peer.pair()), file=answers, flush=True)
    if options.peer == "dbos":
        from dbos import DBOS

        DBOS.destroy()


if __name__ == "__main__":
    main()
