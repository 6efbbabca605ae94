"""Shipping the modules beside a dataflow file to the executors, so the sites can import them.

A dataflow file is loaded by path and pickled *by value* (``dataflow/examples.py``), but what it
imports from its own directory (``from helpers import parse`` with ``helpers.py`` beside it) is
pickled by reference, as a module name the site must import when it unpickles the plan. The
driver finds such a module because loading the file puts its directory on the driver's
``sys.path`` (as ``python flow.py`` would); the executors' Python processes do not have it.

So ``ship_beside`` zips the directory's top-level ``.py`` modules and its packages (folders with
an ``__init__.py``, their ``.py`` files at any depth) and adds the zip with
``SparkContext.addPyFile``, which puts it on the ``sys.path`` of every task's Python process, in
local mode and on a cluster alike (one mechanism, so the local tests exercise the cluster's
path). Rules:

- The zip is named by a hash of what it holds and written once, so an unchanged directory is
  added to a session once, and a changed one under a new name (Spark does not replace a file
  already added under a name).
- ``sparkflux`` itself is never shipped (a dataflow file at the root of a source checkout):
  the engine on the executors is the one installed there, as the task's own code is.
- A zip added to a session stays on the path of all its later tasks, and Python workers are
  reused across tasks (a module once imported stays imported). So within one session (a
  library caller's or the tests'; each ``sparkflux run`` has a session of its own), a helper
  module must keep its content, and two dataflow folders must not hold modules of one name.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

NEVER_SHIPPED = frozenset({"sparkflux"})
ZIP_DIR = "sparkflux-modules"


def modules_beside(directory: Path) -> dict[str, Path]:
    """The files to ship from ``directory``: archive name -> path, in a stable order."""
    out: dict[str, Path] = {}
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith(".") or entry.stem in NEVER_SHIPPED:
            continue
        if entry.is_file() and entry.suffix == ".py":
            out[entry.name] = entry
        elif entry.is_dir() and (entry / "__init__.py").is_file():
            for f in sorted(entry.rglob("*.py")):
                rel = f.relative_to(directory)
                if any(p.startswith(".") or p == "__pycache__" for p in rel.parts[:-1]):
                    continue
                out[rel.as_posix()] = f
    return out


def module_names(files: dict[str, Path]) -> tuple[str, ...]:
    """The top-level importable names the archive provides (``helpers``, ``mypkg``)."""
    return tuple(sorted({name.split("/")[0].removesuffix(".py") for name in files}))


def build_zip(directory: Path, out_dir: Path | None = None) -> tuple[Path | None, tuple[str, ...]]:
    """Zip the modules beside a dataflow (None if there are none) and name what it provides."""
    files = modules_beside(directory)
    if not files:
        return None, ()
    digest = hashlib.sha256()
    for name, path in files.items():
        data = path.read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    out_dir = out_dir or Path(tempfile.gettempdir()) / ZIP_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{directory.name or 'dataflow'}-{digest.hexdigest()[:16]}.zip"
    if not target.exists():
        # Written aside and renamed: two drivers shipping the same directory never see a
        # half-written zip under the final name.
        fd, tmp = tempfile.mkstemp(suffix=".zip", dir=out_dir)
        os.close(fd)
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for name, path in files.items():
                z.write(path, name)
        os.replace(tmp, target)
    return target, module_names(files)


def ship_beside(spark: Any, dataflow_dir: Path) -> tuple[str, ...]:
    """Add the modules beside a dataflow file to every task of ``spark``'s session; the
    top-level names shipped."""
    path, names = build_zip(dataflow_dir)
    if path is None:
        return ()
    sc = spark.sparkContext
    # addPyFile of a name already added would list it twice for every task: once is enough.
    if path.name not in (getattr(sc, "_python_includes", None) or []):
        sc.addPyFile(str(path))
        log.info("shipped %s from %s to the executors", ", ".join(names), dataflow_dir)
    return names
