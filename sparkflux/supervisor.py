"""Driver supervision: ``sparkflux supervise -- CMD ARGS...`` and ``sparkflux run --restart N``.

The driver holds a run's controller, ingress and egress, so when it dies every site dies with
it (fail-stop). Spark starts a dead driver again only in cluster deploy mode, which a
standalone master refuses for Python applications; so sparkflux brings its own supervisor. It
runs the driver's command as a child process in a process group of its own and, when the
child dies, clears what is left of that group and starts the command again after a back-off,
a bounded number of times. With ``--checkpoint`` the command resumes from its newest
checkpoint (docs/supervision.md).

Two parts: ``Supervision`` decides what follows a child's end (restart after how long, or
end with which code) from its exit status, how long it ran and the restarts so far, with no
process in sight, so it is tested alone; ``supervise`` does the processes and the signals.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from rich.console import Console
from rich.markup import escape

from sparkflux.model.errors import PlanError

console = Console(stderr=True)

# Exit statuses that end the supervision, and why: a restart would end the same way, or the
# command was interrupted (130: exit code 130, or killed by SIGINT).
NOT_RESTARTED = {
    2: "a bad option, a plan error or a run that failed with its cause (a restart would fail "
       "the same way)",
    3: "more of the input went to the dead letters than --max-dead-letters allows (a restart "
       "would read the same input)",
    130: "the command was interrupted",
}
GROUP_GONE_S = 5.0  # how long the dead child's group may take to go after its SIGKILL
PROC = Path("/proc")


def exit_status(returncode: int) -> int:
    """A child's exit status as a shell gives it: its exit code, or 128 + the signal that
    killed it (``Popen.returncode`` is minus the signal)."""
    return 128 - returncode if returncode < 0 else returncode


def describe(returncode: int) -> str:
    """How a child ended: ``killed by SIGKILL`` or ``exit code 1``."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exit code {returncode}"


@dataclass(frozen=True)
class Policy:
    """How often and how soon a dead command is started again: at most ``restarts`` times in
    the whole supervision; the first delay ``backoff`` seconds, doubled with each
    consecutive restart up to ``max_backoff``, and back to ``backoff`` once a child has run
    longer than ``stable_after`` seconds (it was working, not failing at its start)."""

    restarts: int = 3
    backoff: float = 1.0
    max_backoff: float = 30.0
    stable_after: float = 60.0

    def __post_init__(self) -> None:
        if isinstance(self.restarts, bool) or not isinstance(self.restarts, int) or (
                self.restarts < 0):
            raise PlanError(f"--restarts {self.restarts!r}: give a number of restarts, 0 or "
                            f"more")
        if not self.backoff > 0:
            raise PlanError(f"--backoff {self.backoff}: give a positive number of seconds")
        if not self.max_backoff >= self.backoff:
            raise PlanError(f"--max-backoff {self.max_backoff}: give at least --backoff "
                            f"({self.backoff:g} s)")
        if not self.stable_after >= 0:
            raise PlanError(f"--stable-after {self.stable_after}: give seconds, 0 or more")


@dataclass(frozen=True)
class Decision:
    """What follows a child's end: start it again after ``delay`` seconds, or end the
    supervision with ``exit_code``; ``line`` says which and why (empty: nothing to say)."""

    restart: bool
    delay: float
    exit_code: int
    line: str


