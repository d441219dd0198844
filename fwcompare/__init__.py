"""fwcompare: trustworthy PyTorch / TensorFlow / JAX comparisons of Transformer models."""
from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

__version__ = "0.1.0"


@dataclass
class StudyResults:
    """What a study run leaves behind: one row per cell, raw samples, manifest."""

    results: "object"   # pandas.DataFrame, one row per (cell, round)
    samples: "object"   # pandas.DataFrame, raw samples
    manifest: dict
    output_dir: Path
    losses: "object" = None  # pandas.DataFrame, training studies: loss per agreement step

    @property
    def figures_dir(self) -> Path:
        return self.output_dir / "figures"


# The profile folder of notebooks run by hand (JupyterLab, nothing injected):
# outputs/lab/<study>, never a report's results (params.RUNTIME_KEYS).
LAB = "lab"


def study_dir(study: str, profile: str, output_dir: str | Path | None = None) -> Path:
    from .paths import OUTPUTS

    return Path(output_dir) if output_dir else OUTPUTS / profile / study


def load_results(output_dir: str | Path) -> StudyResults:
    from .results import ResultStore

    output_dir = Path(output_dir)
    store = ResultStore(output_dir / "results")
    env_file = store.dir / "env.json"
    manifest = json.loads(env_file.read_text()) if env_file.exists() else {}
    return StudyResults(store.load(), store.load_samples(), manifest, output_dir,
                        store.load_losses())


def run_study(study: str, params: dict | None = None, *, profile: str = "adhoc",
              output_dir: str | Path | None = None, progress: bool = True,
              cells: list | None = None, servers=None) -> StudyResults:
    """Validate params, run (or resume) every cell of ``study`` (or only
    ``cells``, a subset of them: a shard, fwcompare.shard), return its results.
    ``servers``: fork servers to share (``fwcompare report`` keeps one set for
    all its studies); by default the run starts its own and closes them."""
    from .forkserver import ForkServers
    from .params import study_named, validate
    from .runner import Runner

    params = validate(study, params or {}, source=f"{study} params")
    if params.get("device") == "gpu":  # stop before hours of unsupported cells
        from .doctor import require

        require(list(params["frameworks"]), "gpu")
    out = study_dir(study, profile, output_dir)
    st = study_named(study)
    whole = cells is None
    cells = st.cells(params) if whole else list(cells)
    # What it will take, before it starts (``run --dry-run`` stops here); a subset
    # (a shard) prints its own plan instead.
    if progress and whole:
        from .estimate import estimate

        print(estimate(study, params, out / "results").text(), flush=True)
    with contextlib.nullcontext(servers) if servers is not None else ForkServers(
            out / "results" / "work" / "jobs") as servers:  # shared by the tasks
        for task in st.tasks:
            if progress and len(st.tasks) > 1:
                print(f"{study}: {task} cells", flush=True)
            Runner(st, params, out / "results", profile=profile, progress=progress,
                   task=task, servers=servers).run([c for c in cells if c.task == task])
    return load_results(out)
