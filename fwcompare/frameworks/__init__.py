"""The frameworks: one package each (``torch/``, ``tensorflow/``, ``jax/``),
and the registry the rest of fwcompare reads them from.

A framework's package ``__init__`` is light (it never imports the framework)
and declares the framework as one :class:`~.base.Framework`: its modes, its
worker environment, what a fork server preloads, its data-parallel launch,
its doctor's probe, the packages a run records, its export paths and
runtimes, and where its heavy backend lives (``backend.py``, imported by
:func:`get_backend`, a :class:`~.base.Backend`: the contract as code).

The registry: :func:`register`, :func:`get`, :func:`registered`, and live
views of it (:data:`FRAMEWORKS`, :data:`MODES`, :data:`TRAIN_MODES`) that read
it when used, so a framework registered later (a test's) is known to every
check. The built-in ones, in order: torch, tensorflow, jax. A framework
declared outside fwcompare names its file (``Framework.source_file``); a
worker process imports it from there (:func:`load`), as a study's.

This module also holds the helpers the backends share (precision checks,
transformers' Auto classes, the native weight copies, worker environments).
"""
from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Mapping, Sequence

from .base import (Backend, DeployPath, Engine, Framework, Generator, Option,  # noqa: F401
                   Unsupported, bucket, crc32_of, greedy_config, looks_like_oom)
from .jax import FRAMEWORK as _JAX
from .tensorflow import FRAMEWORK as _TENSORFLOW
from .torch import FRAMEWORK as _TORCH

_REGISTRY: dict[str, Framework] = {}
_BACKENDS: dict[str, Backend] = {}
# The built-in frameworks, in the order of every table (registered at the end).
_BUILT = (_TORCH, _TENSORFLOW, _JAX)
BUILT_IN = tuple(f.name for f in _BUILT)
# The reference: its outputs are the equivalence gate's reference, against which
# every other framework's are checked, and its first mode every table's baseline.
REFERENCE = _TORCH.name
BASELINE = (REFERENCE, _TORCH.modes[0])


def defaults(pick) -> dict[str, list[str]]:
    """Per built-in framework, in order, the modes ``pick(framework)`` names
    (a study's default modes: its declaration's); one naming none is left out."""
    return {f.name: list(modes) for f in _BUILT if (modes := tuple(pick(f)))}


def register(framework: Framework) -> Framework:
    """Add ``framework`` (its name must be new, or the same declaration again)."""
    from ..core import env

    known = _REGISTRY.get(framework.name)
    if known is not None and known != framework:
        raise ValueError(f"framework {framework.name!r} is already registered")
    _REGISTRY[framework.name] = framework
    env.record_versions_of(framework.packages)
    return framework


def unregister(name: str) -> None:
    if name in BUILT_IN:
        raise ValueError(f"{name!r} is built in")
    _REGISTRY.pop(name, None)
    _BACKENDS.pop(name, None)


def registered() -> tuple[Framework, ...]:
    """Every registered framework, the built-in ones first."""
    return tuple(_REGISTRY.values())


def find(name: str) -> Framework | None:
    return _REGISTRY.get(name)


def not_installed(name: str) -> str:
    """Why framework ``name`` cannot run on this machine at all ("" if it
    can as far as its modules go): a module it ``requires`` is not installed
    (found by ``importlib.util.find_spec``, nothing imported). A GPU
    machine's image without TensorFlow, say: its cells are unsupported with
    this reason, the doctor and the report's first page say it once, and
    the other frameworks run."""
    from ..core.env import missing_modules, not_installed_reason

    declared = find(name)
    if declared is None:  # declared outside fwcompare: its worker loads it (``load``)
        return ""
    return not_installed_reason(name, missing_modules(declared.requires))


def get(name: str) -> Framework:
    if name not in _REGISTRY:
        raise ValueError(f"unknown framework {name!r}; known: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def load(name: str, source_file: str = "") -> Framework:
    """``name``'s declaration, importing ``source_file`` first where it is
    not registered (a worker process of a framework declared outside
    fwcompare: the file registers it when imported, as a test file does)."""
    if name not in _REGISTRY and source_file:
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            f"fwcompare_framework_{name}", source_file)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        declared = getattr(module, "FRAMEWORK", None)
        if isinstance(declared, Framework) and declared.name == name:
            register(declared)
    return get(name)


def source_file(name: str) -> str:
    """The file a worker imports to find ``name`` ("" for the built-in ones
    and names not registered)."""
    fw = _REGISTRY.get(name)
    return fw.source_file if fw is not None else ""


class _Names(Sequence):
    """The registered frameworks' names, read when used."""

    def __getitem__(self, i):
        return tuple(_REGISTRY)[i]

    def __len__(self) -> int:
        return len(_REGISTRY)

    def __repr__(self) -> str:
        return repr(tuple(_REGISTRY))


