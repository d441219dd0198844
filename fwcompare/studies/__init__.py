"""The studies: one module (or package) each, found through this registry.

A study module defines a :class:`~fwcompare.execution.study.Study` subclass and
holds an instance as ``STUDY``, which this registry registers; nothing outside
it branches on its name. ``STUDIES`` lists the registered studies in report
order.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from ..results.store import Columns, add_columns
from ..core.spec import add_axes, remove_axes
from ..execution.study import Study, module_file  # noqa: F401

STUDIES: dict[str, Study] = {}


def register(study: Study) -> Study:
    """Add a study to the registry (the built-in ones below; a study of one's
    own: its module, or the code that imports it, registers it)."""
    if not study.name:
        raise ValueError(f"{type(study).__name__} has no name")
    add_axes(study.axes)  # the cells' axes, then the results store's columns
    add_columns(study.columns)
    STUDIES[study.name] = study
    return study


def unregister(name: str) -> None:
    """Remove a study from the registry, and the cell axes no other registered
    study declares (its result columns stay: a column is only a name)."""
    study = STUDIES.pop(name, None)
    if study is not None and study.axes:
        kept = {a.name for s in STUDIES.values() for a in s.axes}
        remove_axes([a.name for a in study.axes if a.name not in kept])
        add_columns(Columns())  # the store's columns read the axes again


def load(name: str, module_file: str = "") -> Study:
    """The study ``name``; a study not built in is found by importing the file
    that defines it (in a worker process of a study registered elsewhere): the
    module registers it, or holds it at its top level (e.g. as ``STUDY``)."""
    if name not in STUDIES and module_file:
        spec = importlib.util.spec_from_file_location(f"_fwcompare_study_{name}", module_file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        found = [v for v in vars(module).values() if isinstance(v, Study) and v.name == name]
        if name not in STUDIES and found:
            register(found[0])
    if name not in STUDIES:
        raise KeyError(f"unknown study {name!r}; known: {', '.join(STUDIES)}")
    return STUDIES[name]


# The built-in studies, in report order: each module holds its study as
# ``STUDY`` and never imports this registry; the registry imports them.
from . import (inference_sweep, training, mixed_precision, acceleration, distributed,  # noqa: E402
               deployment, generation, memory, end_to_end)

for _module in (inference_sweep, training, mixed_precision, acceleration, distributed,
                deployment, generation, memory, end_to_end):
    register(_module.STUDY)
