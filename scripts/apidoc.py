"""The API reference, generated from the code: docs/api.md lists every public name with its
signature and the first paragraph of its docstring (committed; tests/unit/surface/
test_api_doc.py checks it matches the code), and pdoc (the dev extras) renders every
docstring in full as HTML into docs/api/ (built on demand, not committed).

    .venv/bin/python scripts/apidoc.py            # docs/api.md, and docs/api/ with pdoc
    .venv/bin/python scripts/apidoc.py --md-only  # docs/api.md alone (no pdoc needed)
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The public API: module -> the names it offers (None: its __all__).
PUBLIC: dict[str, list[str] | None] = {
    "sparkflux": None,
    "sparkflux.dataflow.api": ["Stream", "Source", "Sink"],  # Dataflow: under sparkflux
    "sparkflux.operators": None,
    "sparkflux.io": None,
    "sparkflux.io.sinks": ["ParquetSink", "CollectSink", "NullSink", "DeadLetters"],
    "sparkflux.io.table_update": ["snapshot_file"],
}
# Classes whose methods are part of the API beside their constructor (an operator's methods
# are the operator contract, listed once under Operator).
WITH_METHODS = {"FluxQuery", "Dataflow", "Stream", "Source", "Sink", "Operator"}
# What pdoc renders: the modules of the public names, each with every docstring.
HTML_MODULES = ["sparkflux", "sparkflux.query", "sparkflux.dataflow.api",
                "sparkflux.operators", "sparkflux.io", "sparkflux.spark.launcher",
                "sparkflux.model.errors"]


def public_names(module: str) -> list[str]:
    names = PUBLIC[module]
    return list(names if names is not None else importlib.import_module(module).__all__)


class _Raw(str):
    """Text shown as it is in a signature (an annotation as written, a default's name)."""

    def __repr__(self) -> str:
        return str(self)


def _default(value: Any) -> _Raw:
    """A default as the reader would write it (a function by its name, not its repr, which
    may carry run-time state)."""
    if callable(value) and hasattr(value, "__qualname__"):
        return _Raw(value.__qualname__)
    return _Raw(repr(value))


def _annotation(annotation: Any) -> Any:
    return _Raw(annotation) if isinstance(annotation, str) else annotation


def signature(obj: Callable[..., Any], name: str) -> str:
    """``name(params) -> result`` with the annotations as written in the source (this
    package's modules postpone them: they are the source's text); no ``-> None``."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return f"{name}(...)"
    params = [p.replace(annotation=_annotation(p.annotation),
                        default=p.default if p.default is p.empty else _default(p.default))
              for p in sig.parameters.values()]
    ret = sig.return_annotation
    ret = sig.empty if ret in ("None", None) else _annotation(ret)
    return name + str(sig.replace(parameters=params, return_annotation=ret))


def summary(obj: Any) -> str:
    """The first paragraph of the docstring, on one line."""
    own = obj.__doc__ if inspect.isclass(obj) else inspect.getdoc(obj)  # not a base's
    doc = inspect.cleandoc(own or "")
    return " ".join(doc.split("\n\n")[0].split())


def _members(cls: type) -> list[tuple[str, Any]]:
    out = []
    for name, member in cls.__dict__.items():
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            out.append((name, member))
        elif inspect.isfunction(member) or isinstance(member, (classmethod, staticmethod)):
            out.append((name, member.__func__ if isinstance(
                member, (classmethod, staticmethod)) else member))
    return out


def entry(module: str, name: str) -> list[str]:
    obj = getattr(importlib.import_module(module), name)
    home = f"{module}.{name}"
    lines = [f"### `{home}`", ""]
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        bases = ", ".join(b.__name__ for b in obj.__bases__)
        lines += ["```python", f"class {name}({bases})", "```", ""]
    elif callable(obj):
        lines += ["```python", signature(obj, name), "```", ""]
    if summary(obj):
        lines += [summary(obj), ""]
    if inspect.isclass(obj) and name in WITH_METHODS:
        for member_name, member in _members(obj):
            if isinstance(member, property):
                head = f"`{name}.{member_name}` (property)"
            else:
                head = "`" + signature(member, f"{name}.{member_name}").replace(
                    "(self, ", "(").replace("(self)", "()") + "`"
            lines.append(f"- {head}" + (f": {summary(member)}" if summary(member) else ""))
        lines.append("")
    return lines


def api_page() -> str:
    """docs/api.md."""
    lines = [
        "# API reference",
        "",
        "Every public name with its signature and the first paragraph of its docstring, "
        "generated",
        "by `scripts/apidoc.py` from the code (`tests/unit/surface/test_api_doc.py` checks "
        "that this",
        "page matches it: do not edit it by hand). Every docstring in full, as HTML, is built "
        "by",
        "[pdoc](https://pdoc.dev) (in the `dev` extras) into `docs/api/`, on demand:",
        "",
        "```bash",
        ".venv/bin/python scripts/apidoc.py            # this page, and docs/api/index.html",
        ".venv/bin/python scripts/apidoc.py --md-only  # this page alone",
        "```",
        "",
    ]
    for module in PUBLIC:
        lines += [f"## `{module}`", ""]
        for name in public_names(module):
            lines += entry(module, name)
    return "\n".join(lines).rstrip("\n") + "\n"


def build_html(out: Path) -> None:
    """Every docstring of the public modules as HTML (pdoc), into ``out``."""
    try:
        import pdoc
    except ImportError:
        sys.exit("pdoc is not installed: install the dev extras (pip install -e '.[dev]'), or "
                 "run with --md-only")
    for module in ("sparkflux", "sparkflux.operators"):  # their names load on first use
        mod = importlib.import_module(module)
        for name in mod.__all__:  # put into the module, where pdoc looks for them
            setattr(mod, name, getattr(mod, name))
    pdoc.render.configure(docformat="restructuredtext", search=True,
                          footer_text="sparkflux API reference")
    pdoc.pdoc(*HTML_MODULES, output_directory=out)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--md-only", action="store_true", help="write docs/api.md alone")
    p.add_argument("--out", default=str(ROOT / "docs" / "api"), help="where the HTML goes")
    args = p.parse_args(argv)
    (ROOT / "docs" / "api.md").write_text(api_page())
    print(f"wrote {ROOT / 'docs' / 'api.md'}")
    if not args.md_only:
        build_html(Path(args.out))
        print(f"wrote {Path(args.out) / 'index.html'}")


if __name__ == "__main__":
    main()
