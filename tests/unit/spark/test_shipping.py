"""What is shipped from beside a dataflow file (``spark/shipping.py``), without Spark."""

from __future__ import annotations

import zipfile
from pathlib import Path

from sparkflux.spark.shipping import build_zip, modules_beside


def test_the_modules_and_packages_beside_the_file_and_nothing_else(tmp_path: Path) -> None:
    d = tmp_path / "flows"
    for rel in ("flow.py", "helpers.py", "notes.txt", "pkg/__init__.py", "pkg/sub/deep.py",
                "pkg/__pycache__/x.py", "pkg/.hidden/y.py", "data/z.py", ".tool/w.py",
                "sparkflux/__init__.py", "sparkflux/site.py"):
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(f"# {rel}\n")
    assert list(modules_beside(d)) == ["flow.py", "helpers.py", "pkg/__init__.py",
                                       "pkg/sub/deep.py"]
    path, names = build_zip(d, tmp_path / "zips")
    assert path is not None and names == ("flow", "helpers", "pkg")
    with zipfile.ZipFile(path) as z:
        assert z.namelist() == list(modules_beside(d))
        assert z.read("pkg/sub/deep.py") == b"# pkg/sub/deep.py\n"
    again, _ = build_zip(d, tmp_path / "zips")
    assert again == path  # same content, same zip: added to a session once
    (d / "helpers.py").write_text("X = 2\n")
    changed, _ = build_zip(d, tmp_path / "zips")
    assert changed is not None and changed != path  # new content, new name


def test_nothing_to_ship(tmp_path: Path) -> None:
    (tmp_path / "readme.txt").write_text("no modules here")
    assert build_zip(tmp_path, tmp_path / "zips") == (None, ())
