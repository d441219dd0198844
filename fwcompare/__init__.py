"""fwcompare: trustworthy PyTorch / TensorFlow / JAX comparisons of Transformer models.

The names a notebook or script uses are here (``fwcompare.run_study``,
``load_results``, ``study_dir``, ``LAB``); each lives in its module and is
imported when first asked for, so that a worker importing one low module does
not import the runner.
"""
from __future__ import annotations

__version__ = "0.1.0"

_HOMES = {"run_study": "suite.api", "run_studies": "suite.api", "load_results": "results.store",
          "StudyResults": "results.store", "study_dir": "core.paths", "LAB": "core.paths"}


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'fwcompare' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)


def __dir__():
    return sorted([*globals(), *_HOMES])
