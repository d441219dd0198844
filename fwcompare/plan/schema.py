"""The language of a study's params: keys, types, defaults and checks.

Papermill only warns on an unknown parameter, so every params file and every
run is checked first: unknown keys (with the closest known key), wrong types,
unknown models, frameworks and modes, and non-positive sizes all fail with a
message naming the key, before anything is measured. A study module declares
its schema with these pieces (``grid_params``, ``TIMING``, ``Param``);
:mod:`fwcompare.suite.params` checks a params file against a study's schema at the
entry points.
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from ..core import models
from ..core.machine_load import BUSY_HOST
from .. import frameworks
from ..frameworks import BUILT_IN, FRAMEWORKS
from ..core.spec import DEVICES, DTYPES, SCHEDULES
from ..core.timing import TimingConfig


class ParamsError(ValueError):
    """One or more bad params; the message lists each, naming its key."""


@dataclass(frozen=True)
class Param:
    type: str  # int, float, str, bool, list[int], list[str], dict[str, list[str]]
    default: Any
    help: str
    check: Callable[[Any], str | None] | None = None  # returns a problem or None


def positive(v):
    vals = v if isinstance(v, list) else [v]
    bad = [x for x in vals if not x > 0]
    return f"must be positive, got {bad[0]!r}" if bad else None


def non_negative(v):
    return None if v >= 0 else f"must be >= 0, got {v!r}"


def non_empty(v):
    return "must not be empty" if len(v) == 0 else None


def one_of(allowed):
    def check(v):
        vals = v if isinstance(v, list) else [v]
        bad = [x for x in vals if x not in allowed]
        return (f"unknown value {bad[0]!r}; allowed: {', '.join(map(str, allowed))}"
                if bad else None)
    return check


def all_of(*checks):
    def check(v):
        for c in checks:
            problem = c(v)
            if problem:
                return problem
        return None
    return check


def check_models(v):
    for m in v:
        if models.not_installed(m):  # a known name: its cells say it, the rest runs
            continue
        try:
            models.check_model(m)
        except models.ModelError as exc:
            return str(exc)
    return non_empty(v)


def modes_in(table: dict):
    """Each framework's modes among ``table``'s (a live view such as
    frameworks.MODES, or a study's own), the frameworks registered now."""
    def check(v):
        for fw, modes in v.items():
            if fw not in FRAMEWORKS or fw not in table:
                known = [k for k in FRAMEWORKS if k in table]
                return f"unknown framework {fw!r}; known: {', '.join(known)}"
            for mode in modes:
                if mode not in table[fw]:
                    return f"unknown mode {mode!r} for {fw}; allowed: {', '.join(table[fw])}"
        return None
    return check


def enough_for_ci(v):
    """A cell that stops at ``min_iters`` samples (its ``max_time_s`` spent)
    must still have a 95% interval: with fewer samples it has none (NaN)."""
    from ..core.stats import fewest_for_median_ci

    n = fewest_for_median_ci(TimingConfig().confidence)
    return (None if v >= n else
            f"must be at least {n} (the fewest samples that give a 95% CI of the median), got {v!r}")


def _timing() -> dict[str, Param]:
    """The timing protocol's keys, their defaults from timing.TimingConfig (one source)."""
    d = TimingConfig()
    return {
        "warmup_iters": Param("int", d.warmup_iters, "warm-up calls before sampling (at least)", non_negative),
        "warmup_s": Param("float", d.warmup_s, "warm-up seconds before sampling (at least)", non_negative),
        "min_iters": Param("int", d.min_iters, "samples per cell (at least; 6 are the fewest with a 95% CI of the median)", enough_for_ci),
        "min_time_s": Param("float", d.min_time_s, "sampling seconds per cell (at least)", positive),
        "max_time_s": Param("float", d.max_time_s, "sampling seconds per cell (at most; past it the cell is marked not converged)", positive),
        "target_rel_ci": Param("float", d.target_rel_ci, "stop once the 95% CI half-width of the median is within this share of it", positive),
    }


TIMING = _timing()


def timing_config(params, schedule: str) -> TimingConfig:
    """The TimingConfig of a study's validated params under a task's
    ``schedule`` (``Study.schedule``: an interleaved one makes each block last
    at least ``block_s``)."""
    return TimingConfig(**{k: params[k] for k in TIMING},
                        min_block_s=params["block_s"] if schedule == "interleaved" else 0.0)


# Said where a study that runs float32 only is given another precision; the
# entry points (fwcompare.suite.params) name the registered studies that take one.
PRECISION_HINT = " (reduced precisions: a study with a 'precisions' key)"


def float32_only(v):
    if v == "float32":
        return None
    hint = PRECISION_HINT if v in DTYPES else ""
    return f"unknown value {v!r}; allowed: float32{hint}"


def grid_params(models_default, modes_default, modes_table, batch_default, seq_default,
                timeout_default, **options) -> dict[str, Param]:
    """The keys every study shares: what to run, where, and how long it may
    take, and every registered framework's shared options (``Framework.options``).
    ``options``: an option's default for this study, or None to leave its key
    out (``tf_autograph=None``: a study whose TensorFlow functions are its own,
    not the backend's steps; ``torch_malloc=None``: a study that sets the C
    allocator itself, the memory study's peaks)."""
    grid = {
        "models": Param("list[str]", models_default,
                        "zoo names or local checkpoint directories", check_models),
        "frameworks": Param("list[str]", list(BUILT_IN), "frameworks to compare",
                            all_of(non_empty, one_of(FRAMEWORKS))),
        "modes": Param("dict[str, list[str]]", modes_default, "modes per framework",
                       modes_in(modes_table)),
        "batch_sizes": Param("list[int]", batch_default, "batch sizes",
                             all_of(non_empty, positive)),
        "seq_lens": Param("list[int]", seq_default, "sequence lengths in tokens",
                          all_of(non_empty, positive)),
        "device": Param("str", "cpu", "cpu or gpu", one_of(DEVICES)),
        "dtype": Param("str", "float32", "compute dtype (other precisions: a study with a 'precisions' key)", float32_only),
        "threads": Param("int", 0, "intra-op threads for every framework (0: all available cores)", non_negative),
        "rounds": Param("int", 1, "measure every cell this many times, each round in fresh worker processes (intervals then carry the spread between processes)", positive),
        "more_rounds": Param("int", 0, "a report's extra rounds for doubtful claims: a timed claim of this study still inconclusive after the rounds above gets up to this many more, of its own cells only (fresh processes, interleaved as before), judged after each with the error spent over the looks (stats.look_confidence); 0: none", non_negative),
        "more_rounds_sure": Param("int", 0, "of the extra rounds (more_rounds), how many a doubtful claim takes whatever the report's time budget: planned work, like the rounds above, but only for the claims still in doubt (a claim far from its band's edges after the rounds above takes none); the rest start only where they fit the budget", non_negative),
        "more_rounds_s": Param("float", 0.0, "seconds this study adds to the report's budget for extra rounds (more_rounds): the studies' budgets are pooled, and a round that would overrun what is left is not started", non_negative),
        "rounds_for": Param("str", "all", "which variants take the rounds after the first: all, or claims (only the framework/mode variants that a claim of params/claims.yaml compares in this study on this device; the others are measured in the first round only)", one_of(["all", "claims"])),
        "schedule": Param("str", "interleaved", "interleaved: the variants of one model and shape are prepared in workers of their own and sampled one block each in turn, in a random order per turn; sequential: one cell after another (large GPU cells that cannot share the device). On a GPU, interleaved runs where the variants' memory fits on the device together (schedules/shared_gpu.py) and falls back to sequential, said in every row's schedule_note, where it does not", one_of(SCHEDULES)),
        "settle_s": Param("float", 0.005, "interleaved: idle seconds before each block, so the previous worker's spinning threads (PyTorch's OpenMP) have stopped", non_negative),
        "block_s": Param("float", 0.02, "interleaved: each sample block lasts at least this long (one block per variant per turn)", non_negative),
        "busy_retakes": Param("int", 1, f"interleaved: a set whose sampling window found the machine busy (other processes and the hypervisor's steal above {BUSY_HOST:.0%} of its CPU) is sampled again from scratch, at most this many times; the row counts the retakes", non_negative),
        "seed": Param("int", 0, "seed of weights and token ids", non_negative),
        "group_timeout_s": Param("float", timeout_default, "seconds a (framework, model) group may run before it is stopped", positive),
        "cell_timeout_s": Param("float", 900.0, "seconds one cell's measurement (timing, memory pass) may run before it is stopped as timeout; the group's other cells go on", positive),
    }
    shared = {k: o for fw in frameworks.registered() for k, o in fw.options.items() if o.shared}
    unknown = sorted(set(options) - set(shared))
    if unknown:
        raise TypeError(f"grid_params: {', '.join(unknown)} is no framework's shared option")
    for key, option in sorted(shared.items()):  # by name: not the order frameworks registered
        if key not in options or options[key] is not None:
            grid[key] = _option_param(option, options.get(key, option.default))
    return grid


def option_params(*keys: str) -> dict[str, Param]:
    """The keys of the framework options a study asks for beyond the shared
    ones (``Option.shared`` False: the acceleration study's torch.compile
    settings), at their frameworks' defaults."""
    declared = {k: o for fw in frameworks.registered() for k, o in fw.options.items()}
    return {k: _option_param(declared[k], declared[k].default) for k in keys}


def _option_param(option, default) -> Param:
    return Param(option.type, default, option.help,
                 one_of(list(option.choices)) if option.choices else None)


def replace_param(schema: dict[str, Param], key: str, **changes) -> dict[str, Param]:
    """``schema`` with one key's Param changed (its help, check or default)."""
    return {**schema, key: dataclasses.replace(schema[key], **changes)}


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


def _shared_problems(full: dict) -> list[str]:
    """Problems between keys that any study's schema may have."""
    problems = []
    for key, value in full.items():  # every framework needs its modes
        if key.endswith("modes") and isinstance(value, dict) and "frameworks" in full:
            # an explicit empty list leaves a framework out of that key's cells
            # (the memory study's quick fit_modes: JAX's search is the full
            # profile's); no entry at all is a slip
            missing = [fw for fw in full["frameworks"] if fw not in value
                       or (key == "modes" and not value[fw])]
            if missing:
                problems.append(f"key {key!r}: no modes given for framework(s) {', '.join(missing)}")
    if full.get("more_rounds_sure", 0) > full.get("more_rounds", 0):
        problems.append(f"key 'more_rounds_sure': at most more_rounds "
                        f"({full.get('more_rounds', 0)}), got {full['more_rounds_sure']}")
    if "min_time_s" in full and full["min_time_s"] > full["max_time_s"]:
        problems.append("key 'max_time_s': must be >= min_time_s")
    return problems


def validate(st, params: dict, source: str = "params") -> dict:
    """The params of study ``st`` (a ``Study``: its ``schema`` and ``check``)
    with defaults filled in, or ParamsError naming each problem's key."""
    sch = st.schema()
    if not isinstance(params, dict):
        raise ParamsError(f"{source}: expected a mapping of keys to values, got {type(params).__name__}")
    problems = []
    for key in params:
        if key not in sch:
            close = difflib.get_close_matches(str(key), list(sch), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"unknown key {key!r}{hint}; allowed keys: {', '.join(sch)}")
    full = {**{k: p.default for k, p in sch.items()},
            **{k: v for k, v in params.items() if k in sch}}
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
    if not problems:
        problems += _shared_problems(full)
    if not problems:
        problems += st.check(full)
    if problems:
        if len(problems) == 1:
            raise ParamsError(f"{source}: {problems[0]}")
        raise ParamsError(f"{source}: {len(problems)} problems\n  " + "\n  ".join(problems))
    return st.params_type()(**full)


# -- the typed params of a study -------------------------------------------------------
_PY_TYPES = {"int": int, "float": float, "str": str, "bool": bool, "list[int]": list[int],
             "list[str]": list[str], "dict[str, list[str]]": dict[str, list[str]]}


class Params:
    """The validated params of one study: a frozen dataclass made from its
    schema (:func:`params_type`), one field per key, each with the schema's
    default. Read a key as an attribute (``params.batch_sizes``) or by its
    name (``params["batch_sizes"]``, ``{**params}``): every key is there, so
    there is no ``get`` with a default of its own. Made only by
    :func:`validate` (or rebuilt from a job's JSON in a worker, already
    checked by its parent)."""

    __slots__ = ()

    def keys(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self)]

    def __getitem__(self, key: str):
        if key not in self.keys():
            raise KeyError(f"{key!r} is no key of these params; keys: {', '.join(self.keys())}")
        return getattr(self, key)

    def __iter__(self):
        return iter(self.keys())

    def __contains__(self, key) -> bool:
        return key in self.keys()

    def __len__(self) -> int:
        return len(self.keys())

    def to_dict(self) -> dict:
        """A plain dict (a copy): for JSON, YAML and hashing."""
        return {k: copy.deepcopy(getattr(self, k)) for k in self.keys()}


