"""Every path is built from the project root, never from the working directory.

``ROOT`` is the folder above the package: where its code lies (the workers'
``PYTHONPATH``, the source hash, the git commit). ``PROJECT`` is the folder
that holds ``params/`` and ``notebooks/``: ``ROOT`` in a source checkout, or
the checkout that ``FWCOMPARE_ROOT`` names. A copy installed elsewhere (into
site-packages, not editable) has neither folder beside it: its weights cache
goes to the user's cache folder ($XDG_CACHE_HOME/fwcompare on Linux, through
platformdirs) and its outputs to the user's data folder, never into
site-packages, and whatever needs params or notebooks calls ``require_checkout``,
which says what is missing and what to do. ``FWCOMPARE_CACHE`` and
``FWCOMPARE_OUTPUTS`` override the two folders in every case.
"""
from __future__ import annotations

import os
from pathlib import Path

import platformdirs

ROOT = Path(__file__).resolve().parents[2]
PROJECT = Path(os.environ.get("FWCOMPARE_ROOT") or ROOT).resolve()
NOTEBOOKS = PROJECT / "notebooks"
PARAMS = PROJECT / "params"
CHECKOUT_DIRS = {"params": PARAMS, "notebooks": NOTEBOOKS}


def is_checkout(project: Path = PROJECT) -> bool:
    """Whether ``project`` is a source checkout (it has params/ and notebooks/)."""
    return all((project / name).is_dir() for name in CHECKOUT_DIRS)


IN_CHECKOUT = is_checkout()
OUTPUTS = Path(os.environ.get("FWCOMPARE_OUTPUTS") or (
    PROJECT / "outputs" if IN_CHECKOUT
    else Path(platformdirs.user_data_dir("fwcompare", appauthor=False)) / "outputs"))
CACHE = Path(os.environ.get("FWCOMPARE_CACHE") or (
    PROJECT / ".cache" if IN_CHECKOUT
    else platformdirs.user_cache_dir("fwcompare", appauthor=False)))


class CheckoutError(FileNotFoundError):
    """The params or notebooks a command needs are not there (an installed copy)."""


def require_checkout(*names: str) -> None:
    """Raise ``CheckoutError`` unless the folders ``names`` (default: params and
    notebooks) exist in ``PROJECT``; the message names the missing folders,
    where they were looked for, and the two ways out."""
    missing = [n for n in names or CHECKOUT_DIRS if not CHECKOUT_DIRS[n].is_dir()]
    if not missing:
        return
    where = ("FWCOMPARE_ROOT" if os.environ.get("FWCOMPARE_ROOT")
             else "the folder above the fwcompare package")
    raise CheckoutError(
        f"{' and '.join(n + '/' for n in missing)} not found in {PROJECT} ({where}): "
        f"fwcompare's studies read their params files and notebooks from a source "
        f"checkout; run it from one (git clone the fwcompare repository, then `make setup` "
        f"there) or set FWCOMPARE_ROOT to a checkout's folder")


# The profile folder of notebooks run by hand (JupyterLab, nothing injected):
# outputs/lab/<study>, never a report's results (params.RUNTIME_KEYS).
LAB = "lab"


def study_dir(study: str, profile: str, output_dir: str | Path | None = None) -> Path:
    return Path(output_dir) if output_dir else OUTPUTS / profile / study
