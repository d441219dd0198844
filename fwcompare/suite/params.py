"""Params of a study, checked at the entry points (``fwcompare run``,
``report``, ``validate``, a notebook's ``run_study``): a params file, or a
profile's file with the command line's overrides, against the schema of the
study the registry names (:mod:`fwcompare.plan.schema` is the schema language).
"""
from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path

import yaml

from ..core import models
from ..core.paths import LAB, PARAMS
from ..plan.schema import (PRECISION_HINT, TIMING, Param, ParamsError, all_of,  # noqa: F401
                           check_models, enough_for_ci, float32_only, grid_params, modes_in,
                           non_empty, non_negative, one_of, positive, read_yaml, replace_param,
                           timing_config)

# Set by `fwcompare report` in every study notebook; not part of a params file.
# A notebook run by hand (JupyterLab, nothing injected) keeps these defaults:
# profile LAB, so its results go to outputs/lab/<study>, never to a report's.
RUNTIME_KEYS = {"profile": LAB, "output_dir": ""}

# The time a profile's whole report is sized to, from its first line to its index
# (README: the quick report's 20 minutes on the 2-core Xeon it was sized on; the gpu
# report's 10 on one H100): its extra rounds for doubtful claims start only where they
# fit in it with the notebooks' time after them (``fwcompare report --budget``).
REPORT_BUDGET_S = {"quick": 20 * 60.0, "gpu": 10 * 60.0}


def study_named(study: str):
    """The registered study of that name, or ParamsError naming the known ones."""
    from ..studies import STUDIES

    if study not in STUDIES:
        raise ParamsError(f"unknown study {study!r}; known: {', '.join(STUDIES)}")
    return STUDIES[study]


def schema(study: str) -> dict[str, Param]:
    return study_named(study).schema()


def defaults(study: str) -> dict:
    return {k: p.default for k, p in schema(study).items()}


def validate(study: str, params, source: str = "params"):
    """The study's typed params (defaults filled in), or ParamsError; typed
    params of that study pass through unchecked (``Study.validate``)."""
    try:
        return study_named(study).validate(params, source)
    except ParamsError as exc:
        if PRECISION_HINT not in str(exc):
            raise
        from ..studies import STUDIES

        takers = [name for name, st in STUDIES.items() if "precisions" in st.schema()]
        raise ParamsError(str(exc).replace(PRECISION_HINT, f" (reduced precisions: the "
                                           f"{', '.join(takers)} study)")) from None


def profile_file(study: str, profile: str, root: Path = PARAMS) -> Path:
    """``params/STUDY/PROFILE.yaml`` (under ``root``); a ParamsError naming
    the profiles the study has where it has no such file (a typo:
    ``--profile smok``)."""
    path = root / study / f"{profile}.yaml"
    if not path.is_file():
        known = sorted(f.stem for f in (root / study).glob("*.yaml"))
        close = difflib.get_close_matches(profile, known, n=1)
        raise ParamsError(f"no profile {profile!r} for study {study} (no {path})"
                          + (f"; did you mean {close[0]!r}?" if close else "")
                          + f"; its profiles: {', '.join(known) or 'none'} "
                          "(`fwcompare list profiles`)")
    return path


def load_file(path: Path | str, study: str | None = None):
    """Read and validate a params file (the study's typed params); the study
    defaults to its folder name. An empty file, or one with a key written
    twice, is refused."""
    from ..studies import STUDIES

    path = Path(path)
    study = study or path.parent.name
    if study not in STUDIES:
        raise ParamsError(f"{path}: cannot tell which study this params file is for; put it "
                          f"under params/<study>/ or name the study ({', '.join(STUDIES)})")
    return validate(study, read_yaml(path, "params", empty_ok=False), source=str(path))


# -- overrides from the command line ---------------------------------------------------
# ``fwcompare run|report --models a,b --batch-sizes 1,8 --set key=value``: merged
# into a profile's params file and checked by :func:`validate` as the file is.
# Their results go to a folder of their own (:func:`overridden_profile`), never
# into the profile's, which a report judges.

# The list flags: the params key each sets, and whether its items are YAML
# scalars (numbers) or taken as written (names and paths).
LIST_FLAGS = {"models": ("--models", False), "frameworks": ("--frameworks", False),
              "batch_sizes": ("--batch-sizes", True), "seq_lens": ("--seq-lens", True)}


def _yaml_value(text: str, what: str):
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ParamsError(f"{what}: not a YAML value: {' '.join(str(exc).split())}") from None


