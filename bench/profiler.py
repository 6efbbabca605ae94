"""Where a tuple's time goes: sampling profiles of the driver and of one site during a run.

    .venv/bin/python bench/profiler.py [--workload netmon|q0..q8] [--ha flux] [--events N]
                                      [--rate R] [--site 1] [--hz 250] [--out out/profile]

Runs one named workload (``netmon``: ``examples/netmon.py``; ``qN``: Nexmark query N of
``examples/nexmark/nexmark.py``) on 4 sites and 32 partitions in Spark local mode, as fast as
the dataflow takes its input or held at ``--rate``. While it runs, py-spy samples the driver
(this process) and site ``--site``'s process; each sample's stack is charged to the stage of
its innermost sparkflux frame:

- ``ingress``: reading and pacing the sources, sequencing and admitting batches;
- ``wire``: encoding, decoding, authenticating and writing frames, the skew buffer (DTSB);
- ``merge``: the consumer's merge of its producers' streams in SN order, duplicate filters;
- ``FH-Prod``: the producer's buffer of sent rows, routing, acknowledgements;
- ``operator``: the query's operators (and the user's functions they call);
- ``egress``: the driver's merge of the last stage's partitions and delivery to the sink;
- ``control``: the site's core and boundary outside the above, heartbeats, the controller;
- ``event loop``: asyncio and threads with no sparkflux frame (py4j, the Spark side).

It prints, per process, the CPU seconds and microseconds per input tuple of each stage, and
the share of the process's samples, and writes ``driver.png`` and ``site.png`` (flame
graphs: each box a frame, its width its share of the samples, callers below their callees'
boxes) and the raw stacks (``*.stacks``, one ``frame;frame;... count`` line each, the
format flame graph tools read) to ``--out``. Only threads that are not idle are sampled
(py-spy without ``--idle``): running, or ready and waiting for a core, which on a machine
whose cores the sites and the driver share is part of the figure. Time a tuple spends
waiting in a queue or for a timer is not in the table; the run's latency p50/p99 is printed
with it. At the driver, ``merge`` is the egress's merge of the last stage's streams.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sparkflux.cli import run_args  # noqa: E402
from sparkflux.dataflow.examples import load_example  # noqa: E402
from sparkflux.io.sinks import DeadLetters, NullSink  # noqa: E402
from sparkflux.runner import run_example  # noqa: E402
from sparkflux.runtime import trace  # noqa: E402
from sparkflux.spark.launcher import default_master, spark_session  # noqa: E402

SITES, PARTITIONS = 4, 32
STAGES = ("ingress", "wire", "merge", "FH-Prod", "operator", "egress", "control", "event loop")
# The stage of a frame, by the file it is in: the first pattern (a path suffix, / separated)
# that matches. A sample is charged to its innermost frame that has a stage; the standard
# library, pyarrow, numpy, the user's code (examples/) and sparkflux's model (batches, keys,
# digests) have none, so their time is their caller's: a user's function is ``operator``
# when an operator calls it and ``ingress`` when a source does.
STAGE_OF_FILE: tuple[tuple[str, str], ...] = (
    ("sparkflux/protocol/ingress.py", "ingress"),
    ("sparkflux/protocol/sequencer.py", "ingress"),
    ("sparkflux/runtime/driver_feed.py", "ingress"),
    ("sparkflux/runtime/pacing.py", "ingress"),
    ("sparkflux/io/", "ingress"),
    ("sparkflux/runtime/codec.py", "wire"),
    ("sparkflux/runtime/frames.py", "wire"),
    ("sparkflux/runtime/transport.py", "wire"),
    ("sparkflux/runtime/security.py", "wire"),
    ("sparkflux/runtime/handshake.py", "wire"),
    ("sparkflux/runtime/outbox.py", "wire"),
    ("sparkflux/runtime/wan.py", "wire"),
    ("sparkflux/protocol/skew.py", "wire"),
    ("sparkflux/protocol/consumer.py", "merge"),
    ("sparkflux/protocol/merge_waits.py", "merge"),
    ("sparkflux/protocol/seen_keys.py", "merge"),
    ("sparkflux/protocol/producer.py", "FH-Prod"),
    ("sparkflux/operators/", "operator"),
    ("sparkflux/dataflow/", "operator"),
    ("sparkflux/protocol/egress.py", "egress"),
    ("sparkflux/runtime/driver_inbox.py", "egress"),
    ("sparkflux/", "control"),
)
# Functions whose stage is not their file's: delivery to the sink (and the output's digests)
# is the egress's, though the driver's actions live in one file.
STAGE_OF_FUNC = {("sparkflux/runtime/driver_actions.py", "Actions._deliver"): "egress"}
FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def stage_of(path: str, func: str = "") -> str | None:
    """The stage a frame of ``func`` in file ``path`` is charged to, None for a file outside
    the project (the standard library, pyarrow, numpy: their time is their caller's)."""
    path = path.replace(os.sep, "/")
    for (suffix, name), stage in STAGE_OF_FUNC.items():
        if func == name and path.endswith(suffix):
            return stage
    root = str(ROOT).replace(os.sep, "/") + "/"
    rel = path[len(root):] if path.startswith(root) else path
    if "/site-packages/" in rel and "/site-packages/sparkflux" not in rel:
        return None
    if "sparkflux/model/" in rel:
        return None
    for pattern, stage in STAGE_OF_FILE:
        if pattern in rel if pattern.endswith("/") else rel.endswith(pattern):
            return stage
    return None


def parse_frame(frame: str) -> tuple[str, str]:
    """``func (file:line)`` -> (func, file); a frame py-spy could not name is its text."""
    m = FRAME.match(frame.strip())
    return (m["func"], m["file"]) if m else (frame.strip(), "")


def read_stacks(text: str) -> list[tuple[list[str], int]]:
    """py-spy's raw output (``frame;frame;... count`` per line, outermost first)."""
    out: list[tuple[list[str], int]] = []
    for line in text.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if stack and count.isdigit():
            out.append((stack.split(";"), int(count)))
    return out


def loop_frame(func: str, path: str) -> bool:
    """A frame of the event loop's own machinery: waiting in ``select`` or dispatching
    callbacks (the time between them, not inside one)."""
    path = path.replace(os.sep, "/")
    return path.endswith("/selectors.py") or (path.endswith("asyncio/base_events.py") and
                                              func.endswith(("_run_once", "run_forever")))


def charge(stacks: list[tuple[list[str], int]]) -> Counter[str]:
    """Samples per stage: each stack charged to its innermost frame that has one, or to the
    ``event loop`` when the loop's own machinery comes first."""
    per: Counter[str] = Counter()
    for frames, count in stacks:
        stage = "event loop"
        for frame in reversed(frames):
            func, path = parse_frame(frame)
            if loop_frame(func, path):
                break
            s = stage_of(path, func)
            if s is not None:
                stage = s
                break
        per[stage] += count
    return per


def flame_graph(stacks: list[tuple[list[str], int]], title: str, path: Path) -> None:
    """Draw the stacks as a flame graph (matplotlib): a box per frame, as wide as its share
    of the samples, on top of its caller's, coloured by its stage; each stack starts at its
    outermost sparkflux frame (the process's start-up frames below it are the same in
    every sample); a box too narrow for its name is left blank."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    tree: dict[str, Any] = {"n": 0, "kids": {}}
    for frames, count in stacks:
        parsed = [parse_frame(f) for f in frames]
        first = next((i for i, (_, f) in enumerate(parsed) if "sparkflux/" in f), 0)
        node = tree
        node["n"] += count
        for func, file in parsed[first:]:
            node = node["kids"].setdefault(f"{func}\0{file}", {"n": 0, "kids": {}})
            node["n"] += count
    total = max(tree["n"], 1)
    boxes: list[tuple[float, int, float, str, str]] = []

    def walk(node: dict[str, Any], x: float, depth: int) -> None:
        for key, kid in sorted(node["kids"].items()):
            func, file = key.split("\0")
            boxes.append((x, depth, kid["n"] / total, func, file))
            walk(kid, x, depth + 1)
            x += kid["n"] / total

    walk(tree, 0.0, 0)
    top = max((b[1] for b in boxes), default=0) + 1
    colours = {stage: plt.cm.tab10(i) for i, stage in enumerate(STAGES)}
    other = (0.86, 0.82, 0.74, 1.0)
    fig, ax = plt.subplots(figsize=(16, max(4.0, 0.22 * (top + 3))))
    for x, depth, w, func, file in boxes:
        stage = "event loop" if loop_frame(func, file) else stage_of(file, func)
        ax.add_patch(plt.Rectangle((x, depth), w, 0.95, facecolor=colours.get(stage, other),
                                   edgecolor="white", linewidth=0.3))
        if w > 0.03:
            ax.text(x + 0.002, depth + 0.45, func[: int(w * 170)], fontsize=6, va="center")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, top)
    ax.set_yticks([])
    ax.set_xlabel(f"share of {total:,} samples")
    ax.set_title(title)
    ax.legend(handles=[Patch(color=c, label=s) for s, c in colours.items()]
              + [Patch(color=other, label="library / user code")],
              loc="upper right", fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def age_table(directory: Path) -> Table:
    """The rows' ages at each point of their path (``runtime/trace.py``), every process's
    added up: mean, p50 and p99, and what the mean grew by since the point before."""
    points = trace.read(directory)
    last = max((stage for _, stage in points), default=0)
    table = Table(title="Where a row's latency accrues (its age since admission, ms)")
    for col in ("stage", "point", "rows", "mean", "p50", "p99", "+ mean"):
        table.add_column(col, justify="left" if col in ("stage", "point") else "right")
    before = 0.0
    for point, stage in trace.path_order(points):
        p = points[(point, stage)]
        if not p["rows"]:
            continue
        mean = p["age_sum"] / p["rows"] * 1e3
        where = "egress" if stage == last else f"stage {stage}"
        label = {"sent": f"sent by {'ingress' if stage == 0 else f'stage {stage - 1}'}",
                 "received": "received", "pass": "taken by a pass",
                 "delivered": "delivered to the sink"}[point]
        table.add_row(where, label, f"{p['rows']:,}", f"{mean:.2f}",
                      f"{trace.percentile(p['hist'], 50) * 1e3:.2f}",
                      f"{trace.percentile(p['hist'], 99) * 1e3:.2f}", f"{mean - before:+.2f}")
        before = mean
    return table


class Sampler:
    """py-spy on one process, from its creation until ``stop`` (SIGINT makes it write)."""

    def __init__(self, pid: int, out: Path, hz: int) -> None:
        self.out = out
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(pid),
             "--format", "raw", "--rate", str(hz), "--full-filenames", "--nonblocking",
             "--output", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def stop(self) -> list[tuple[list[str], int]]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise RuntimeError(f"py-spy did not write {self.out} within 30 s") from None
        if not self.out.exists():
            raise RuntimeError(f"py-spy wrote no profile ({self.out}): {err.strip()[-400:]}")
        return read_stacks(self.out.read_text())


def workload(name: str, events: int, ha: str, rate: float | None,
             max_batch_delay: float | None = None) -> tuple[Any, Any]:
    """The example module and its arguments for workload ``name``."""
    common: dict[str, Any] = {"events": events, "sites": SITES, "partitions": PARTITIONS,
                              "ha": ha, "rate": rate, "max_batch_delay": max_batch_delay}
    if name == "netmon":
        path = ROOT / "examples" / "netmon.py"
        return load_example(path), run_args(path, **common)
    if re.fullmatch(r"q\d", name):
        path = ROOT / "examples" / "nexmark" / "nexmark.py"
        return load_example(path), run_args(path, query=int(name[1:]), **common)
    raise SystemExit(f"--workload {name}: give netmon or q0..q8")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--workload", default="netmon", help="netmon, or q0..q8 (Nexmark)")
    p.add_argument("--ha", default="flux", choices=("none", "flux", "race"))
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--rate", type=float, default=None,
                   help="input held at this many records/s (default: as fast as taken)")
    p.add_argument("--max-batch-delay", type=float, default=None, metavar="MS",
                   help="cap every hop's batching (the run option of the same name)")
    p.add_argument("--site", type=int, default=1, help="the site whose process is sampled")
    p.add_argument("--hz", type=int, default=250, help="samples per second")
    p.add_argument("--out", default="out/profile", help="where the pictures and stacks go")
    p.add_argument("--json", default=None, help="write the table here too")
    a = p.parse_args()
    console = Console(width=140)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    module, args = workload(a.workload, a.events, a.ha, a.rate, a.max_batch_delay)
    ages = out / "ages"
    for old in ages.glob("*.json"):
        old.unlink()
    trace.start(ages)  # before Spark starts: its site processes inherit the setting
    spark = spark_session(default_master(SITES + 1), "sparkflux-profile")
    samplers: dict[str, Sampler] = {}
    failed: list[BaseException] = []

    def attach(host: Any) -> None:
        """Sample the driver now and the site once its process has joined the view."""
        samplers["driver"] = Sampler(os.getpid(), out / "driver.stacks", a.hz)

        def wait_site() -> None:
            try:
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and not host.over():
                    member = host.controller.view.members.get(a.site)
                    if member is not None and member.pid:
                        samplers["site"] = Sampler(member.pid, out / "site.stacks", a.hz)
                        return
                    time.sleep(0.05)
                raise RuntimeError(f"site {a.site} never joined the run")
            except BaseException as e:  # noqa: BLE001 - reported after the run
                failed.append(e)

        threading.Thread(target=wait_site, name="profile-attach", daemon=True).start()

    console.print(f"[bold]{a.workload}[/], --ha {a.ha}, {a.events:,} events"
                  + (f" at {a.rate:,.0f}/s" if a.rate else ", as fast as taken")
                  + f"; sampling the driver and site {a.site} at {a.hz} Hz")
    t0 = time.perf_counter()
    result = run_example(module, args, sink=NullSink(), dead=DeadLetters(), spark=spark,
                         display=attach)
    wall = time.perf_counter() - t0
    m = result.metrics
    profiles = {name: s.stop() for name, s in samplers.items()}
    if failed:
        raise failed[0]
    tuples = max(int(m["input_tuples"]), 1)
    table = Table(title=f"CPU per stage ({tuples:,} input tuples, {wall:.1f} s, "
                        f"{m['throughput_tps']:,.0f} tuples/s; latency p50 "
                        f"{m['latency_p50_s'] * 1e3:.0f} ms, p99 "
                        f"{m['latency_p99_s'] * 1e3:.0f} ms)")
    table.add_column("stage")
    for name in profiles:
        table.add_column(f"{name} CPU s", justify="right")
        table.add_column(f"{name} µs/tuple", justify="right")
        table.add_column(f"{name} share", justify="right")
    per = {name: charge(stacks) for name, stacks in profiles.items()}
    figures: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for stage in STAGES:
        cells = [stage]
        for name, counts in per.items():
            total = max(sum(counts.values()), 1)
            cpu = counts[stage] / a.hz
            figures[name][stage] = {"cpu_s": cpu, "us_per_tuple": cpu / tuples * 1e6,
                                    "share": counts[stage] / total}
            cells += [f"{cpu:.2f}", f"{cpu / tuples * 1e6:.2f}",
                      f"{counts[stage] / total:.0%}"]
        table.add_row(*cells)
    cells = ["all"]
    for counts in per.values():
        cpu = sum(counts.values()) / a.hz
        cells += [f"{cpu:.2f}", f"{cpu / tuples * 1e6:.2f}", f"{cpu / wall:.0%} of a core"]
    table.add_row(*cells, style="bold")
    console.print(table)
    assert trace.TRACE is not None
    trace.TRACE.write()
    console.print(age_table(ages))
    for name, stacks in profiles.items():
        what = "the driver" if name == "driver" else f"site {a.site}"
        flame_graph(stacks, f"{a.workload}, --ha {a.ha}: {what}", out / f"{name}.png")
    console.print(f"flame graphs: {out / 'driver.png'}, {out / 'site.png'}; raw stacks: "
                  f"{out}/*.stacks")
    if a.json:
        Path(a.json).write_text(json.dumps({"workload": a.workload, "ha": a.ha,
                                            "tuples": tuples, "wall_s": wall,
                                            "stages": figures}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
