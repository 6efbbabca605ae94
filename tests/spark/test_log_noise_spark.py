"""What the terminal shows on a session sparkflux makes (``sparkflux run``): a killed site's
expected Java stack trace ("Python worker exited unexpectedly") stays out of it and goes to
Spark's log file, and so does the JVM's "Using incubator modules" line, while sparkflux
reports the failure itself; a real error (an operator that raises on a site) still shows,
with its message."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

from .test_start_failures_spark import FLOW

pytestmark = pytest.mark.spark

RAISES_MIDWAY = '''

def doubled(batch):
    if int(batch.column("x")[0].as_py()) >= 20_000:
        raise ZeroDivisionError("the operator met a bad record")
    return {"y": batch.column("x")}


OP, FN = Map, doubled
'''
FINE = '''

def doubled(batch):
    return {"y": batch.column("x")}


OP, FN = Map, doubled
'''


def run_cli(tmp_path: Path, extra: str, *args: str) -> tuple[int, str, int]:
    """(exit code, what the terminal got, the driver's pid)."""
    (tmp_path / "flow.py").write_text(FLOW.format(imports="", extra=extra))
    cmd = [sys.executable, "-m", "sparkflux.cli", "run", str(tmp_path / "flow.py"),
           "--sites", "2", "--partitions", "4", "--no-progress", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          cwd=tmp_path, env=env) as proc:
        out, _ = proc.communicate(timeout=300)
        return proc.returncode, out, proc.pid


def spark_log(pid: int) -> str:
    import tempfile

    path = Path(tempfile.gettempdir()) / f"sparkflux-spark-{pid}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def test_a_killed_site_leaves_no_java_stack_trace_in_the_terminal(tmp_path: Path) -> None:
    code, out, pid = run_cli(tmp_path, FINE, "--events", "400000", "--ha", "flux", "--rate",
                             "100000", "--kill", "1@input+100000")
    assert code == 0, out[-3000:]
    assert "killing site 1" in out and "site 1 failed" in out
    assert "Python worker exited unexpectedly" not in out
    assert "Using incubator modules" not in out  # the JVM's start-up line (launch_jvm)
    assert not re.search(r"^\s+at org\.apache\.spark", out, flags=re.M)
    assert "Python worker exited unexpectedly" in spark_log(pid)  # kept, in the file


def test_a_real_error_on_a_site_still_shows(tmp_path: Path) -> None:
    code, out, _ = run_cli(tmp_path, RAISES_MIDWAY, "--events", "60000")
    assert code == 2, out[-3000:]
    assert "ZeroDivisionError" in out and "the operator met a bad record" in out