def command_line_overrides(lists: dict[str, str | None], sets: list[str]) -> dict:
    """The params a command line sets: ``lists`` maps a :data:`LIST_FLAGS` key
    to its comma-separated text (None: not given), ``sets`` holds each
    ``--set KEY=VALUE`` (VALUE in YAML). A key given twice, or a ``--set``
    without ``=``, is a ParamsError naming it; the values' types and ranges
    are :func:`validate`'s to check."""
    out: dict = {}
    given_by: dict[str, str] = {}
    for key, text in lists.items():
        if text is None:
            continue
        flag, numeric = LIST_FLAGS[key]
        items = [t.strip() for t in text.split(",")]
        if key == "models":  # a checkpoint path, from the folder the command runs in
            items = [str(Path(t).expanduser().resolve()) if models.is_path(t) else t
                     for t in items]
        out[key] = [_yaml_value(t, f"{flag} {text}") if numeric else t for t in items]
        given_by[key] = flag
    for item in sets:
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ParamsError(f"--set {item!r}: expected KEY=VALUE (e.g. --set rounds=3)")
        if key in out:
            raise ParamsError(f"--set {item}: key {key!r} is given twice (also by "
                              f"{given_by[key]})")
        out[key] = _yaml_value(text, f"--set {item}")
        given_by[key] = "--set"
    return out


def describe_overrides(overrides: dict) -> str:
    return "the command line's " + ", ".join(f"{k}={v!r}" for k, v in overrides.items())


def merge_overrides(given: dict, overrides: dict) -> dict:
    """A params file's values (``given``) with the command line's over them. A
    mapping over a mapping is merged key by key: ``--set 'modes={torch:
    [eager, compile]}'`` sets PyTorch's modes and keeps the other frameworks'
    (``--frameworks`` chooses which run)."""
    return {**given, **{k: {**given[k], **v} if isinstance(v, dict)
                        and isinstance(given.get(k), dict) else v
                        for k, v in overrides.items()}}


def with_overrides(study: str, path: Path, overrides: dict):
    """The params file at ``path`` with ``overrides`` merged in, validated
    once; a problem names the key and whether the file or the command line
    gave it (the file alone is checked again only then, to tell which)."""
    if not overrides:
        return load_file(path, study)
    try:
        return validate(study, merge_overrides(read_yaml(path, "params"), overrides),
                        source=f"{path} with {describe_overrides(overrides)}")
    except ParamsError:
        if read_yaml(path, "params"):  # a problem of the file itself: said as the file's
            load_file(path, study)
        raise


def overrides_by_study(studies: list[str], overrides: dict) -> dict[str, dict]:
    """``fwcompare report``'s overrides per study: each key goes to every
    chosen study whose params have it; a key none has is a ParamsError."""
    keys = {s: set(schema(s)) for s in studies}
    known = set().union(*keys.values()) if keys else set()
    unknown = [k for k in overrides if k not in known]
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ParamsError(f"command line: key {unknown[0]!r} is in no chosen study's params"
                          f"{hint}; a study's keys, with their help, are its notebook's "
                          f"parameters cell (notebooks/STUDY.ipynb)")
    return {s: {k: v for k, v in overrides.items() if k in keys[s]} for s in studies}


def overridden_profile(profile: str, overrides: dict) -> str:
    """The output folder (and profile label) of a run with overrides:
    ``<profile>-<8 hex digits of the overrides>``, so that the same question
    asked again resumes there and no other run's results mix in."""
    if not overrides:
        return profile
    blob = json.dumps(overrides, sort_keys=True, default=str)
    return f"{profile}-{hashlib.sha1(blob.encode()).hexdigest()[:8]}"


def collect(study: str, namespace: dict) -> dict:
    """The study's params from a notebook's globals (after papermill injection)."""
    return {k: namespace[k] for k in schema(study) if k in namespace}


def parameters_cell(study: str) -> str:
    """The source of a study notebook's parameters cell: every schema key with
    its default and help, then the keys `fwcompare report` sets."""
    lines = [f"# Parameters: `fwcompare report` injects params/{study}/<profile>.yaml after this "
             f"cell. Run by hand (JupyterLab): these values, results in outputs/lab/{study}."]
    lines += [f"{key} = {p.default!r}  # {p.help}" for key, p in schema(study).items()]
    lines += [f"profile = {RUNTIME_KEYS['profile']!r}  # set by `fwcompare report`: names the "
              f"output folder ('lab': run by hand, never a report's folder)",
              f"output_dir = ''  # set by `fwcompare report`; empty: outputs/<profile>/{study}"]
    return "\n".join(lines)