class Supervision:
    """The decisions of one supervision, a child's end at a time (no processes here).

    Rules: exit code 0 ends it with 0; a child stopped by the supervisor's own signal (the
    user's Ctrl-C or SIGTERM, forwarded) is never restarted; the statuses of
    ``NOT_RESTARTED`` (a death by SIGINT is 130) end it with that status; any other death (a
    signal, a non-zero code) is restarted while fewer than ``policy.restarts`` restarts
    were made, else the supervision gives up with the child's status."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.restarts = 0  # made so far, in the whole supervision
        self.streak = 0  # consecutive restarts since a child last ran stably: the back-off's

    def after(self, returncode: int, ran_s: float, stopped_by: int | None = None) -> Decision:
        """The decision when a child ends with ``returncode`` (``Popen``'s: minus the
        signal) after ``ran_s`` seconds; ``stopped_by``: the signal the supervisor forwarded
        to it, if any."""
        status = exit_status(returncode)
        how = f"{describe(returncode)} after {ran_s:.1f} s"
        if returncode == 0:
            return Decision(False, 0.0, 0, "")
        if stopped_by is not None:
            name = signal.Signals(stopped_by).name
            return Decision(False, 0.0, status, f"stopped by {name} ({how}); not restarted")
        if status in NOT_RESTARTED:
            return Decision(False, 0.0, status, f"{how}: {NOT_RESTARTED[status]}; not "
                                                f"restarted")
        if self.restarts >= self.policy.restarts:
            return Decision(False, 0.0, status, f"{how}; gave up after {self.restarts} "
                                                f"restarts (exit code {status})")
        if ran_s > self.policy.stable_after:
            self.streak = 0
        delay = min(self.policy.max_backoff, self.policy.backoff * 2 ** self.streak)
        self.restarts += 1
        self.streak += 1
        return Decision(True, delay, status, f"{how}; restart {self.restarts} of "
                                             f"{self.policy.restarts} in {delay:g} s")


def say_on_stderr(line: str) -> None:
    """One line on stderr, never wrapped (a log reader greps it whole)."""
    console.print(f"[bold yellow]sparkflux supervise:[/] {escape(line)}", soft_wrap=True)


def supervise(argv: Sequence[str], policy: Policy = Policy(),
              say: Callable[[str], None] = say_on_stderr) -> int:
    """Run ``argv`` as a child in a process group of its own, start it again when it dies as
    ``policy`` says, and return the supervision's exit code (the child's last, or 0). The
    first SIGINT or SIGTERM the supervisor gets (in the main thread) is forwarded and ends
    the supervision once the child ends; each is forwarded as it comes."""
    return _Supervisor(list(argv), policy, say).run()


class _Supervisor:
    """The processes and signals of ``supervise``: one child at a time."""

    def __init__(self, argv: list[str], policy: Policy, say: Callable[[str], None]) -> None:
        self.argv = argv
        self.decisions = Supervision(policy)
        self.say = say
        self.child: subprocess.Popen[bytes] | None = None
        self.stop: int | None = None  # the signal that asked the supervision to end
        self.pending: list[int] = []  # signals that came while no child was running
        # The signal handler writes a byte here: what wakes a back-off wait early.
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)

    def run(self) -> int:
        before = {}
        if threading.current_thread() is threading.main_thread():
            before = {s: signal.signal(s, self.on_signal)
                      for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            return self.loop()
        finally:
            for s, handler in before.items():
                signal.signal(s, handler)
            os.close(self.wake_r)
            os.close(self.wake_w)

    def loop(self) -> int:
        while True:
            started = time.monotonic()
            try:
                # the user's own command, run as given (no shell): what supervise is for
                child = subprocess.Popen(self.argv, process_group=0)  # noqa: S603
            except OSError as e:
                self.say(f"cannot run {self.argv[0]}: {e}")
                return 126 if isinstance(e, PermissionError) else 127
            self.child = child
            while self.pending:  # came while the child was being started
                self.forward(child, self.pending.pop(0))
            returncode = self.wait(child)
            decision = self.decisions.after(returncode, time.monotonic() - started, self.stop)
            if decision.line:
                self.say(decision.line)
            if not decision.restart:
                return decision.exit_code
            if self.backoff(decision.delay):
                assert self.stop is not None
                self.say(f"{signal.Signals(self.stop).name} during the back-off: not "
                         f"restarted (exit code {decision.exit_code})")
                return decision.exit_code

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.stop = signum
        try:
            os.write(self.wake_w, b"\0")
        except BlockingIOError:
            pass  # the pipe is full: a wake-up is already there
        child = self.child
        if child is None:
            self.pending.append(signum)
        else:
            self.forward(child, signum)

    @staticmethod
    def forward(child: subprocess.Popen[bytes], signum: int) -> None:
        """SIGINT goes to the child's whole group, as a terminal's Ctrl-C goes to its
        foreground group (PySpark's JVM ignores it; the driver ends its input). SIGTERM goes
        to the child alone, as a process manager's does: a JVM under the driver would end at
        once on it and the driver could not finish what was admitted. What is left of the
        group once the child has ended is killed either way (``wait``)."""
        try:
            if signum == signal.SIGINT:
                os.killpg(child.pid, signum)
            else:
                child.send_signal(signum)
        except ProcessLookupError:
            pass  # the group has ended: its child's end is reaped by ``wait``

    def wait(self, child: subprocess.Popen[bytes]) -> int:
        """Wait for the child to end, clear its group, and reap it. The child is left
        unreaped (WNOWAIT) while its group is killed, so its pid, the group's id, cannot be
        reused by another process meanwhile."""
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        left = clear_group(child.pid)
        if left:
            self.say(f"{len(left)} process(es) of the ended command's group outlived SIGKILL "
                     f"for {GROUP_GONE_S:g} s (pids {', '.join(map(str, left))})")
        self.child = None  # from here a signal is the supervision's alone, not forwarded
        return child.wait()

    def backoff(self, delay: float) -> bool:
        """Wait ``delay`` seconds, or less if a signal asks the supervision to end (True)."""
        deadline = time.monotonic() + delay
        while self.stop is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            select.select([self.wake_r], [], [], left)
            try:
                os.read(self.wake_r, 64)
            except BlockingIOError:
                pass  # woken by the timeout
        return True


def clear_group(pgid: int, timeout: float = GROUP_GONE_S) -> list[int]:
    """SIGKILL every process of group ``pgid`` and wait, at most ``timeout`` seconds, until
    none is left alive; return the pids still alive (empty: the group is gone)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return []
    deadline = time.monotonic() + timeout
    # No process can be waited on here but our own child: poll /proc, bounded by timeout.
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return left


def group_members(pgid: int) -> list[int]:
    """The live processes of group ``pgid`` (zombies aside: they hold nothing and go when
    their parent reaps them), read from /proc (none where there is no /proc)."""
    out = []
    for entry in PROC.glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses
        state, _ppid, pgrp = stat.rsplit(")", 1)[1].split()[:3]
        if int(pgrp) == pgid and state not in ("Z", "X"):
            out.append(int(entry.name))
    return sorted(out)
