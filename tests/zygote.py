"""Warmed parents for the workers and sweepers the tests start: a process that has imported
Django, the apps and the commands once, and forks a new process for each start.

A `manage.py worker` started from scratch spends some 3.5 s of CPU on the interpreter, Django's
setup and the imports before it takes a job; the process tiers start about 150 of them, which
on a two-core machine is minutes of the suite. A process forked from the warmed parent (the
"zygote") begins where that start ends. It is still a real process of its own: its own pid and
session (killed with SIGKILL or SIGSTOP by the tests as before), its own database and Redis
connections (the zygote opens none), its own log file, and the environment the test asked for;
it runs `manage.py <command>` as a started one does (system checks, logging set up, the command).

What a fork shares with its zygote is only what the environment decided when the zygote set up
Django: one zygote per environment (`key`), apart from the variables read at run time only
(RUNTIME_ONLY), which each fork gets as asked, and those whose setting each fork sets again
(PER_FORK_SETTINGS: the URLs of the model server and of the simulated services). Environments
that start threads or per-process files during setup (tracing's exporter, Prometheus'
multiprocess files) are started from scratch (`forkable`). Forks of one zygote share its string
hashing (PYTHONHASHSEED), which differs from the test process's: a version digested differently
in two processes still shows between the test that creates a task and the worker that runs it.

The forked process is the zygote's grandchild: its parent exits at once, and the test process,
a child subreaper (Linux prctl) for that moment only, adopts it, so `wait()` gives its exit status
(-9 for a SIGKILL) as for a child it started itself.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Read with os.environ when used, after setup: a fork takes them from its own request.
RUNTIME_ONLY = frozenset(
    {"AGENTOPS_MODEL_CALL_LOG", "AGENTOPS_CRASH_AT", "AGENTOPS_CRASH_SIGNAL", "PYTEST_CURRENT_TEST"}
)
# Read into the settings at setup, and set again in each fork from the value its request gives:
# the model server or the simulated services a command starts on a free port leave the zygote of
# its other variables (only whether the variable is set chooses the zygote). The variable, and
# where settings keep it.
PER_FORK_SETTINGS = {
    "OPENAI_BASE_URL": ("AGENTOPS", "OPENAI_BASE_URL"),
    "AGENTOPS_SIM_BASE_URL": ("AGENTOPS", "SIM_BASE_URL"),
}
FORKED_COMMANDS = frozenset({"worker", "sweeper"})
# Set for a run that starts every process from scratch (to compare, or to rule the zygote out).
FRESH_ENV = "AGENTOPS_TEST_FRESH_PROCESSES"
PR_SET_CHILD_SUBREAPER = 36
READY_TIMEOUT_SECONDS = 300


def forkable(args: tuple[str, ...], env: Mapping[str, str]) -> bool:
    """Whether `manage.py <args>` in `env` may be forked from a zygote."""
    if not args or args[0] not in FORKED_COMMANDS or os.environ.get(FRESH_ENV):
        return False
    return not any(name.startswith("OTEL_") or name == "PROMETHEUS_MULTIPROC_DIR" for name in env)


def key(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(
        sorted(
            (k, "(set in each fork)" if k in PER_FORK_SETTINGS else v)
            for k, v in env.items()
            if k not in RUNTIME_ONLY
        )
    )


class Forked:
    """A forked process, as much of `subprocess.Popen` as the tests use."""

    def __init__(self, pid: int, args: list[str]) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def _subreaper(on: bool) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


@contextmanager
def _adopting() -> Iterator[None]:
    _subreaper(True)
    try:
        yield
    finally:
        _subreaper(False)


class Zygote:
    """One warmed parent, started with `env`; `start()` forks a process from it."""

    def __init__(self, env: Mapping[str, str], log: Path) -> None:
        self.log = open(log, "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from tests.zygote import serve; serve()"],
            cwd=ROOT,
            env=dict(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            start_new_session=True,
        )
        self._ready = False

    def _reply(self) -> dict[str, object]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(
                f"the zygote ended (exit {self.process.wait()}): see {self.log.name}"
            )
        reply: dict[str, object] = json.loads(line)
        return reply

    def start(self, args: tuple[str, ...], env: Mapping[str, str], log: Path) -> Forked:
        if not self._ready:
            assert self._reply() == {"ready": True}
            self._ready = True
        request = {"args": list(args), "env": dict(env), "log": str(log), "cwd": str(ROOT)}
        assert self.process.stdin is not None
        with _adopting():
            self.process.stdin.write(json.dumps(request).encode() + b"\n")
            self.process.stdin.flush()
            pid = self._reply()["pid"]
        assert isinstance(pid, int)
        child = Forked(pid, [sys.executable, "manage.py", *args])
        child.poll()  # ours: raises ChildProcessError if it was not adopted
        return child

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self.log.close()


# The zygotes of one test process, the most recently used last. A test that starts its processes
# in an environment of its own (a server on a free port) leaves a zygote no other test uses: at
# most KEPT stay (some 100 MB each), the least recently used ending first (its forks live on).
_zygotes: OrderedDict[tuple[tuple[str, str], ...], Zygote] = OrderedDict()
KEPT = 4


def fork(args: tuple[str, ...], env: Mapping[str, str], log: Path) -> Forked:
    """`manage.py <args>` with `env` and its output in `log`, forked from the zygote of `env`."""
    wanted = key(env)
    zygote = _zygotes.get(wanted)
    if zygote is None:
        zygote = Zygote(env, log.with_name(f"zygote-{os.getpid()}-{time.monotonic_ns()}.log"))
        _zygotes[wanted] = zygote
        while len(_zygotes) > KEPT:
            _zygotes.popitem(last=False)[1].stop()
    _zygotes.move_to_end(wanted)
    return zygote.start(args, env, log)


def stop_all() -> None:
    for zygote in _zygotes.values():
        zygote.stop()
    _zygotes.clear()


# -- the zygote's side ----------------------------------------------------------------------------


def serve() -> None:
    """Set Django up once, then fork a process for each request read from stdin (one JSON line)
    and answer its pid on stdout. Ends when stdin closes."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
    import django
    from django.core import checks
    from django.core.management import load_command_class

    django.setup()
    for command in FORKED_COMMANDS:
        load_command_class("agentops", command)
    # The system checks, once (they import the URLconf): each fork still runs them, as a started
    # command does, over what they cache walked already (about 25 ms of a fork's CPU, not 60).
    checks.run_checks()
    # Frozen as a worker freezes its start-up, here before forking (as Python's gc docs advise):
    # a fork's own collections (the worker's `heap_startup_frozen` among them) then walk only
    # what it made, and leave the pages it shares with this parent uncopied.
    from agentops.engine.heap import heap_startup_frozen

    heap_startup_frozen()
    global _answer_fd
    _answer_fd = os.dup(1)
    os.dup2(2, 1)  # whatever else is printed goes to the zygote's log, not into the answers
    answer = os.fdopen(_answer_fd, "wb", buffering=0)
    answer.write(b'{"ready": true}\n')
    for line in sys.stdin.buffer:
        request = json.loads(line)
        answer.write(json.dumps({"pid": _fork(request)}).encode() + b"\n")


