"""`manage.py bench <benchmark>`: parse the arguments, run one benchmark, print its figures.

The benchmarks live in `agentops.dev.benchmarks` (one module each); docs/benchmarks.md says what
each measures and how.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentops.dev.benchmarks.checkpoint import FAILING, KINDS, checkpoint
from agentops.dev.benchmarks.checkpoint_report import checkpoint_table
from agentops.dev.benchmarks.memory import memory, memory_table
from agentops.dev.benchmarks.pages import pages, pages_table
from agentops.dev.benchmarks.redaction import redaction_bench, redaction_table
from agentops.dev.benchmarks.throughput import (
    ROUTES,
    routes_compared,
    routes_made,
    throughput,
    throughputs,
)
from agentops.dev.hosts import hosts_unavailable

PEERS_PYTHON = Path(settings.BASE_DIR) / ".venv-peers" / "bin" / "python"

HELP = """\
checkpoint: run the no-op agent (one model + one tool call per step) through the real runner,
in-process, one task_advance per task; and a floor of one INSERT + commit per step on a raw
connection to the same database. Prints per_step_ms (task_advance wall time / steps, creation
excluded), floor_per_step_ms, ratio_to_floor (median of paired ratios), bytes_per_step_first and
bytes_per_step_last (PostgreSQL WAL of the first and last snapshot interval / its steps, via
pg_walinspect, filtered to this database, full-page images reported apart), commits_per_step
(WAL commit records / steps). Figures are medians over --repeat tasks. With
--dispatch, also dispatch_ms_per_job: what one RQ job costs through a real `manage.py worker
--burst` process beyond advancing the same 1-step task in-process. With --peers, also the same
steps through LangGraph's PostgresSaver (and with a DeltaChannel) and DBOS, each measured against
its own floor in a scratch database <name>_peer_<peer>: their ratio_to_floor, and
ratio_to_best_peer.
throughput: steps per second through --workers real burst workers running --tasks tasks.
With --through direct,pooled,hosts, the same run on each route in turn (--repeat rounds,
alternating) and each route's ratio to the first: pooled goes through the connection pooler at
--pooler-url (transaction pooling), hosts spreads the workers over two hosts of their own
(network namespaces; needs root). With --model-seconds S the model takes S seconds per call and
each worker advances --tasks-per-worker tasks at once: also prints the tasks in flight, the
steps/s that many S-second calls allow and the share reached, and the workers' proportional set
size per task in flight.
pages: seed --tasks tasks (default 10000) with a realistic mix into a scratch database
(<name>_pages, dropped after), then time the inbox, the audit queue, a task page, a gate panel
and the task list through the test client, DEBUG off: p50, p95, queries and bytes per page over
--repeat requests (default 20).
memory: --steps steps in all (default 5000; tasks of 20 steps, or split into --tasks tasks) run
by one real `manage.py worker`; prints rss_first_mb (after a tenth of the tasks), rss_last_mb
(all done), rss_growth_ratio and growth_kb_per_step.
redaction: the median process CPU time of `redacted` over --repeat calls (default 15) on values
of --payload-kb KB (default 500 here) that hold no secret: repeated short text, English prose,
JSON text and the same records as a JSON value, key=value log lines, accented Latin, Chinese.
With --against REV, that revision's redactor is timed in the same loop, alternating call by call.
"""


class Command(BaseCommand):
    help = HELP

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "benchmark", choices=["checkpoint", "throughput", "pages", "memory", "redaction"]
        )
        parser.add_argument(
            "--workers",
            default="1",
            help="throughput: worker processes (default 1), or several counts, comma separated "
            "(1,2,4: each run in turn, --repeat rounds, with the speed-up over the first)",
        )
        parser.add_argument(
            "--through",
            default="direct",
            help="throughput: the routes to the database, comma separated: direct, pooled "
            "(through --pooler-url), hosts (two hosts of their own; needs root)",
        )
        parser.add_argument(
            "--tasks-per-worker",
            type=int,
            default=1,
            help="throughput: tasks each worker advances at once (`worker --tasks`; default 1)",
        )
        parser.add_argument(
            "--model-seconds",
            type=float,
            default=0.0,
            help="throughput: seconds each model call takes (default 0: answers at once)",
        )
        parser.add_argument(
            "--pooler-url",
            default=None,
            help="throughput --through pooled: the pooler's database URL (PgBouncer in "
            "transaction pooling, in front of this database)",
        )
        parser.add_argument(
            "--tasks",
            type=int,
            default=None,
            help="throughput: tasks to run (default 40); pages: tasks to seed (default 10000); "
            "memory: tasks the steps are split into (default: 20 steps each)",
        )
        parser.add_argument(
            "--steps",
            type=int,
            default=None,
            help="steps per task (default 20); memory: steps in all (default 5000)",
        )
        parser.add_argument(
            "--payload-kb",
            type=int,
            default=None,
            help="size of each step's tool arguments and result (default 2); redaction: size of "
            "each value (default 500)",
        )
        parser.add_argument(
            "--repeat",
            type=int,
            default=None,
            help="checkpoint: tasks (and floor runs) to measure, medians are reported "
            "(default 3); pages: requests per page (default 20)",
        )
        parser.add_argument(
            "--kind",
            default="read",
            help="checkpoint: what each step does, one or more of read, effect, reply, comma "
            "separated (default read): a read-only tool call, one with a side effect, a text "
            "reply. Each pair runs the floor, then one task of each kind",
        )
        parser.add_argument(
            "--fail-every",
            type=int,
            default=0,
            metavar="N",
            help="checkpoint: also run each kind with its tool call failing once every N steps "
            "(retried at once by the same worker), as kind '<kind>/failN' in the same pairs",
        )
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="print one JSON object"
        )
        parser.add_argument(
            "--against",
            default=None,
            metavar="REV",
            help="redaction: also time the redactor of this git revision, alternating",
        )
        parser.add_argument(
            "--keep",
            action="store_true",
            help="pages: keep the scratch database <name>_pages (dropped by the next run)",
        )
        parser.add_argument(
            "--dispatch",
            type=int,
            default=0,
            metavar="JOBS",
            help="also time JOBS 1-step tasks through a real burst worker (needs an empty "
            "queue with no other worker)",
        )
        parser.add_argument(
            "--peers",
            nargs="?",
            const=str(PEERS_PYTHON),
            default=None,
            metavar="PYTHON",
            help="checkpoint: also run the same steps through LangGraph (PostgresSaver, and with "
            "a DeltaChannel) and DBOS, with the Python of a virtualenv that has them "
            f"(default {PEERS_PYTHON.relative_to(settings.BASE_DIR)}: `make peers-venv`)",
        )

    def handle(
        self,
        *args: Any,
        benchmark: str,
        steps: int | None,
        payload_kb: int | None,
        repeat: int | None,
        as_json: bool,
        dispatch: int,
        peers: str | None,
        workers: str,
        through: str,
        pooler_url: str | None,
        tasks: int | None,
        tasks_per_worker: int,
        model_seconds: float,
        keep: bool,
        kind: str,
        fail_every: int,
        against: str | None,
        **options: Any,
    ) -> None:
        if peers is not None and benchmark != "checkpoint":
            raise CommandError("--peers goes with the checkpoint benchmark only")
        if benchmark == "pages":
            tasks = 10_000 if tasks is None else tasks
            repeat = 20 if repeat is None else repeat
            if tasks < 1 or repeat < 1:
                raise CommandError("--tasks and --repeat must be positive")
            report = pages(tasks=tasks, repeat=repeat, keep=keep)
            self.stdout.write(json.dumps(report, indent=2) if as_json else pages_table(report))
            return
        if benchmark == "redaction":
            repeat = 15 if repeat is None else repeat
            size_kb = 500 if payload_kb is None else payload_kb
            if repeat < 1 or size_kb < 1:
                raise CommandError("--repeat and --payload-kb must be positive")
            report = redaction_bench(size_kb=size_kb, repeat=repeat, against=against)
            self.stdout.write(json.dumps(report, indent=2) if as_json else redaction_table(report))
            return
        payload_kb = 2 if payload_kb is None else payload_kb
        if benchmark == "memory":
            steps = 5000 if steps is None else steps
            if steps < 1 or payload_kb < 0 or (tasks is not None and tasks < 1):
                raise CommandError(
                    "--steps and --tasks must be positive, --payload-kb not negative"
                )
            report = memory(steps=steps, payload_kb=payload_kb, tasks=tasks)
            self.stdout.write(json.dumps(report, indent=2) if as_json else memory_table(report))
            return
        steps = 20 if steps is None else steps
        if benchmark == "throughput":
            report = _throughput_report(
                workers=workers,
                through=through,
                pooler_url=pooler_url,
                tasks=40 if tasks is None else tasks,
                steps=steps,
                payload_kb=payload_kb,
                rounds=1 if repeat is None else repeat,
                tasks_per_worker=tasks_per_worker,
                model_seconds=model_seconds,
            )
            self.stdout.write(json.dumps(report, indent=None if as_json else 2))
            return
        repeat = 3 if repeat is None else repeat
        if steps < 1 or repeat < 1 or payload_kb < 0 or dispatch < 0:
            raise CommandError(
                "--steps and --repeat must be positive, --payload-kb and --dispatch not negative"
            )
        kinds = tuple(dict.fromkeys(k.strip() for k in kind.split(",") if k.strip()))
        if not kinds or any(k not in KINDS for k in kinds):
            raise CommandError(f"--kind takes one or more of {', '.join(KINDS)}")
        if fail_every < 0 or (fail_every and "reply" in kinds):
            raise CommandError("--fail-every takes a positive N, with tool-calling kinds")
        if fail_every:
            kinds = tuple(k for base in kinds for k in (base, f"{base}{FAILING}{fail_every}"))
        report = checkpoint(
            kinds=kinds,
            steps=steps,
            payload_kb=payload_kb,
            repeat=repeat,
            dispatch=dispatch,
            peers=None if peers is None else Path(peers),
        )
        if as_json:
            self.stdout.write(json.dumps(report, indent=2))
        else:
            self.stdout.write(checkpoint_table(report))


def _throughput_report(
    *,
    workers: str,
    through: str,
    pooler_url: str | None,
    tasks: int,
    steps: int,
    payload_kb: int,
    rounds: int,
    tasks_per_worker: int,
    model_seconds: float,
) -> dict[str, Any]:
    try:
        counts = [int(count) for count in workers.split(",")]
    except ValueError:
        raise CommandError("--workers takes a count, or counts separated by commas") from None
    if min(counts) < 1 or tasks < 1 or steps < 1 or tasks_per_worker < 1:
        raise CommandError("--workers, --tasks, --steps and --tasks-per-worker must be positive")
    if model_seconds < 0:
        raise CommandError("--model-seconds must not be negative")
    run: dict[str, Any] = {
        "tasks": tasks,
        "steps": steps,
        "payload_kb": payload_kb,
        "tasks_per_worker": tasks_per_worker,
        "model_seconds": model_seconds,
    }
    names = [name.strip() for name in through.split(",") if name.strip()]
    if not names or any(name not in ROUTES for name in names):
        raise CommandError(f"--through takes one or more of {', '.join(ROUTES)}")
    if "pooled" in names and not pooler_url:
        raise CommandError("--through pooled needs --pooler-url (the pooler's database URL)")
    if "hosts" in names and (why := hosts_unavailable()):
        raise CommandError(why)
    if names != ["direct"]:
        if len(counts) > 1:
            raise CommandError("--through compares routes at one --workers count")
        with routes_made(names, pooler_url) as routes:
            return routes_compared(routes=routes, rounds=rounds, workers=counts[0], **run)
    if len(counts) == 1:
        return throughput(workers=counts[0], **run)
    return throughputs(workers=counts, rounds=rounds, **run)
