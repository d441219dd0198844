"""Why a claim is not measured here: the reason the report's first page counts
(a framework or package this machine lacks, a study none of whose cells ran,
what the profile's params leave out, a GPU claim without GPU cells), and the
claim's note that says it."""
from __future__ import annotations

from pathlib import Path

from ..core.env import lacks_package
from ..results.judging import Claim, StudyData, _devices


def _nothing_ran(data: StudyData) -> str:
    """The one reason, where every stored cell of a study is ``unsupported``
    with the same one (distributed on one GPU: "needs 2 GPUs ..."); "" else."""
    r = data.results
    if not data.present or "status" not in r or not (r["status"] == "unsupported").all():
        return ""
    reasons = set(r["error"].fillna(""))
    return reasons.pop() if len(reasons) == 1 else ""


# The reasons a claim is "not measured here" that the report's first page counts
# (its ``unmeasured`` column), beside those of ``_nothing_ran`` and ``_lacking``.
NO_RESULTS = "its study has no results for this profile"
LEFT_OUT = "left out by this profile's params"
NO_GPU = "a GPU claim, and this run has no GPU cells"
NO_FIGURE = "no figure from the cells that ran"


def why_unmeasured(data: StudyData, claim: Claim, note: str) -> tuple[str, str]:
    """Why a claim is not measured here: a short reason, the same for every
    claim it stops (the report's first page counts them: ``unmeasured``), and
    the claim's note (``note``: the metric's own, kept where no reason of the
    run's says more)."""
    if not data.present:
        return NO_RESULTS, note
    if ran := _nothing_ran(data):  # every cell of the study unsupported, one reason
        return ran, f"none of the study's cells ran here: {ran}"
    if lacking := _lacking(data, claim):  # a framework or model package missing
        return lacking, lacking
    if left := _left_out(data, claim):  # the params plan none of its cells
        return LEFT_OUT, left
    if claim.hardware == "gpu" and not ran_on_gpu(data):
        return NO_GPU, note
    return NO_FIGURE, note or "no figure could be computed"


def _lacking(data: StudyData, claim: Claim) -> str:
    """Why the claim's cells could not run here, where that is a framework or
    model package this machine lacks ("tensorflow: not installed here (...)",
    each reason once), or ""."""
    r = data.results
    if not data.present or not {"framework", "mode", "device", "status", "error"} <= set(r.columns):
        return ""
    # the cells a claim names: variants ("tensorflow/graph") or frameworks (distributed's
    # {frameworks: [...]}); a claim that names neither (a precision, a technique) gets none
    named = [v for x in claim.cells.values() for v in (x if isinstance(x, list) else [x])
             if isinstance(v, str)]
    variants = {v for v in named if "/" in v}
    fws = set(claim.cells.get("frameworks") or [])
    if not variants and not fws:
        return ""
    mine = ((r["framework"].astype(str) + "/" + r["mode"].astype(str)).isin(variants)
            | r["framework"].isin(fws)) & r["device"].isin(_devices(claim.hardware))
    if claim.models:
        mine &= r["model"].isin(claim.models)
    lacking = r[mine & (r["status"] == "unsupported") & r["error"].map(lacks_package)]
    return "; ".join(dict.fromkeys(lacking["error"]))


# Profiles a left-out claim's note does not offer: the tests' tiny models judge nothing
# a reader should take as a verdict.
TEST_PROFILES = ("smoke",)


def _planned(study: str, params, devices) -> tuple[set[str], set[str]] | None:
    """The framework/mode variants and the models ``params`` (a study's raw
    params, or a params file's path) plan on ``devices``; None where they
    plan no cell there or are not valid params of the study."""
    from ..plan.schema import ParamsError, read_yaml
    from ..studies import STUDIES

    st = STUDIES[study]
    try:
        if isinstance(params, Path):
            params = read_yaml(params, "params")
        specs = [s for s in st.cells(st.validate(params, "params")) if s.device in devices]
    except (ParamsError, KeyError, TypeError, ValueError):
        return None
    if not specs:
        return None
    return {f"{s.framework}/{s.mode}" for s in specs}, {s.model for s in specs}


def _left_out(data: StudyData, claim: Claim) -> str:
    """Why a claim is not measured where the run's own params leave out what
    it compares on its hardware (the gpu profile leaves gpt2-xl, and JAX
    outside distributed, to full): the variants missing, or its models where
    none of them is planned, and the profiles of ``params/`` that plan them
    (the tests' own left out); "" where the params plan them, plan no cell
    on the claim's hardware at all, or were not stored."""
    import functools

    from ..core.paths import PARAMS

    if not data.params:
        return ""
    devices = _devices(claim.hardware)

    def missing(planned) -> list[str]:
        variants, models = planned
        # a claim's models are alternatives (its metric reads the cells of any of them)
        return ([v for v in claim.variants if v not in variants]
                + (list(claim.models) if claim.models and not set(claim.models) & models
                   else []))

    here = _planned(claim.study, data.params, devices)
    if here is None or not (gone := missing(here)):
        return ""
    plan = functools.partial(_planned, claim.study, devices=devices)
    others = [f.stem for f in sorted((PARAMS / claim.study).glob("*.yaml"))
              if f.stem not in TEST_PROFILES and (p := plan(f)) is not None and not missing(p)]
    where = f" on {devices[0]}" if len(devices) == 1 else ""
    text = f"this run's params leave out {_and(gone)}{where}"
    if others:
        text += (f"; the {_and(others)} profile{'s measure' if len(others) > 1 else ' measures'} "
                 f"{'them' if len(gone) > 1 else 'it'}")
    return text


def _and(words: list[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return " and ".join(filter(None, [", ".join(words[:-1]), words[-1]]))


def ran_on_gpu(data: StudyData) -> bool:
    r = data.results
    return bool(data.present and "device" in r and (r["device"] == "gpu").any())
