"""The worked example of docs/operators.md runs, and keeps the contract it teaches."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.model.errors import PlanError
from sparkflux.operators.base import Operator
from tests.conftest import ROOT
from tests.support.op_helpers import make_batch, run, run_with_move, split, user_rows

DOC = ROOT / "docs" / "operators.md"


def example() -> type[Operator]:
    """The ``Changes`` class of the page's worked example."""
    text = DOC.read_text().split("## A worked example", 1)[1]
    code = re.search(r"```python\n(.*?)```", text, flags=re.S)
    assert code is not None
    namespace: dict[str, Any] = {}
    exec(compile(code.group(1), str(DOC), "exec"), namespace)
    return namespace["Changes"]


def random_input(seed: int, string_key: bool = False, n: int = 400) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)
    k = rng.integers(0, 5, n)
    return make_batch({"sensor": [f"s{x}" for x in k] if string_key else k,
                       "reading": rng.integers(0, 3, n)}, part=rng.integers(0, 3, n))


def model(batch: pa.RecordBatch) -> list[tuple]:
    last: dict[tuple, int] = {}
    out = []
    for r in batch.to_pylist():
        key = (r["_part"], r["sensor"])
        if key not in last or last[key] != r["reading"]:
            out.append((r["sensor"], r["reading"], r["_sn"], r["_snm"]))
        last[key] = r["reading"]
    return out


@pytest.mark.parametrize("string_key", [False, True])
def test_the_worked_example_keeps_the_contract(string_key: bool) -> None:
    changes = example()

    def make() -> Operator:
        return changes(by=["sensor"], value="reading")

    batch = random_input(1, string_key)
    whole = run(make, [batch])
    assert user_rows(whole) == model(batch)
    batches = split(batch, np.random.default_rng(1), 9)
    assert run(make, batches).equals(whole)
    for cut in (2, 6):
        assert run_with_move(make, batches, cut, wire=True).equals(whole)


def test_the_worked_example_fails_at_plan_time() -> None:
    changes = example()
    schema = make_batch({"sensor": [1], "name": ["a"]}).schema
    with pytest.raises(PlanError, match="'reading'"):
        changes(by=["sensor"], value="reading").bind(schema)
    with pytest.raises(PlanError, match="numeric"):
        changes(by=["sensor"], value="name").bind(schema)


def test_every_operator_is_importable_from_the_package() -> None:
    """``from sparkflux.operators import X`` for every operator class of the package, the
    very class its module defines."""
    import importlib
    import inspect
    import pkgutil

    import sparkflux.operators as ops

    defined = {}
    for mod in pkgutil.iter_modules(ops.__path__):
        module = importlib.import_module(f"sparkflux.operators.{mod.name}")
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if (cls.__module__ == module.__name__ and not name.startswith("_")
                    and issubclass(cls, Operator) and cls is not Operator):
                defined[name] = cls
    assert len(defined) >= 13
    assert {name: getattr(ops, name) for name in defined} == defined
    assert set(defined) <= set(ops.__all__)


def signature_line(cls: type) -> str:
    """``Name(param, ..., param=default, *, keyword)`` as docs/operators.md shows it: the
    constructor's parameters without their annotations, defaults as Python writes them."""
    import inspect

    parts, starred = [], False
    for p in list(inspect.signature(cls.__init__).parameters.values())[1:]:
        if p.kind is p.KEYWORD_ONLY and not starred:
            parts.append("*")
            starred = True
        parts.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    return f"{cls.__name__}({', '.join(parts)})"


def test_the_page_shows_every_operators_constructor() -> None:
    """The "Constructors" section lists every built-in operator with the parameters its
    constructor takes now (a new option, or a renamed one, must show there)."""
    import sparkflux.operators as ops

    names = [n for n in ops.__all__ if n not in ("Operator", "PartitionInfo")]
    section = DOC.read_text().split("## Constructors", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```text\n(.*?)```", section, flags=re.S)
    assert block is not None
    shown = block.group(1).splitlines()
    assert len(names) > 10
    assert sorted(shown) == sorted(signature_line(getattr(ops, n)) for n in names)
