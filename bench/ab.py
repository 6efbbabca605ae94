"""One bench, two builds, in one run: the working tree against an earlier commit.

    .venv/bin/python bench/ab.py [--rev HEAD~1] [--rounds 2] [--keys REGEX] -- \\
        bench/latency.py --workloads q1 --rates 10000 0 --modes none flux

Speed is compared on these machines by ratios measured side by side, never against figures
from another day. The commit ``--rev`` is checked out once (``git worktree``, under
``out/ab/``); each round runs the bench there and here, alternately, with the same Python
environment and the working tree's version of the bench script (both builds measured the same
way). Each side's ``sparkflux`` is the one first on ``PYTHONPATH``, which Spark's local Python
workers inherit, so the sites run the same build as the driver. Every numeric figure of the
bench's ``--json`` output whose path matches ``--keys`` is printed: the median over the rounds
of each build, and after / before. Each run's output goes to ``out/ab/<side>-<round>.log``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "ab"


def flatten(doc: Any, path: str = "") -> dict[str, float]:
    """Every number in a JSON document by its path (``3.p50``, ``tps.none.0``): a list's
    items by their index (``labels`` says what a row of objects is)."""
    out: dict[str, float] = {}
    if isinstance(doc, bool):
        return out
    if isinstance(doc, (int, float)):
        out[path] = float(doc)
    elif isinstance(doc, dict):
        for k, v in doc.items():
            out.update(flatten(v, f"{path}.{k}" if path else str(k)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.update(flatten(v, f"{path}.{i}" if path else str(i)))
    return out


def labels(doc: Any) -> dict[str, str]:
    """For a list of row objects: each index's text fields (what the row is)."""
    if not isinstance(doc, list):
        return {}
    return {str(i): " ".join(f"{v:g}" if isinstance(v, float) else str(v)
                             for k, v in row.items()
                             if isinstance(v, (str, int, float)) and not isinstance(v, bool)
                             and k in ("workload", "query", "mode", "rate", "config"))
            for i, row in enumerate(doc) if isinstance(row, dict)}


def checkout(rev: str) -> Path:
    """The commit ``rev`` checked out under ``out/ab/`` (once per commit)."""
    sha = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, check=True, text=True,
                         capture_output=True).stdout.strip()
    tree = OUT / f"tree-{sha[:12]}"
    if not (tree / "sparkflux").is_dir():
        OUT.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "worktree", "add", "--detach", "--force", str(tree), sha],
                       cwd=ROOT, check=True, capture_output=True)
    return tree


def run_side(tree: Path, script: Path, args: list[str], log: Path, json_out: Path) -> Any:
    """The bench ``script`` (the working tree's copy) run against the build in ``tree``: in
    a folder of its own beside the tree's ``bench/`` (its root is still its parent's parent),
    so no file of the older ``bench/`` shadows a module it imports."""
    target = script
    if tree != ROOT:
        target = tree / ".ab-bench" / script.name
        target.parent.mkdir(exist_ok=True)
        shutil.copyfile(script, target)
    env = dict(os.environ, PYTHONPATH=str(tree))
    with log.open("w") as f:
        rc = subprocess.run([sys.executable, str(target), *args, "--json", str(json_out)],
                            cwd=tree, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0 or not json_out.exists():
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise SystemExit(f"{script.name} failed (exit {rc}) on {tree.name}; {log}:\n{tail}")
    return json.loads(json_out.read_text())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--rev", default="HEAD~1", help="the build before (a commit)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--keys", default=".", help="show figures whose path matches this")
    p.add_argument("bench", nargs=argparse.REMAINDER, help="-- bench/SCRIPT.py [ARGS]")
    a = p.parse_args()
    bench = a.bench[1:] if a.bench[:1] == ["--"] else a.bench
    if not bench:
        p.error("give the bench after --, e.g. -- bench/latency.py --workloads q1")
    script = (ROOT / bench[0]).resolve()
    console = Console(width=150)
    before = checkout(a.rev)
    OUT.mkdir(parents=True, exist_ok=True)
    figures: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    names: dict[str, str] = {}
    for r in range(a.rounds):
        for side, tree in (("before", before), ("after", ROOT)):
            console.print(f"round {r + 1}/{a.rounds}: {script.name} on {side} "
                          f"({a.rev if side == 'before' else 'the working tree'})")
            doc = run_side(tree, script, bench[1:], OUT / f"{side}-{r + 1}.log",
                           OUT / f"{side}-{r + 1}.json")
            names.update(labels(doc))
            for k, v in flatten(doc).items():
                figures[side].setdefault(k, []).append(v)
    keep = re.compile(a.keys)
    t = Table(title=f"{' '.join(bench)}: {a.rev} (before) against the working tree (after), "
                    f"median of {a.rounds} round(s)")
    for col in ("figure", "before", "after", "after / before"):
        t.add_column(col, justify="left" if col == "figure" else "right")
    for k, vs in figures["after"].items():
        if not keep.search(k) or k not in figures["before"]:
            continue
        b, f = statistics.median(figures["before"][k]), statistics.median(vs)
        row, _, leaf = k.partition(".")
        label = f"{names[row]} {leaf}" if row in names else k
        t.add_row(label, f"{b:,.4g}", f"{f:,.4g}", f"{f / b:.2f}" if b else "")
    console.print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
