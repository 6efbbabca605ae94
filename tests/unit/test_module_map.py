"""The module map (docs/layout.md) lists every module of the package, and nothing that is gone."""

from __future__ import annotations

import re

from tests.conftest import ROOT


def test_the_module_map_matches_the_tree() -> None:
    layout = (ROOT / "docs" / "layout.md").read_text()
    section = layout.split("## Module map", 1)[1].split("\n# ", 1)[0]
    listed = re.findall(r"^- `([\w/]+\.py)`: ", section, flags=re.M)
    tree = sorted(str(p.relative_to(ROOT / "sparkflux")) for p in (ROOT / "sparkflux").rglob(
        "*.py") if p.name != "__init__.py")
    assert sorted(listed) == tree
    assert len(listed) == len(set(listed))