class _Table(Mapping):
    """Framework name -> one field of its declaration, read when used."""

    def __init__(self, attribute: str):
        self._attribute = attribute

    def __getitem__(self, name: str):
        return getattr(_REGISTRY[name], self._attribute)

    def __iter__(self):
        return iter(_REGISTRY)

    def __len__(self) -> int:
        return len(_REGISTRY)

    def __repr__(self) -> str:
        return repr(dict(self))


class _Declared(Mapping):
    """Framework name -> ``of`` its declaration, over the registered frameworks
    for which that is not empty, read when used."""

    def __init__(self, of):
        self._of = of

    def __getitem__(self, name: str):
        declared = _REGISTRY.get(name)
        value = self._of(declared) if declared is not None else None
        if not value:
            raise KeyError(name)
        return value

    def __iter__(self):
        return iter([f.name for f in _REGISTRY.values() if self._of(f)])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return repr(dict(self))


def declared(of) -> Mapping:
    """A live table of what the registered frameworks declare: name ->
    ``of(framework)``, leaving out those for which it is empty (a study's
    modes table: a framework registered later is in it)."""
    return _Declared(of)


FRAMEWORKS = _Names()
# Modes each backend implements, per task; anything else is rejected by params
# validation. torchscript: torch.jit.trace; compile: torch.compile (inductor);
# graph: tf.function; xla: tf.function(jit_compile=True); jit: jax.jit.
MODES = _Table("modes")
TRAIN_MODES = _Table("train_modes")
GENERATION_MODES = _Table("generation_modes")


def get_backend(framework: str) -> Backend:
    """``framework``'s backend (its heavy module, imported now), one per process."""
    if framework not in _BACKENDS:
        made = get(framework).backend
        if isinstance(made, str):
            made = importlib.import_module(made).BACKEND
        else:
            made = made()
        if not isinstance(made, Backend):
            raise TypeError(f"{framework}'s backend is not a frameworks.Backend: {made!r}")
        _BACKENDS[framework] = made
    return _BACKENDS[framework]


# The worker environment of a framework not registered (a study's own, as
# the toy study's numpy): transformers without TensorFlow and Flax.
_OTHER_ENV = {"USE_TF": "0", "USE_FLAX": "0"}


def worker_only(framework: str) -> Mapping[str, str]:
    """What ``framework``'s worker processes set to keep the other frameworks out."""
    fw = _REGISTRY.get(framework)
    return fw.worker_env if fw is not None else _OTHER_ENV


