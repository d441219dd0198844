"""Params of a study: schema, defaults and validation.

Papermill only warns on an unknown parameter, so every params file and every
run is checked here first: unknown keys (with the closest known key), wrong
types, unknown models, frameworks and modes, and non-positive sizes all fail
with a message naming the key, before anything is measured.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from . import models
from .spec import DEVICES, DIST_MODES, DTYPES, FRAMEWORKS, MODES, SCALINGS, TRAIN_MODES

# Set by `fwcompare report` for each notebook; not part of a params file.
RUNTIME_KEYS = {"profile": "quick", "output_dir": ""}


class ParamsError(ValueError):
    """One or more bad params; the message lists each, naming its key."""


@dataclass(frozen=True)
class Param:
    type: str  # int, float, str, bool, list[int], list[str], dict[str, list[str]]
    default: Any
    help: str
    check: Callable[[Any], str | None] | None = None  # returns a problem or None


def _positive(v):
    vals = v if isinstance(v, list) else [v]
    bad = [x for x in vals if not x > 0]
    return f"must be positive, got {bad[0]!r}" if bad else None


def _non_negative(v):
    return None if v >= 0 else f"must be >= 0, got {v!r}"


def _non_empty(v):
    return "must not be empty" if len(v) == 0 else None


def _one_of(allowed):
    def check(v):
        vals = v if isinstance(v, list) else [v]
        bad = [x for x in vals if x not in allowed]
        return (f"unknown value {bad[0]!r}; allowed: {', '.join(map(str, allowed))}"
                if bad else None)
    return check


def _all(*checks):
    def check(v):
        for c in checks:
            problem = c(v)
            if problem:
                return problem
        return None
    return check


def _models(v):
    for m in v:
        try:
            models.check_model(m)
        except models.ModelError as exc:
            return str(exc)
    return _non_empty(v)


def _modes_in(table: dict):
    def check(v):
        for fw, modes in v.items():
            if fw not in FRAMEWORKS:
                return f"unknown framework {fw!r}; known: {', '.join(FRAMEWORKS)}"
            for mode in modes:
                if mode not in table[fw]:
                    return f"unknown mode {mode!r} for {fw}; allowed: {', '.join(table[fw])}"
        return None
    return check


TIMING = {
    "warmup_iters": Param("int", 2, "warm-up calls before sampling (at least)", _non_negative),
    "warmup_s": Param("float", 0.3, "warm-up seconds before sampling (at least)", _non_negative),
    "min_iters": Param("int", 7, "samples per cell (at least)", _positive),
    "min_time_s": Param("float", 1.0, "sampling seconds per cell (at least)", _positive),
    "max_time_s": Param("float", 8.0, "sampling seconds per cell (at most; past it the cell is marked not converged)", _positive),
    "target_rel_ci": Param("float", 0.02, "stop once the 95% CI half-width of the median is within this share of it", _positive),
}

def _float32_only(v):
    if v == "float32":
        return None
    hint = " (reduced precisions: the mixed_precision study)" if v in DTYPES else ""
    return f"unknown value {v!r}; allowed: float32{hint}"


def _grid(models_default, modes_default, modes_table, batch_default, seq_default,
          timeout_default) -> dict[str, Param]:
    """The keys every study shares: what to run, where, and how to time it."""
    return {
        "models": Param("list[str]", models_default,
                        "zoo names or local checkpoint directories", _models),
        "frameworks": Param("list[str]", list(FRAMEWORKS), "frameworks to compare",
                            _all(_non_empty, _one_of(FRAMEWORKS))),
        "modes": Param("dict[str, list[str]]", modes_default, "modes per framework",
                       _modes_in(modes_table)),
        "batch_sizes": Param("list[int]", batch_default, "batch sizes",
                             _all(_non_empty, _positive)),
        "seq_lens": Param("list[int]", seq_default, "sequence lengths in tokens",
                          _all(_non_empty, _positive)),
        "device": Param("str", "cpu", "cpu or gpu", _one_of(DEVICES)),
        "dtype": Param("str", "float32", "compute dtype (other precisions: the mixed_precision study)", _float32_only),
        "threads": Param("int", 0, "intra-op threads for every framework (0: all available cores)", _non_negative),
        "rounds": Param("int", 1, "run the groups this many times, alternating order", _positive),
        "seed": Param("int", 0, "seed of weights and token ids", _non_negative),
        "group_timeout_s": Param("float", timeout_default, "seconds a (framework, model) group may run before it is stopped", _positive),
        "cell_timeout_s": Param("float", 900.0, "seconds one cell's measurement (timing, memory pass) may run before it is stopped as timeout; the group's other cells go on", _positive),
    }


INFERENCE_SWEEP = {
    **_grid(["bert-base-cased", "gpt2", "distilbert-base-uncased"],
            {"torch": ["eager"], "tensorflow": ["eager", "graph"], "jax": ["jit"]}, MODES,
            [1, 2], [32, 128], 1800.0),
    "equiv_tol": Param("float", 1e-4, "max abs error against the PyTorch reference before a cell is flagged not_equivalent", _positive),
    **TIMING,
}

TRAINING = {
    **_grid(["bert-base-cased", "gpt2"],
            {"torch": ["eager"], "tensorflow": ["graph", "xla"], "jax": ["jit"]}, TRAIN_MODES,
            [2], [64], 1800.0),
    "learning_rate": Param("float", 1e-4, "AdamW learning rate (every framework)", _positive),
    "weight_decay": Param("float", 0.01, "AdamW decoupled weight decay", _non_negative),
    "beta1": Param("float", 0.9, "AdamW beta1", _positive),
    "beta2": Param("float", 0.999, "AdamW beta2", _positive),
    "eps": Param("float", 1e-8, "AdamW epsilon", _positive),
    "accumulation_steps": Param("int", 1, "micro-batches per optimizer step (divides every batch size)", _positive),
    "agreement_steps": Param("int", 5, "training steps on a fixed batch whose losses are compared before timing", _positive),
    "loss_tol": Param("float", 1e-4, "max abs difference of the first loss from PyTorch's before a framework is flagged", _positive),
    "loss_curve_rtol": Param("float", 1e-2, "max relative difference of any agreement-step loss from PyTorch's", _positive),
    **TIMING,
}

def _has_float32(v):
    return None if "float32" in v else "must include float32 (the baseline of every speed-up and loss curve)"


_FRAMEWORK_MODES = {"torch": ["eager"], "tensorflow": ["graph"], "jax": ["jit"]}

MIXED_PRECISION = {
    **{k: p for k, p in _grid(["all-minilm-l6-v2", "bert-base-cased"], _FRAMEWORK_MODES, MODES, [1, 8],
                              [128], 1800.0).items() if k != "dtype"},
    "precisions": Param("list[str]", ["float32", "tf32", "bfloat16", "float16"],
                        "float32, tf32 (NVIDIA GPUs only), and bfloat16 / float16 as each framework's mixed precision",
                        _all(_non_empty, _one_of(DTYPES), _has_float32)),
    "equiv_tol": INFERENCE_SWEEP["equiv_tol"],
    "mp_equiv_rtol": Param("float", 0.1, "relative L2 error against float64 on the gate batch above which a reduced-precision forward is flagged not_equivalent (a sanity bound against wrong weights or casts, not rounding)", _positive),
    "train_models": Param("list[str]", ["all-minilm-l6-v2"], "models trained in every precision (stability, then step time); [] for none", lambda v: _models(v) if v else None),
    "train_modes": Param("dict[str, list[str]]", _FRAMEWORK_MODES, "training modes per framework", _modes_in(TRAIN_MODES)),
    "train_batch_size": Param("int", 8, "batch size of the timed training cells", _positive),
    "train_seq_len": Param("int", 64, "sequence length of the timed training cells", _positive),
    "stability_steps": Param("int", 30, "training steps per precision from identical weights on one fixed batch: the loss curves compared", _positive),
    **{k: TRAINING[k] for k in ("learning_rate", "weight_decay", "beta1", "beta2", "eps",
                                "loss_tol", "loss_curve_rtol")},
    "mp_loss_rtol": Param("float", 0.05, "relative difference of a reduced precision's first loss from PyTorch float32's above which it is flagged not_equivalent", _positive),
    **TIMING,
}

def _eager_in_each(v):
    missing = [fw for fw, modes in v.items() if "eager" not in modes]
    return (f"must include eager for {', '.join(missing)} (the baseline of every speed-up "
            "and the reference each compiled output is checked against)" if missing else None)


ACCELERATION = {
    **_grid(["distilbert-base-uncased"],
            {"torch": ["eager", "torchscript", "compile"], "tensorflow": ["eager", "graph", "xla"],
             "jax": ["eager", "jit"]}, MODES, [1, 8], [16, 128], 1800.0),
    "equiv_tol": INFERENCE_SWEEP["equiv_tol"],
    "accel_tol": Param("float", 1e-4, "max abs error of a compiled mode's output against the same framework's eager output before the cell is flagged not_equivalent", _positive),
    "torch_compile_mode": Param("str", "default", "torch.compile mode", _one_of(["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"])),
    "torch_compile_dynamic": Param("str", "auto", "torch.compile dynamic shapes: auto (recompile as dynamic after a shape changes), true, false", _one_of(["auto", "true", "false"])),
    **TIMING,
}
ACCELERATION["modes"] = Param("dict[str, list[str]]", ACCELERATION["modes"].default,
                              "modes per framework; eager is required in each (the baseline)",
                              _all(_modes_in(MODES), _eager_in_each))

def _dist_frameworks(v):
    bad = [fw for fw in v if fw not in DIST_MODES]
    if not bad:
        return None
    if bad[0] == "jax":
        return ("'jax' has no data-parallel launcher here yet (JAX's multi-process API is "
                f"optional in this study); allowed: {', '.join(DIST_MODES)}")
    return f"unknown value {bad[0]!r}; allowed: {', '.join(DIST_MODES)}"


def _dist_modes(v):
    problem = _dist_frameworks(list(v))
    if problem:
        return problem
    return _modes_in(DIST_MODES)(v)


DISTRIBUTED = {
    **{k: p for k, p in _grid(["distilbert-base-uncased"], {"torch": ["eager"], "tensorflow": ["graph"]},
                              DIST_MODES, [4], [64], 900.0).items()
       if k not in ("batch_sizes", "seq_lens")},
    "workers": Param("list[int]", [1, 2], "worker processes of each cell (1..N); the smallest is the baseline of speed-up and efficiency", _all(_non_empty, _positive)),
    "scaling": Param("list[str]", list(SCALINGS), "weak: per_worker_batch on every worker (the global batch grows with workers); strong: global_batch split over the workers", _all(_non_empty, _one_of(SCALINGS))),
    "per_worker_batch": Param("int", 4, "weak scaling: samples per worker per step", _positive),
    "global_batch": Param("int", 8, "strong scaling: samples per step over all workers (a multiple of every workers value)", _positive),
    "seq_len": Param("int", 64, "sequence length in tokens", _positive),
    **{k: TRAINING[k] for k in ("learning_rate", "weight_decay", "beta1", "beta2", "eps",
                                "agreement_steps", "loss_tol", "loss_curve_rtol")},
    "weight_tol": Param("float", 1e-6, "max abs difference of any weight across ranks (after the agreement steps and after each cell) before the cells are flagged not_equivalent", _non_negative),
    "allreduce_repeats": Param("int", 5, "all-reduces of one step's gradients timed alone per cell", _positive),
    "hosts": Param("list[str]", ["127.0.0.1"], "hosts taking part, node 0 first (rank 0, torchrun's rendezvous); one entry: this machine, workers on loopback", _non_empty),
    "node_rank": Param("int", 0, "this host's index in hosts: run the same study on every host, each with its own node_rank", _non_negative),
    "master_port": Param("int", 0, "torchrun's rendezvous port on hosts[0] (TensorFlow worker i listens on master_port+1+i); 0: free ports found at launch (one host only)", _non_negative),
    **TIMING,
}
DISTRIBUTED["frameworks"] = Param("list[str]", ["torch", "tensorflow"], "frameworks to compare",
                                  _all(_non_empty, _dist_frameworks))
DISTRIBUTED["modes"] = Param("dict[str, list[str]]", DISTRIBUTED["modes"].default,
                             "engine per framework: torch eager (DistributedDataParallel), "
                             "tensorflow graph (MultiWorkerMirroredStrategy)", _dist_modes)
DISTRIBUTED["threads"] = Param("int", 0, "intra-op threads per worker, each worker on cores of its own (0: this host's cores / its most workers)", _non_negative)
DISTRIBUTED["group_timeout_s"] = Param("float", 900.0, "seconds one launch (a framework at one worker count) may run before every rank is stopped", _positive)


def _distributed_problems(full: dict) -> list[str]:
    problems = []
    hosts = full["hosts"]
    if "strong" in full["scaling"]:
        uneven = [w for w in full["workers"] if full["global_batch"] % w]
        if uneven:
            problems.append(f"key 'global_batch': {full['global_batch']} does not split evenly "
                            f"over {', '.join(map(str, uneven))} workers")
    uneven = [w for w in full["workers"] if w % len(hosts)]
    if uneven:
        problems.append(f"key 'workers': {', '.join(map(str, uneven))} cannot be spread evenly "
                        f"over {len(hosts)} hosts")
    if full["node_rank"] >= len(hosts):
        problems.append(f"key 'node_rank': {full['node_rank']} is not an index of hosts "
                        f"({len(hosts)} given)")
    if len(hosts) > 1 and not full["master_port"]:
        problems.append("key 'master_port': several hosts need a fixed port (0 picks a free "
                        "port on one host only)")
    return problems


SCHEMAS: dict[str, dict[str, Param]] = {"inference_sweep": INFERENCE_SWEEP,
                                        "training": TRAINING,
                                        "mixed_precision": MIXED_PRECISION,
                                        "acceleration": ACCELERATION,
                                        "distributed": DISTRIBUTED}


def _type_ok(value, type_: str) -> bool:
    if type_ == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if type_ == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if type_ == "str":
        return isinstance(value, str)
    if type_ == "bool":
        return isinstance(value, bool)
    if type_.startswith("list[") and type_.endswith("]"):
        return isinstance(value, list) and all(_type_ok(v, type_[5:-1]) for v in value)
    if type_ == "dict[str, list[str]]":
        return isinstance(value, dict) and all(
            isinstance(k, str) and _type_ok(v, "list[str]") for k, v in value.items())
    raise ValueError(f"unknown param type {type_}")


def schema(study: str) -> dict[str, Param]:
    if study not in SCHEMAS:
        raise ParamsError(f"unknown study {study!r}; known: {', '.join(SCHEMAS)}")
    return SCHEMAS[study]


def defaults(study: str) -> dict:
    return {k: p.default for k, p in schema(study).items()}


def validate(study: str, params: dict, source: str = "params") -> dict:
    """Return the params with defaults filled in, or raise ParamsError."""
    sch = schema(study)
    if not isinstance(params, dict):
        raise ParamsError(f"{source}: expected a mapping of keys to values, got {type(params).__name__}")
    problems = []
    for key in params:
        if key not in sch:
            close = difflib.get_close_matches(str(key), list(sch), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"unknown key {key!r}{hint}; allowed keys: {', '.join(sch)}")
    full = {**defaults(study), **{k: v for k, v in params.items() if k in sch}}
    for key, value in full.items():
        p = sch[key]
        if p.type == "float" and isinstance(value, int) and not isinstance(value, bool):
            full[key] = value = float(value)
        if not _type_ok(value, p.type):
            problems.append(f"key {key!r}: expected {p.type}, got {type(value).__name__} {value!r}")
            continue
        problem = p.check(value) if p.check else None
        if problem:
            problems.append(f"key {key!r}: {problem}")
    if not problems and "modes" in full:
        for key in ("modes", "train_modes"):
            missing = [fw for fw in full["frameworks"] if key in full and not full[key].get(fw)]
            if missing:
                problems.append(f"key {key!r}: no modes given for framework(s) {', '.join(missing)}")
        if full["min_time_s"] > full["max_time_s"]:
            problems.append("key 'max_time_s': must be >= min_time_s")
        acc = full.get("accumulation_steps", 1)
        uneven = [b for b in full.get("batch_sizes", []) if b % acc]
        if uneven:
            problems.append(f"key 'accumulation_steps': {acc} does not divide batch size(s) "
                            f"{', '.join(map(str, uneven))}")
    if not problems and study == "distributed":
        problems += _distributed_problems(full)
    if problems:
        if len(problems) == 1:
            raise ParamsError(f"{source}: {problems[0]}")
        raise ParamsError(f"{source}: {len(problems)} problems\n  " + "\n  ".join(problems))
    return full


def load_file(path: Path | str, study: str | None = None) -> dict:
    """Read and validate a params file; the study defaults to its folder name."""
    path = Path(path)
    study = study or path.parent.name
    if study not in SCHEMAS:
        raise ParamsError(f"{path}: cannot tell which study this params file is for; put it "
                          f"under params/<study>/ or name the study ({', '.join(SCHEMAS)})")
    return validate(study, read_yaml(path, "params"), source=str(path))


def read_yaml(path: Path, kind: str, error: type[Exception] = ParamsError):
    """A YAML file's content ({} when empty), or ``error`` naming the file."""
    if not path.is_file():
        raise error(f"{path}: no such {kind} file")
    try:
        return yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise error(f"{path}: not valid YAML: {exc}") from None


def collect(study: str, namespace: dict) -> dict:
    """The study's params from a notebook's globals (after papermill injection)."""
    return {k: namespace[k] for k in schema(study) if k in namespace}


def parameters_cell(study: str) -> str:
    """The source of a study notebook's parameters cell: every schema key with
    its default and help, then the keys `fwcompare report` sets."""
    lines = [f"# Parameters: papermill injects params/{study}/<profile>.yaml after this cell."]
    lines += [f"{key} = {p.default!r}  # {p.help}" for key, p in schema(study).items()]
    lines += ["profile = 'quick'  # set by `fwcompare report`: names the output folder",
              f"output_dir = ''  # set by `fwcompare report`; empty: outputs/<profile>/{study}"]
    return "\n".join(lines)
