"""The run's timeline as a picture: the thesis' Figure 3.16 for any run.

Top: input (admitted at the ingress) and output (delivered by the egress) tuples per second in
250 ms bins. Bottom: mean output latency per bin. Each ``--kill`` is a red line; each failure
the controller detected (take-over) an orange dashed one; each recovery, when there is one, a
green line; each ``--slow`` a brown dotted one; each ``--squeeze`` a pink dashed one; each
partition move a marker along the top (a memory move, docs/memory.md, a marker of its own).
With ``--consistency eventual``, the tentative output is a dashed line of its own, and the
input's upstream failures and stabilizations are shaded (orange, green).
A user sees at a glance what a failure cost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from sparkflux.runtime.metrics import EgressMetrics


def plot_timeline(path: str | Path, metrics: EgressMetrics, ingress: tuple[list[float], list[int]],
                  events: dict[str, list[float]], title: str, width: float = 0.25) -> None:
    """Write the timeline PNG; ``events`` maps a label (kill, take-over, recovery) to times."""
    start = metrics.start or 0.0
    t_out, out_rate, latency = metrics.binned(width)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True,
                                   gridspec_kw={"height_ratios": [3, 2]})
    times, counts = ingress
    if times:
        t_in = np.asarray(times) - start
        nb = max(int(np.ceil(max(t_in.max(), width) / width)), 1)
        idx = np.minimum((t_in / width).astype(int), nb - 1)
        in_rate = np.bincount(idx, weights=counts, minlength=nb) / width
        ax1.step(np.arange(nb) * width, in_rate / 1000, where="post", color="0.55",
                 label="input (ingress)")
    ax1.step(t_out, out_rate / 1000, where="post", color="tab:blue", label="output (egress)")
    if metrics.tentative_times:
        t_t = np.asarray(metrics.tentative_times) - start
        nb = max(int(np.ceil(max(t_t.max(), width) / width)), 1)
        idx = np.minimum((t_t / width).astype(int), nb - 1)
        rate = np.bincount(idx, weights=metrics.tentative_counts, minlength=nb) / width
        ax1.step(np.arange(nb) * width, rate / 1000, where="post", color="tab:blue",
                 linestyle="--", linewidth=0.9, label="tentative output")
    ax1.set_ylabel("thousand tuples / s")
    ax2.step(t_out, latency * 1000, where="post", color="tab:purple")
    ax2.set_ylabel("mean latency (ms)")
    ax2.set_xlabel(f"seconds since the input started ({int(width * 1000)} ms bins)")
    styles = {"kill": ("tab:red", "-"), "take-over": ("tab:orange", "--"),
              "recovery": ("tab:green", "-."), "slow-down": ("tab:brown", ":"),
              "squeeze": ("tab:pink", "--")}
    top = ax1.get_ylim()[1]
    for label, ts in events.items():
        if label in SPANS:  # (start, end) pairs, shaded
            for i in range(0, len(ts) - 1, 2):
                for ax in (ax1, ax2):
                    ax.axvspan(ts[i] - start, ts[i + 1] - start, color=SPANS[label],
                               alpha=0.15, label=label if (ax is ax1 and i == 0) else None)
            continue
        if label in ("move", "memory move"):  # many, short: a marker each along the top
            mark, color, y = ("v", "tab:olive", 0.97) if label == "move" else (
                "^", "tab:cyan", 0.92)
            ax1.plot(np.asarray(ts) - start, np.full(len(ts), top * y), mark, color=color,
                     markersize=4, label=("partition " + label if label == "move" else label)
                     if ts else None)
            continue
        color, ls = styles.get(label, ("k", ":"))
        for i, t in enumerate(ts):
            for ax in (ax1, ax2):
                ax.axvline(t - start, color=color, linestyle=ls, linewidth=1.2,
                           label=label if (ax is ax1 and i == 0) else None)
    ax1.legend(loc="lower right", fontsize=8)
    ax1.set_title(title)
    ax1.set_ylim(bottom=0)
    ax2.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


SPANS = {"upstream failure": "tab:orange", "stabilization": "tab:green"}


def timeline_events(kills: list[dict[str, Any]], failures: list[dict[str, Any]],
                    recoveries: list[dict[str, Any]] | None = None,
                    moves: list[float] | None = None,
                    slows: list[dict[str, Any]] | None = None,
                    squeezes: list[dict[str, Any]] | None = None,
                    memory_moves: list[float] | None = None,
                    states: list[tuple[float, str]] | None = None,
                    end: float | None = None) -> dict[str, list[float]]:
    """The run's events by label, as ``plot_timeline`` draws them (wall times). ``states``:
    the input's consistency state changes (``protocol/consistency.py``), drawn as spans of
    upstream failure and stabilization, the last one open until ``end``."""
    out = {"kill": [k["time"] for k in kills], "take-over": [f["time"] for f in failures]}
    if states:
        for label, state in (("upstream failure", "upstream-failure"),
                             ("stabilization", "stabilization")):
            spans: list[float] = []
            for k, (t, st) in enumerate(states):
                if st == state:
                    after = states[k + 1][0] if k + 1 < len(states) else end
                    if after is not None:
                        spans += [t, after]
            if spans:
                out[label] = spans
    if squeezes:
        out["squeeze"] = [q["time"] for q in squeezes]
    if memory_moves:
        out["memory move"] = list(memory_moves)
    if recoveries:
        out["recovery"] = [r["time"] for r in recoveries]
    if slows:
        out["slow-down"] = [s["time"] for s in slows]
    if moves:
        out["move"] = list(moves)
    return out
