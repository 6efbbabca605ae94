"""bench/profiler.py's accounting: each sampled stack is charged to the stage of its innermost
sparkflux frame (library and user code charged to their caller, the event loop's own waiting
to ``event loop``), and a real py-spy recording of a process is read and drawn."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("profile_bench", ROOT / "bench" / "profiler.py")
assert spec is not None and spec.loader is not None
prof = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prof)

PKG = f"{ROOT}/sparkflux"
LIB = "/usr/lib/python3.11"


def frame(func: str, path: str, line: int = 1) -> str:
    return f"{func} ({path}:{line})"


def test_library_and_user_code_are_charged_to_their_caller() -> None:
    stacks = [
        ([frame("one_pass", f"{PKG}/runtime/site.py"),
          frame("process", f"{PKG}/operators/session.py"),
          frame("classify", f"{ROOT}/examples/netmon.py"),
          frame("take", f"{ROOT}/.venv/lib/python3.11/site-packages/pyarrow/compute.py")], 5),
        ([frame("admit_all", f"{PKG}/runtime/driver_feed.py"),
          frame("generate", f"{ROOT}/examples/netmon.py"),
          frame("splitmix64", f"{PKG}/model/random.py")], 3),
        ([frame("release", f"{PKG}/protocol/consumer.py"),
          frame("concat", f"{PKG}/model/batch.py")], 2),
    ]
    assert prof.charge(stacks) == {"operator": 5, "ingress": 3, "merge": 2}


def test_the_loops_own_waiting_is_the_event_loop_but_a_write_under_it_is_the_wire() -> None:
    loop = [frame("serve_forever", f"{PKG}/runtime/driver.py"),
            frame("BaseEventLoop._run_once", f"{LIB}/asyncio/base_events.py")]
    stacks = [
        (loop + [frame("EpollSelector.select", f"{LIB}/selectors.py")], 7),
        (loop + [frame("Handle._run", f"{LIB}/asyncio/events.py"),
                 frame("Connection._write", f"{PKG}/runtime/transport.py"),
                 frame("write", f"{LIB}/asyncio/selector_events.py")], 4),
        ([frame("<module>", "<frozen runpy>")], 1),
    ]
    assert prof.charge(stacks) == {"event loop": 8, "wire": 4}


def test_raw_lines_are_read_with_their_counts() -> None:
    text = "a (x.py:1);b (y.py:2) 12\nmalformed\nc (z.py:3) 1\n"
    assert prof.read_stacks(text) == [(["a (x.py:1)", "b (y.py:2)"], 12), (["c (z.py:3)"], 1)]
    assert prof.parse_frame("f (/p/q.py:7)") == ("f", "/p/q.py")
    assert prof.parse_frame("<unknown>") == ("<unknown>", "")


def test_a_real_process_is_sampled_charged_and_drawn(tmp_path: Path) -> None:
    """py-spy attached to a process running sparkflux's model code (its counter-based random
    numbers) in a loop, until it is told to stop: the raw stacks are read back, charged
    (the model to its caller, a script of no stage) and drawn."""
    script = tmp_path / "busy.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        import numpy as np
        from sparkflux.model.random import counter_random
        print("ready", flush=True)
        t = time.time()
        while time.time() - t < 20:
            counter_random(7, 1, np.arange(100_000))
    """))
    busy = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout is not None and busy.stdout.readline().strip() == "ready"
        sampler = prof.Sampler(busy.pid, tmp_path / "busy.stacks", 200)
        time.sleep(1.5)  # what is measured: samples over this long
        stacks = sampler.stop()
    finally:
        busy.kill()
        busy.wait()
    if not stacks:
        pytest.fail("py-spy wrote no samples")
    assert sum(n for _, n in stacks) > 20
    # the model is charged to its caller, here the script itself: no stage
    assert set(prof.charge(stacks)) <= {"event loop"}
    assert any("counter_random" in f for frames, _ in stacks for f in frames)
    prof.flame_graph(stacks, "busy", tmp_path / "busy.png")
    assert (tmp_path / "busy.png").stat().st_size > 10_000


def test_delivery_to_the_sink_is_the_egress_though_its_file_is_the_drivers_actions() -> None:
    stacks = [([frame("Actions._deliver", f"{PKG}/runtime/driver_actions.py"),
                frame("row_hashes", f"{PKG}/model/rows_digest.py")], 3),
              ([frame("Actions._apply", f"{PKG}/runtime/driver_actions.py")], 1)]
    assert prof.charge(stacks) == {"egress": 3, "control": 1}