def params_type(study: str, schema: dict[str, Param]) -> type[Params]:
    """The frozen, typed params class of a study's schema: ``<Study>Params``."""
    name = "".join(w.capitalize() for w in study.split("_")) + "Params"
    fields = [(key, _PY_TYPES[p.type],
               dataclasses.field(default_factory=functools.partial(copy.deepcopy, p.default)))
              for key, p in schema.items()]
    return dataclasses.make_dataclass(name, fields, bases=(Params,), frozen=True)


# -- YAML files --------------------------------------------------------------------------
class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping with a key written twice (plain
    YAML lets the later value win, silently)."""


def _unique_mapping(loader, node, deep=False):
    seen = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: YAML's own merge
            continue
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is written twice (lines {seen[key] + 1} and "
                            f"{key_node.start_mark.line + 1}); write it once",
                key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                 _unique_mapping)


def read_yaml(path: Path, kind: str, error: type[Exception] = ParamsError,
              empty_ok: bool = True):
    """A YAML file's content ({} when empty, or ``error`` unless ``empty_ok``),
    or ``error`` naming the file: missing, not YAML, a key written twice."""
    if not path.is_file():
        raise error(f"{path}: no such {kind} file")
    try:
        with path.open() as stream:  # the file's name in the message's marks
            data = yaml.load(stream, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise error(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
    if not data and not empty_ok:
        raise error(f"{path}: the {kind} file is empty; it names at least the models to run "
                    f"(an empty file would run every default of the study)")
    return data or {}
