"""docs/api.md is what ``scripts/apidoc.py`` generates from the code now, and lists every name
``sparkflux`` and ``sparkflux.operators`` export with its current parameters; with pdoc
installed (the dev extras) the HTML reference builds and documents them."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import ROOT


def apidoc() -> ModuleType:
    spec = importlib.util.spec_from_file_location("apidoc", ROOT / "scripts" / "apidoc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_is_the_generated_one() -> None:
    page = (ROOT / "docs" / "api.md").read_text()
    assert page == apidoc().api_page(), "run scripts/apidoc.py --md-only"


@pytest.mark.parametrize("module", ["sparkflux", "sparkflux.operators"])
def test_every_exported_name_is_listed_with_its_parameters(module: str) -> None:
    page = (ROOT / "docs" / "api.md").read_text()
    mod = importlib.import_module(module)
    assert mod.__all__
    for name in mod.__all__:
        obj = getattr(mod, name)
        head = f"### `{module}.{name}`\n\n```python\n"
        assert head in page, f"{module}.{name} is not listed"
        shown = page.split(head, 1)[1].split("\n```", 1)[0]
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            assert shown.startswith(f"class {name}(")
            continue
        params = inspect.signature(obj).parameters
        assert shown.startswith(f"{name}(")
        for p in params.values():  # each parameter, in order, by name
            assert p.name in shown, f"{module}.{name}: {p.name} missing from {shown}"
        at = [shown.index(f"{p.name}") for p in params.values()]
        assert at == sorted(at)


def test_the_html_reference_builds(tmp_path: Path) -> None:
    pytest.importorskip("pdoc")
    apidoc().build_html(tmp_path)
    operators = (tmp_path / "sparkflux" / "operators.html").read_text()
    # the docstring rendered, with its example of the one aggregation spelling
    assert "TimeWindowAggregate" in operators and "(func, column)" in operators
    assert "retain_superseded" in (tmp_path / "sparkflux" / "io.html").read_text()
    assert (tmp_path / "index.html").exists() and (tmp_path / "sparkflux.html").exists()
