"""The studies: each names its notebook, its params schema and its grid."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import env
from .spec import RunSpec


def inference_sweep_cells(params: dict, study: str = "inference_sweep") -> list[RunSpec]:
    threads = params["threads"] or env.default_threads()
    return [RunSpec(study=study, model=model, framework=fw, mode=mode,
                    device=params["device"], dtype=params["dtype"], batch_size=b,
                    seq_len=s, threads=threads, task="inference")
            for model in params["models"]
            for fw in params["frameworks"]
            for mode in params["modes"][fw]
            for b in params["batch_sizes"]
            for s in params["seq_lens"]]


@dataclass(frozen=True)
class Study:
    name: str
    title: str
    notebook: str
    cells: Callable[[dict], list[RunSpec]]


STUDIES = {
    "inference_sweep": Study("inference_sweep", "Inference sweep: latency, throughput and memory",
                             "inference_sweep.ipynb", inference_sweep_cells),
}
