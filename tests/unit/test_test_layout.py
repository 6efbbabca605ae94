"""The tests' layout (docs/testing.md, "Where the tests live"): every module of the protocol
and control packages has its namesake test, ``tests/unit/<package>/test_<module>.py``, and the
tests live in their layers, not loose in ``tests/``."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT

TESTS = ROOT / "tests"
NAMESAKE_PACKAGES = ("protocol", "control")
LAYERS = {"unit", "sim", "spark", "cluster", "support"}


def modules(package: str) -> list[str]:
    return sorted(p.stem for p in (ROOT / "sparkflux" / package).glob("*.py")
                  if p.name != "__init__.py")


@pytest.mark.parametrize("package", NAMESAKE_PACKAGES)
def test_every_module_has_its_namesake_test(package: str) -> None:
    missing = [f"tests/unit/{package}/test_{m}.py" for m in modules(package)
               if not (TESTS / "unit" / package / f"test_{m}.py").is_file()]
    assert modules(package) and missing == []


def test_no_test_is_left_loose_in_tests() -> None:
    loose = sorted(p.name for p in TESTS.glob("*.py")
                   if p.name not in {"__init__.py", "conftest.py"})
    assert loose == []
    assert {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"} == LAYERS


def test_every_folder_is_a_package() -> None:
    """Absolute imports (``tests.support.seeds``) and duplicate basenames across packages need
    an ``__init__.py`` in every folder of the tests."""
    folders = [p for p in TESTS.rglob("*") if p.is_dir() and p.name != "__pycache__"]
    assert [str(p.relative_to(ROOT)) for p in folders if not (p / "__init__.py").is_file()] == []


def test_unit_tests_sit_under_a_package_of_sparkflux() -> None:
    packages = {p.name for p in (ROOT / "sparkflux").iterdir() if (p / "__init__.py").is_file()}
    unit = {p.name for p in (TESTS / "unit").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert unit - packages == {"surface"}
