"""Ctrl-C and SIGTERM stop ``sparkflux run`` gracefully: the first ends the input, what was
admitted is processed and written, the output file is valid Parquet holding exactly the rows
the metrics count, and the metrics file is written; a second aborts (exit code 2) and the
output written so far is still readable. SIGINT goes to the command's whole process group,
as a terminal's Ctrl-C does (the Spark JVM and the sites included); SIGTERM to the command's
process, as a process manager sends it; each at a random moment of the input."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.spark

EVENTS = 2_000_000  # at 100K/s: 20 s of input, interrupted well before its end


def interrupted(tmp_path: Path, signals: list[signal.Signals], *extra: str
                ) -> tuple[int, str, float]:
    """Run netmon paced with Flux-HA, send ``signals`` (0.2 s apart) to its process group at
    a random moment once the input has started; (exit code, terminal output, the
    moment)."""
    cmd = [sys.executable, "-m", "sparkflux.cli", "run", str(ROOT / "examples" / "netmon.py"),
           "--events", str(EVENTS), "--rate", "100000", "--sites", "4", "--partitions", "16",
           "--ha", "flux", "--no-progress", *extra, "--output", str(tmp_path / "out.parquet"),
           "--metrics", str(tmp_path / "m.json")]
    moment = random.Random().uniform(0.2, 3.0)
    lines: list[str] = []
    started = threading.Event()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          cwd=tmp_path, start_new_session=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}) as proc:
        assert proc.stdout is not None

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if "input started" in line:
                    started.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert started.wait(120), "".join(lines)
        time.sleep(moment)
        for k, sig in enumerate(signals):
            if k:
                time.sleep(0.2)
            if sig == signal.SIGINT:  # a terminal's Ctrl-C: the whole foreground group
                os.killpg(proc.pid, sig)
            else:  # a process manager's SIGTERM: the command's own process
                os.kill(proc.pid, sig)
        code = proc.wait(120)
        reader.join(10)
    return code, "".join(lines), moment


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_first_interrupt_ends_the_input_and_finishes_what_was_admitted(
        tmp_path: Path, sig: signal.Signals) -> None:
    code, out, moment = interrupted(tmp_path, [sig])
    assert code == 0, f"at {moment:.2f} s:\n{out[-3000:]}"
    assert f"{sig.name}: the input ends here" in out
    assert "Traceback" not in out and "KeyboardInterrupt" not in out
    m = json.loads((tmp_path / "m.json").read_text())
    assert 0 < m["input_tuples"] < EVENTS and m["failures"] == []
    table = pq.read_table(tmp_path / "out.parquet")  # a valid file: its footer is written
    assert table.num_rows == m["output_tuples"] > 0


def test_a_second_interrupt_aborts_and_leaves_the_output_readable(tmp_path: Path) -> None:
    # sites held to a twentieth of a core: what was admitted takes seconds to process, so
    # the second interrupt comes while the run still finishes it
    code, out, moment = interrupted(tmp_path, [signal.SIGINT, signal.SIGINT],
                                    "--site-cpu", "0.05")
    assert code == 2, f"at {moment:.2f} s:\n{out[-3000:]}"
    assert "SIGINT again: aborting" in out and "aborted by SIGINT" in out
    assert "Traceback" not in out and "KeyboardInterrupt" not in out
    pq.read_table(tmp_path / "out.parquet")  # readable, whatever it holds
