"""Loading an example dataflow module from a path (``sparkflux run examples/netmon.py``).

An example module provides ``add_options(parser)``, ``options(args)`` (its option object,
which carries ``events``), ``build(options) -> Dataflow`` and, for checking, ``reference(spark,
options)`` returning the expected output as a Spark DataFrame. The module is registered with
cloudpickle *by value*, so functions and classes it defines reach the Spark sites even though
the sites cannot import it by name. Its directory goes on the driver's ``sys.path``, as for
``python FILE``, so it may import modules beside it (``spark/shipping.py`` ships those to the
executors).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from sparkflux.model.errors import PlanError

REQUIRED = ("add_options", "options", "build")


def load_example(path: str | Path) -> ModuleType:
    p = Path(path)
    if not p.is_file():
        raise PlanError(f"no example file at {p} (try examples/netmon.py)")
    name = f"sparkflux_example_{p.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise PlanError(f"cannot load {p} as a Python module")
    module = importlib.util.module_from_spec(spec)
    directory = str(p.resolve().parent)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    missing = [f for f in REQUIRED if not hasattr(module, f)]
    if missing:
        raise PlanError(f"{p} is not a sparkflux example: it lacks {', '.join(missing)}")
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    return module
