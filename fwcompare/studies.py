"""The studies: each names its notebook, its params schema and its grid."""
from __future__ import annotations

from dataclasses import dataclass

from . import env
from .spec import RunSpec


def grid_cells(params: dict, study: str, task: str) -> list[RunSpec]:
    """Every (model, framework, mode, batch, sequence) cell of a study's grid."""
    threads = params["threads"] or env.default_threads()
    return [RunSpec(study=study, model=model, framework=fw, mode=mode,
                    device=params["device"], dtype=params["dtype"], batch_size=b,
                    seq_len=s, threads=threads, task=task)
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
    task: str

    def cells(self, params: dict) -> list[RunSpec]:
        return grid_cells(params, self.name, self.task)


STUDIES = {
    "inference_sweep": Study("inference_sweep", "Inference sweep: latency, throughput and memory",
                             "inference_sweep.ipynb", "inference"),
    "training": Study("training", "Training: step time, memory and loss agreement",
                      "training.ipynb", "train"),
}
