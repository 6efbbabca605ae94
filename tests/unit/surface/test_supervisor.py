"""Driver supervision (``sparkflux/supervisor.py``, docs/supervision.md): the decisions alone
(which exits are restarted, the back-off, its reset after a stable run, the limit), then real
processes (small ``python -c`` children, no Spark): restarts after SIGKILL, no restart after
exit code 2, giving up with the child's code, a forwarded SIGTERM or SIGINT that ends the
supervision, the dead child's group cleared before a restart; and the command's options
(``sparkflux supervise``, ``sparkflux run --restart N``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import sparkflux
from sparkflux import cli, query, supervisor
from sparkflux.model.errors import PlanError
from sparkflux.options import run_config
from sparkflux.runtime.run_config import RunConfig
from sparkflux.runtime.run_options import RunOptions
from sparkflux.spark import launcher
from sparkflux.supervisor import Policy, Supervision, describe, exit_status, supervise
from tests.conftest import ROOT

FAST = Policy(restarts=3, backoff=0.05, max_backoff=1.0)
KILL_SELF = "os.kill(os.getpid(), signal.SIGKILL)"

# --- the decisions, without processes


def test_exit_statuses_are_named_as_a_shell_gives_them() -> None:
    assert (exit_status(0), exit_status(1), exit_status(-9), exit_status(-15)) == (0, 1, 137, 143)
    assert describe(-9) == "killed by SIGKILL" and describe(1) == "exit code 1"
    assert describe(-2) == "killed by SIGINT"


def test_a_clean_exit_ends_the_supervision_quietly() -> None:
    d = Supervision(Policy()).after(0, 5.0)
    assert (d.restart, d.exit_code, d.line) == (False, 0, "")


@pytest.mark.parametrize("returncode,cause", [
    (-9, "killed by SIGKILL"), (1, "exit code 1"), (-15, "killed by SIGTERM"),
    (-11, "killed by SIGSEGV"), (137, "exit code 137"), (4, "exit code 4"),
])
def test_a_death_is_restarted_with_one_line_naming_it(returncode: int, cause: str) -> None:
    d = Supervision(Policy()).after(returncode, 2.5)
    assert d.restart and d.delay == 1.0 and d.exit_code == exit_status(returncode)
    assert d.line == f"{cause} after 2.5 s; restart 1 of 3 in 1 s"


@pytest.mark.parametrize("returncode,status,why", [
    (2, 2, "a bad option, a plan error or a run that failed with its cause"),
    (3, 3, "more of the input went to the dead letters than --max-dead-letters allows"),
    (130, 130, "the command was interrupted"),
    (-2, 130, "the command was interrupted"),
])
def test_the_do_not_retry_codes_end_the_supervision_with_their_code(returncode: int,
                                                                     status: int,
                                                                     why: str) -> None:
    s = Supervision(Policy())
    d = s.after(returncode, 1.0)
    assert not d.restart and d.exit_code == status and s.restarts == 0
    assert why in d.line and d.line.endswith("not restarted")


@pytest.mark.parametrize("returncode,status", [(0, 0), (-15, 143), (1, 1), (2, 2)])
def test_a_child_stopped_by_the_supervisors_signal_is_not_restarted(returncode: int,
                                                                    status: int) -> None:
    d = Supervision(Policy()).after(returncode, 1.0, stopped_by=signal.SIGTERM)
    assert not d.restart and d.exit_code == status
    assert d.line == ("" if returncode == 0 else
                      f"stopped by SIGTERM ({describe(returncode)} after 1.0 s); not restarted")


def test_the_back_off_doubles_up_to_its_cap() -> None:
    s = Supervision(Policy(restarts=9, backoff=1.0, max_backoff=30.0))
    delays = [s.after(-9, 0.5).delay for _ in range(9)]
    assert delays == [1, 2, 4, 8, 16, 30, 30, 30, 30]
    assert [s.restarts, s.after(-9, 0.5).restart] == [9, False]


def test_the_back_off_starts_over_after_a_stable_run() -> None:
    s = Supervision(Policy(restarts=10, backoff=0.5, max_backoff=30.0, stable_after=60.0))
    assert [s.after(1, 1.0).delay for _ in range(3)] == [0.5, 1.0, 2.0]
    assert s.after(1, 61.0).delay == 0.5  # it ran longer than stable_after: working
    assert s.after(1, 1.0).delay == 1.0
    assert s.after(1, 60.0).delay == 2.0  # not longer than stable_after


def test_the_limit_counts_the_whole_supervision_and_gives_up_with_the_childs_code() -> None:
    s = Supervision(Policy(restarts=2, stable_after=10.0))
    assert s.after(-9, 100.0).restart and s.after(-9, 100.0).restart  # stable runs, even so
    d = s.after(-9, 100.0)
    assert not d.restart and d.exit_code == 137
    assert d.line == "killed by SIGKILL after 100.0 s; gave up after 2 restarts (exit code 137)"
    d = Supervision(Policy(restarts=0)).after(1, 1.0)
    assert not d.restart and d.exit_code == 1 and "gave up after 0 restarts" in d.line


@pytest.mark.parametrize("kw,message", [
    ({"restarts": -1}, r"--restarts -1: give a number of restarts, 0 or more"),
    ({"restarts": 1.5}, r"--restarts 1\.5: give a number"),
    ({"backoff": 0}, r"--backoff 0: give a positive number of seconds"),
    ({"backoff": 2.0, "max_backoff": 1.0}, r"--max-backoff 1\.0: give at least --backoff"),
    ({"stable_after": -1}, r"--stable-after -1: give seconds, 0 or more"),
])
def test_a_bad_policy_says_what_to_change(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(PlanError, match=message):
        Policy(**kw)


# --- real processes (python -c children; each run counted in a file)


def child(tmp_path: Path, body: str) -> list[str]:
    """A child that counts its runs in ``tmp_path/runs`` (``run`` is this one's number), then
    runs ``body``."""
    runs = tmp_path / "runs"
    code = (f"import os, signal, subprocess, sys, time\n"
            f"p = {str(runs)!r}\n"
            f"run = (int(open(p).read()) if os.path.exists(p) else 0) + 1\n"
            f"open(p, 'w').write(str(run))\n" + body)
    return [sys.executable, "-c", code]


def runs(tmp_path: Path) -> int:
    return int((tmp_path / "runs").read_text())


def alive(pid: int) -> bool:
    """The process exists and is no zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_a_child_killed_twice_is_restarted_twice_then_its_success_ends_it(tmp_path: Path
                                                                          ) -> None:
    lines: list[str] = []
    argv = child(tmp_path, f"if run <= 2:\n    {KILL_SELF}\n")
    assert supervise(argv, FAST, say=lines.append) == 0
    assert runs(tmp_path) == 3
    assert len(lines) == 2
    assert lines[0].startswith("killed by SIGKILL after ")
    assert lines[0].endswith("; restart 1 of 3 in 0.05 s")
    assert lines[1].endswith("; restart 2 of 3 in 0.1 s")


def test_a_child_that_exits_2_is_not_restarted(tmp_path: Path) -> None:
    lines: list[str] = []
    assert supervise(child(tmp_path, "sys.exit(2)\n"), FAST, say=lines.append) == 2
    assert runs(tmp_path) == 1
    assert len(lines) == 1 and lines[0].startswith("exit code 2 after ")
    assert lines[0].endswith("a run that failed with its cause (a restart would fail the same "
                             "way); not restarted")


def test_a_child_that_always_fails_is_given_up_after_the_limit_with_its_code(tmp_path: Path
                                                                            ) -> None:
    lines: list[str] = []
    policy = Policy(restarts=2, backoff=0.05, max_backoff=1.0)
    assert supervise(child(tmp_path, "sys.exit(5)\n"), policy, say=lines.append) == 5
    assert runs(tmp_path) == 3
    assert [line.split("; ", 1)[1] for line in lines] == [
        "restart 1 of 2 in 0.05 s", "restart 2 of 2 in 0.1 s",
        "gave up after 2 restarts (exit code 5)"]
    assert supervise(child(tmp_path, f"{KILL_SELF}\n"), Policy(restarts=0), say=lines.append
                     ) == 137


def test_a_command_that_cannot_run_says_so(tmp_path: Path) -> None:
    lines: list[str] = []
    assert supervise([str(tmp_path / "nothing")], FAST, say=lines.append) == 127
    assert lines[0].startswith(f"cannot run {tmp_path / 'nothing'}: ")


def test_the_dead_childs_group_is_gone_before_the_restart(tmp_path: Path) -> None:
    """The first run leaves a grandchild in its group (as a driver leaves its JVM) and
    SIGKILLs itself; the second finds the grandchild gone."""
    grandchild = tmp_path / "grandchild"
    seen = tmp_path / "seen"
    body = (f"if run == 1:\n"
            f"    g = subprocess.Popen(['sleep', '60'])\n"
            f"    open({str(grandchild)!r}, 'w').write(str(g.pid))\n"
            f"    {KILL_SELF}\n"
            f"pid = int(open({str(grandchild)!r}).read())\n"
            f"try:\n"
            f"    state = open(f'/proc/{{pid}}/stat').read().rsplit(')', 1)[1].split()[0]\n"
            f"except OSError:\n"
            f"    state = 'gone'\n"
            f"open({str(seen)!r}, 'w').write(state)\n")
    lines: list[str] = []
    assert supervise(child(tmp_path, body), FAST, say=lines.append) == 0
    assert runs(tmp_path) == 2 and len(lines) == 1
    assert seen.read_text() in ("gone", "Z")  # a zombie holds nothing, until init reaps it
    assert not alive(int(grandchild.read_text()))


def test_a_grandchild_left_after_a_clean_exit_is_cleared_too(tmp_path: Path) -> None:
    grandchild = tmp_path / "grandchild"
    body = (f"g = subprocess.Popen(['sleep', '60'])\n"
            f"open({str(grandchild)!r}, 'w').write(str(g.pid))\n")
    assert supervise(child(tmp_path, body), FAST, say=lambda line: None) == 0
    assert not alive(int(grandchild.read_text()))


def supervisor_process(tmp_path: Path, body: str, setup: str = ""
                       ) -> tuple[subprocess.Popen[str], int]:
    """``sparkflux supervise`` in a process of its own, its child started, through ``setup``
    and ready for ``body``: (the supervisor, the child's pid)."""
    ready = tmp_path / "ready"
    argv = child(tmp_path, setup + f"open({str(ready)!r}, 'w').write(str(os.getpid()))\n" + body)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    sup = subprocess.Popen([sys.executable, "-m", "sparkflux.cli", "supervise", "--backoff",
                            "0.05", "--", *argv], stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 30
    while not (ready.exists() and ready.read_text()):  # polled: another process writes it
        assert time.monotonic() < deadline and sup.poll() is None, "the child never got ready"
        time.sleep(0.02)
    return sup, int(ready.read_text())


@pytest.mark.parametrize("handles", [False, True])
def test_sigterm_to_the_supervisor_ends_the_child_and_the_supervisor_without_restart(
        tmp_path: Path, handles: bool) -> None:
    """SIGTERM goes to the child (here ended by it, or handling it and exiting 0, as
    ``sparkflux run`` finishes what was admitted), and nothing is restarted."""
    body = ("signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n" if handles else "") + \
        "time.sleep(60)\n"
    sup, pid = supervisor_process(tmp_path, body)
    sup.send_signal(signal.SIGTERM)
    _, err = sup.communicate(timeout=30)
    assert sup.returncode == (0 if handles else 143), err
    assert runs(tmp_path) == 1 and not alive(pid)
    assert "; restart" not in err
    if not handles:
        assert "stopped by SIGTERM (killed by SIGTERM after " in err and "not restarted" in err


def test_sigint_to_the_supervisor_goes_to_the_childs_whole_group(tmp_path: Path) -> None:
    """As a terminal's Ctrl-C: the child and its grandchild get it, and it is not restarted."""
    setup = "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    body = ("try:\n"
            "    time.sleep(60)\n"
            "except KeyboardInterrupt:\n"
            "    sys.exit(0 if g.wait(timeout=10) != 0 else 1)\n")
    sup, _ = supervisor_process(tmp_path, body, setup)
    sup.send_signal(signal.SIGINT)
    _, err = sup.communicate(timeout=30)
    assert sup.returncode == 0, err  # the child saw its grandchild end by the same SIGINT
    assert runs(tmp_path) == 1 and "; restart" not in err


# --- the command


def test_the_supervise_command_runs_what_follows_the_double_dash(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[
                                                                     str]) -> None:
    argv = child(tmp_path, f"if run == 1:\n    {KILL_SELF}\n")
    assert cli.main(["supervise", "--restarts", "1", "--backoff", "0.05", "--", *argv]) == 0
    err = capsys.readouterr().err
    assert runs(tmp_path) == 2
    assert len(err.strip().splitlines()) == 1  # one line, never wrapped
    assert "sparkflux supervise: killed by SIGKILL after " in err
    assert "; restart 1 of 1 in 0.05 s" in err


def test_the_supervise_command_needs_a_command_and_a_good_policy(
        capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["supervise", "python", "app.py"], ["supervise", "--restarts", "2", "--"]):
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == 2
        assert "give the command after --" in capsys.readouterr().err
    assert cli.main(["supervise", "--backoff", "0", "--", "true"]) == 2
    assert "--backoff 0.0: give a positive number of seconds" in capsys.readouterr().err
    assert cli.main(["supervise", "-h"]) == 0
    assert "--stable-after SECONDS" in capsys.readouterr().out


def test_restart_without_a_checkpoint_fails_fast(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["run", str(ROOT / "examples" / "netmon.py"), "--restart", "2"])
    assert code == 2
    err = " ".join(capsys.readouterr().err.split())  # as the console wrapped it
    assert ("error: --restart 2 starts the run again from its newest checkpoint: give "
            "--checkpoint DIR too; without one a restart would produce the output again from "
            "the start") in err


def test_run_restart_runs_the_same_command_under_the_supervisor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[list[str], Policy]] = []

    def supervised(argv: list[str], policy: Policy) -> int:
        seen.append((list(argv), policy))
        return 7

    monkeypatch.setattr(cli, "supervise", supervised)
    netmon = str(ROOT / "examples" / "netmon.py")
    for given in (["--restart", "2"], ["--restart=2"]):
        code = cli.main(["run", netmon, "--checkpoint", "ck", *given, "--sites", "2"])
        assert code == 7
        argv, policy = seen.pop()
        assert argv == [sys.executable, "-m", "sparkflux.cli", "run", netmon, "--checkpoint",
                        "ck", "--sites", "2"]
        assert policy == Policy(restarts=2)


