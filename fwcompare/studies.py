"""The studies: each names its notebook, its tasks and its grid."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import env
from .spec import RunSpec


def grid_cells(params: dict, study: str, task: str, *, models=None, modes=None, dtypes=None,
               batch_sizes=None, seq_lens=None) -> list[RunSpec]:
    """Every (model, framework, mode, precision, batch, sequence) cell of a grid;
    each axis defaults to the params key of the same name."""
    threads = params["threads"] or env.default_threads()
    modes = modes or params["modes"]
    return [RunSpec(study=study, model=model, framework=fw, mode=mode,
                    device=params["device"], dtype=dtype, batch_size=b,
                    seq_len=s, threads=threads, task=task)
            for model in (models or params["models"])
            for fw in params["frameworks"]
            for mode in modes[fw]
            for dtype in (dtypes or [params["dtype"]])
            for b in (batch_sizes or params["batch_sizes"])
            for s in (seq_lens or params["seq_lens"])]


def _mixed_precision_cells(params: dict) -> list[RunSpec]:
    """Inference over the grid in every precision; training (stability, then
    step time) of ``train_models`` in every precision at one size."""
    precisions = params["precisions"]
    return (grid_cells(params, "mixed_precision", "inference", dtypes=precisions)
            + grid_cells(params, "mixed_precision", "train", models=params["train_models"],
                         modes=params["train_modes"], dtypes=precisions,
                         batch_sizes=[params["train_batch_size"]],
                         seq_lens=[params["train_seq_len"]]))


def _distributed_cells(params: dict) -> list[RunSpec]:
    """Per framework and worker count, a weak-scaling cell (per_worker_batch on
    each worker) and a strong-scaling one (global_batch over all workers)."""
    local = max(params["workers"]) // len(params["hosts"])
    threads = params["threads"] or max(1, env.default_threads() // local)
    batch = {"weak": lambda w: params["per_worker_batch"] * w,
             "strong": lambda w: params["global_batch"]}
    return [RunSpec(study="distributed", model=model, framework=fw, mode=mode,
                    device=params["device"], dtype=params["dtype"], batch_size=batch[sc](w),
                    seq_len=params["seq_len"], threads=threads, task="train", workers=w,
                    scaling=sc)
            for model in params["models"]
            for fw in params["frameworks"]
            for mode in params["modes"][fw]
            for w in params["workers"]
            for sc in params["scaling"]]


@dataclass(frozen=True)
class Study:
    name: str
    title: str
    notebook: str
    tasks: tuple[str, ...]
    # Inference outputs compared with a float64 reference per cell (logits for decoders).
    precision_errors: bool = False
    # Every mode in a process of its own; compiled modes checked against eager per cell.
    acceleration: bool = False
    # Data-parallel: each (framework, mode, workers) launched as that many ranks.
    distributed: bool = False
    grid: Callable[[dict], list[RunSpec]] | None = None

    def cells(self, params: dict) -> list[RunSpec]:
        if self.grid:
            return self.grid(params)
        return grid_cells(params, self.name, self.tasks[0])


STUDIES = {
    "inference_sweep": Study("inference_sweep", "Inference sweep: latency, throughput and memory",
                             "inference_sweep.ipynb", ("inference",)),
    "training": Study("training", "Training: step time, memory and loss agreement",
                      "training.ipynb", ("train",)),
    "mixed_precision": Study("mixed_precision",
                             "Mixed precision: speed against numerical error",
                             "mixed_precision.ipynb", ("inference", "train"),
                             precision_errors=True, grid=_mixed_precision_cells),
    "acceleration": Study("acceleration",
                          "Acceleration: TorchScript, torch.compile, tf.function, XLA, jax.jit",
                          "acceleration.ipynb", ("inference",), acceleration=True),
    "distributed": Study("distributed",
                         "Distributed data-parallel: DDP against tf.distribute, 1 to N workers",
                         "distributed.ipynb", ("train",), distributed=True,
                         grid=_distributed_cells),
}