def worker_env(threads: int, device: str, framework: str) -> dict:
    """The environment of a worker process of ``framework``: its thread counts,
    offline transformers, the project on PYTHONPATH, no GPU on a CPU run."""
    from ..core.paths import ROOT

    e = dict(os.environ)
    e.update(worker_only(framework))
    e.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
             TF_CPP_MIN_LOG_LEVEL="2", TF_USE_LEGACY_KERAS="1", HF_HUB_OFFLINE="1",
             TRANSFORMERS_OFFLINE="1", TRANSFORMERS_VERBOSITY="error",
             PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(
                 [str(ROOT), e.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    if device == "cpu":
        e.update(CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")
    return e


def backend_options(params) -> dict:
    """The params that change how a backend builds its modes and steps
    (``Framework.options``, every registered framework's) that ``params`` has:
    what ``configure`` and ``make_forward`` take as ``options``. A study
    without one of these keys leaves the backend's default."""
    return {k: params[k] for fw in _REGISTRY.values() for k in fw.options if k in params}


def contract(cls: type = Backend) -> list[str]:
    """The names of the contract: every call and flag of :class:`Backend`."""
    return sorted(n for n in dir(cls) if not n.startswith("_"))


def module_backend(module: str, name: str, **more) -> Backend:
    """The backend of a framework's backend module (``module``: its
    ``__name__``) whose functions carry the contract's names: an instance of a
    :class:`Backend` subclass ``name`` whose calls are those functions, with
    ``more`` on top (flags such as ``memory_plan``, and calls the module holds
    under another name). A call the module lacks stays the base's: a default,
    or an abstract one, which refuses the instance and names the call. Each
    framework's backend module ends with ``BACKEND = module_backend(__name__, ...)``."""
    found = vars(sys.modules[module])
    body = {n: staticmethod(found[n]) for n in contract()
            if n in found and callable(getattr(Backend, n)) and n not in more}
    body.update({k: staticmethod(v) if callable(v) else v for k, v in more.items()})
    cls = type(name, (Backend,), {"__module__": module, "__doc__": (
        f"{module}'s functions as the contract's calls (frameworks.Backend)."), **body})
    return cls()


def contract_gaps(backend) -> list[str]:
    """What a backend lacks of the contract, in words: a call or flag missing
    or left abstract, a flag of another type than the base's, a call that
    does not take the base's arguments (none for a registered framework's)."""
    import inspect

    if not isinstance(backend, Backend):
        return [f"{type(backend).__name__} is not a frameworks.Backend"]
    gaps = []
    left = {n for n in dir(type(backend))
            if getattr(getattr(type(backend), n), "__isabstractmethod__", False)}
    for name in contract():
        base = getattr(Backend, name)
        if name in left or not hasattr(backend, name):
            gaps.append(f"{name}: missing")
        elif not callable(base):
            if not isinstance(getattr(backend, name), type(base)):
                gaps.append(f"{name}: not a {type(base).__name__}")
        else:
            wanted = list(inspect.signature(base).parameters)[1:]  # less self
            try:
                inspect.signature(getattr(backend, name)).bind(*wanted)
            except TypeError as exc:
                gaps.append(f"{name}: does not take ({', '.join(wanted)}): {exc}")
    return gaps


def check_precision(dtype: str, device: str) -> None:
    """Raise Unsupported for a precision the device cannot run."""
    from ..core.spec import DTYPES

    if dtype not in DTYPES:
        raise ValueError(f"unknown precision {dtype!r}; known: {', '.join(DTYPES)}")
    if dtype == "tf32" and device != "gpu":
        raise Unsupported("tf32 is a tensor-core matmul mode of NVIDIA GPUs (Ampere and "
                          "later); a CPU has no TF32 mode")


def tf32_note(dtype: str, device: str) -> str:
    """The TF32 part of a row's ``precision_setup`` (GPUs only)."""
    return f"; TF32 {'on' if dtype == 'tf32' else 'off'}" if device == "gpu" else ""


def head_output(out, head: str):
    """What a forward of ``head`` returns, in every framework and exporter:
    the last hidden states of a base model, the logits of a model with a head
    (a ``ModelOutput``'s field, or the key of a dict a trace returns)."""
    key = "last_hidden_state" if head == "base" else "logits"
    return getattr(out, key) if hasattr(out, key) else out[key]


def forward_fn(fn, setup: str, compile_count=None):
    """``fn`` with ``fn.setup`` and ``fn.compile_count`` (see make_forward)."""
    fn.setup = setup
    fn.compile_count = compile_count or (lambda: None)
    return fn


_MAPPING_SUFFIX = {"base": "", "seq_cls": "_FOR_SEQUENCE_CLASSIFICATION",
                   "causal_lm": "_FOR_CAUSAL_LM", "seq2seq_lm": "_FOR_SEQ_TO_SEQ_CAUSAL_LM"}


def auto_class(prefix: str, weights_dir, head: str):
    """transformers' Auto class for a head ("", "TF" or "Flax" prefix), or
    Unsupported when transformers has no such class for the architecture."""
    import transformers

    from ..core.models import AUTO_CLASS

    if prefix:
        config = transformers.AutoConfig.from_pretrained(weights_dir, local_files_only=True)
        mapping = getattr(transformers, f"{prefix.upper()}_MODEL{_MAPPING_SUFFIX[head]}_MAPPING")
        if type(config) not in mapping:
            raise Unsupported(f"transformers has no {prefix} {head} class for "
                              f"{config.model_type}")
    return getattr(transformers, prefix + AUTO_CLASS[head])


def native_copy(weights_dir, kind: str, suffix: str = ""):
    """Where a framework keeps its native copy of ``weights_dir``'s safetensors
    (``CACHE/kind/KEY{suffix}``, KEY from the source file's path, size and
    mtime: a new weights file gets a copy of its own), or None without one.
    Converting from PyTorch's layout on every load cost JAX 7.6 s and
    TensorFlow 4.2-5.8 s for bert-base here; the copies load in 1.2 s and 3.1 s."""
    import hashlib
    from pathlib import Path

    from ..core.models import WEIGHTS_FILE
    from ..core.paths import CACHE

    src = Path(weights_dir) / WEIGHTS_FILE
    if not src.is_file():
        return None
    st = src.stat()
    key = hashlib.sha1(f"{src.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
    return CACHE / kind / f"{key[:16]}{suffix}"


@contextlib.contextmanager
def one_converter(copy):
    """Held while a native copy is looked for and, if missing, written: the
    lanes of one model build at once, so without it each converted the same
    weights beside the others (three JAX precisions of mixed_precision took
    37-39 s each). The first converts; the others wait, then read the copy.
    The lock (flock) goes with the process that holds it, a killed one too."""
    if copy is None:
        yield
        return
    import fcntl

    copy.parent.mkdir(parents=True, exist_ok=True)
    with open(copy.parent / f".{copy.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


for _fw in _BUILT:
    register(_fw)
