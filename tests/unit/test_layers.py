"""The import contract (docs/design.md, "Layers"): each package imports only from the layers
below it and from itself, lazy (in-function) and type-checking imports included, so a
lower layer never reaches up and the packages have no cycle."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT as REPO

ROOT = REPO / "sparkflux"

# lowest first; the packages of one layer may not import each other
LAYERS: list[tuple[str, ...]] = [
    ("model",),
    ("operators",),
    ("dataflow",),
    ("io", "protocol"),
    ("control",),
    ("runtime",),
    ("spark",),
    ("sim",),
]
# the user's surface (the CLI, the query API, the runner, the demo): above every package
SURFACE = "surface"


def _unit(path: Path) -> str:
    """The package a module belongs to (its folder), or the surface for top-level modules."""
    rel = path.relative_to(ROOT)
    return rel.parts[0] if len(rel.parts) > 1 else SURFACE


def _level(unit: str) -> int:
    for i, layer in enumerate(LAYERS):
        if unit in layer:
            return i
    assert unit == SURFACE, f"package {unit!r} has no layer in LAYERS: give it one"
    return len(LAYERS)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, target unit) of every ``sparkflux`` import in ``path``, wherever it is."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "sparkflux" and len(parts) > 1:
                target = parts[1]
                unit = target if (ROOT / target).is_dir() else SURFACE
                out.append((node.lineno, unit))
    return out


def test_every_import_goes_down_the_layers() -> None:
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        unit = _unit(path)
        if unit == SURFACE:
            continue  # the surface may use anything
        for line, target in _imports(path):
            if target != unit and _level(target) >= _level(unit):
                bad.append(f"{path.relative_to(ROOT.parent)}:{line}: {unit} imports {target}")
    assert not bad, "imports that go up or across the layers:\n" + "\n".join(bad)


def test_the_design_lists_the_same_layers() -> None:
    text = (ROOT.parent / "docs" / "design.md").read_text()
    section = text.split("## 2. Layers", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip().strip("`").rstrip("/") for line in section.splitlines()
            if line.startswith("| `")]
    assert rows == [p for layer in LAYERS for p in layer], rows
