"""The README's quick start is ``examples/quickstart.py``'s, word for word (which
``tests/spark/test_quickstart_spark.py`` runs), and the line counts the README and
docs/pyspark.md give for it and for Spark Structured Streaming's version are the counts of
the code they show."""

from __future__ import annotations

import re

from tests.conftest import ROOT


def python_block(markdown: str, after: str) -> str:
    """The first ```python block after the heading ``after``."""
    section = markdown.split(after, 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def lines_of_code(code: str) -> int:
    """Lines neither blank nor only a comment."""
    return sum(1 for line in code.splitlines()
               if line.strip() and not line.strip().startswith("#"))


def readme_block() -> str:
    return python_block((ROOT / "README.md").read_text(), "## Quick start\n")


def test_the_readme_quick_start_is_the_runnable_example() -> None:
    script = (ROOT / "examples" / "quickstart.py").read_text()
    lines = script.split("# --- the quick start (README.md)\n", 1)[1].split("\n# ---\n")[0]
    assert readme_block() == lines + "\n"


def test_the_line_counts_given_are_the_code_shown() -> None:
    ours = lines_of_code(readme_block())
    pyspark = (ROOT / "docs" / "pyspark.md").read_text()
    theirs = lines_of_code(python_block(pyspark, "## The quick start in Structured Streaming"))
    assert ours < theirs
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"That is {ours} lines; Spark Structured Streaming needs {theirs} for the" in readme
    said = re.search(r"Spark\) is (\d+) lines\. The same in Spark Structured Streaming is "
                     r"(\d+)", " ".join(pyspark.split()))
    assert said is not None and (int(said[1]), int(said[2])) == (ours, theirs)