_answer_fd = -1


def _fork(request: dict[str, object]) -> int:
    """Fork twice (the middle process exits at once) and return the grandchild's pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    read, write = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.close(read)
        pid = os.fork()
        if pid == 0:
            os.close(write)
            _run(request)  # never returns
        os.write(write, str(pid).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        pid = int(pipe.read())
    os.waitpid(middle, 0)  # gone: the grandchild is now the test process's child
    return pid


def _per_fork_settings(env: Mapping[str, str]) -> None:
    """What the settings module read from PER_FORK_SETTINGS' variables, as this fork's request
    has them (its zygote was set up with the same variables set, possibly other values)."""
    from django.conf import settings

    for name, (setting, item) in PER_FORK_SETTINGS.items():
        if name in env:
            getattr(settings, setting)[item] = env[name]


def _run(request: dict[str, object]) -> None:
    code = 1
    try:
        os.setsid()
        os.close(_answer_fd)
        log = os.open(str(request["log"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        env = request["env"]
        assert isinstance(env, dict)
        os.environ.clear()
        os.environ.update(env)
        _per_fork_settings(env)
        os.chdir(str(request["cwd"]))
        args = request["args"]
        assert isinstance(args, list)
        sys.argv = [str(ROOT / "manage.py"), *args]
        from django.core.management import execute_from_command_line

        try:
            execute_from_command_line(sys.argv)
            code = 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