def test_restart_is_an_option_checked_and_left_out_of_the_runtime() -> None:
    assert RunOptions().restart == 0 and RunOptions().checkpoint is None
    opts = RunOptions(restart=2, checkpoint="ck")
    assert RunConfig.of(opts) == RunConfig(checkpoint="ck")  # the supervisor's, not the run's
    assert run_config(restart=0).sites == 4
    for bad in (-1, True, "2"):
        with pytest.raises(PlanError, match="--restart .*: give a number of restarts, 0 or "
                                            "more"):
            RunOptions(restart=bad, checkpoint="ck")


def test_start_refuses_restart_before_spark(netmon: Any,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def started(*a: Any, **kw: Any) -> None:
        raise AssertionError("the run started")

    monkeypatch.setattr(launcher, "spark_session", started)
    monkeypatch.setattr(query, "launch", started)
    flow = netmon.build(netmon.NetmonOptions())
    with pytest.raises(PlanError, match=r"restart=2 is sparkflux run's --restart: .* under "
                                        r"sparkflux supervise -- python PROGRAM"):
        sparkflux.start(flow, spark=object(), restart=2, checkpoint="ck")


def test_a_group_with_nothing_left_is_cleared_at_once() -> None:
    proc = subprocess.Popen(["true"], process_group=0)
    proc.wait()
    assert supervisor.clear_group(proc.pid) == []
