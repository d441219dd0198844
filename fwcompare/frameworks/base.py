"""What a framework is, in two parts.

- :class:`Framework`: the declaration, a frozen dataclass that a framework's
  package ``__init__`` makes without importing the framework (the parent
  process, params checks, the doctor and the fork server read it): its modes,
  its worker environment, what a fork server preloads, its data-parallel
  launch, its doctor's probe, the packages whose versions a run records, its
  export paths and runtimes, and where its backend lives.
- :class:`Backend`: the contract of the heavy part (``backend.py``, imported
  on demand by ``frameworks.get_backend``): every call any module makes on a
  backend. An abstract base class rather than a Protocol: a call only some
  frameworks can answer (training, GPU memory, peak kernels, data-parallel
  engines) has a default here that says so (:class:`Unsupported`), and a
  flag only some have (``memory_plan``) is an attribute of the base with its
  default, so no caller reads a backend with ``getattr``; a backend states
  what it is by subclassing, and cannot be made with a call missing.
- :class:`Engine`: the base of a data-parallel engine (``Backend.DataParallel``),
  with the flags only some engines have.
- :class:`Generator`: one mode's text generation (``Backend.make_generator``),
  with the greedy settings and the prompt buckets every framework's shares.
"""
from __future__ import annotations

import abc
import copy
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Union

import numpy as np


# The module every worker process and data-parallel rank runs (``python -m``).
WORKER_MODULE = "fwcompare.commands.worker"


class Unsupported(RuntimeError):
    """This framework/mode/model/device combination cannot run; not a failure."""


_OOM_MARKERS = ("out of memory", "resource_exhausted", "resourceexhausted",
                "can't allocate memory", "oom when allocating")


def looks_like_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    text = f"{type(exc).__name__} {exc}".lower()
    return any(m in text for m in _OOM_MARKERS)


@dataclass(frozen=True)
class DeployPath:
    """One deployment path: how it is made (``how``), what runs it, the
    precision of its weights (float32, float16, int8: the gate's tolerance
    and the size order), and its artifact's kind (the runtime that loads it;
    "" for the framework's own baseline, which loads the shared weights)."""

    how: str
    runtime: str
    precision: str = "float32"
    artifact: str = ""
    # The export process it shares with its framework's other paths (""), or
    # another named one: slow paths run beside the others when
    # ``export_jobs`` allows, a step they share made once (``Exporter.step``).
    process: str = ""


def _frozen(mapping) -> Mapping:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Option:
    """A params key a framework's backend takes (what ``configure`` and
    ``make_forward`` get as ``options``): its type (a params schema type),
    default and help, the values it may take (none named: any of its type),
    and whether every study has the key (``shared``) or only a study that
    asks for it (``schema.option_params``)."""

    type: str
    default: Any
    help: str
    choices: tuple = ()
    shared: bool = True


@dataclass(frozen=True)
class Framework:
    """Everything about one framework that is known without importing it.

    ``backend``: the module of its :class:`Backend` (``BACKEND`` in it), or a
    callable that makes the backend (a framework declared outside the
    package, a test's); ``source_file``: the file that declares a framework
    registered from outside fwcompare, which a worker process imports to
    find it (as a study's file); "" for the built-in ones."""

    name: str
    modes: tuple[str, ...]                  # inference modes
    train_modes: tuple[str, ...] = ()       # training modes, the one its users train with first
    # The inference modes most of its users run (the inference sweep's default).
    common_modes: tuple[str, ...] = ()
    # Text generation (``Backend.make_generator``): its modes, and the mode each
    # compiled one is compared with (the generation study's compile breakeven).
    generation_modes: tuple[str, ...] = ()
    uncompiled: Mapping[str, str] = field(default_factory=dict)
    backend: Union[str, Callable[[], "Backend"]] = ""
    # The params keys that change how its backend builds modes and steps
    # (handed to ``configure`` and ``make_forward`` as ``options``).
    options: Mapping[str, Option] = field(default_factory=dict)
    # Set in its worker processes' environment: keeps transformers from
    # importing the other frameworks (it imported TensorFlow into the PyTorch
    # worker: hundreds of MB of RSS, unrelated work).
    worker_env: Mapping[str, str] = field(default_factory=dict)
    # What a fork server imports beside the backend: modules, and the prefix
    # of transformers' model modules (``modeling_{prefix}{model_type}``).
    preload: tuple[str, ...] = ()
    model_module_prefix: str = ""
    # Data parallel: its engines (the first: the plain one, what the scaling
    # claim judges), the modes that need parameter servers, and the module
    # that says how its ranks are launched (``fwcompare.execution.launch``; "" none).
    dist_modes: tuple[str, ...] = ()
    server_modes: tuple[str, ...] = ()
    launcher: str = ""
    # Engines that run on one kind of device only (mode -> (device, why)), and
    # engines whose whole cluster runs on this host (mode -> why).
    dist_device: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    dist_one_host: Mapping[str, str] = field(default_factory=dict)
    # A process's memory on a GPU beyond its tensors (the CUDA context, library
    # workspaces, XLA's autotuning), in GiB: what a set of variants plans for
    # each of its processes (``execution.schedules.shared_gpu``).
    gpu_reserve_gib: float = 1.5
    # The doctor's probe: environment per device, set before the import.
    probe_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # Packages whose versions a run records (fwcompare.core.env), its own first.
    packages: tuple[str, ...] = ()
    # The modules without which it cannot run at all (found or not without
    # importing them: ``frameworks.not_installed``): a machine without them
    # gets its cells as unsupported, with that reason, and the rest runs.
    requires: tuple[str, ...] = ()
    # The modes whose first call at a shape traces or compiles (what a run's
    # estimate allows for before an earlier run here tells it better: its
    # ``fwcompare.execution.estimate``); "*": every mode but eager. Of those, the ones
    # that compile device code (XLA, Inductor), which a persistent cache keeps
    # for the later rounds' processes (``launch.use_compile_cache``); the
    # others trace on the host (TorchScript, tf.function without XLA, Keras
    # fit) in every process, on a GPU as on the CPU. A framework that names no
    # compiled modes (the default) has host traces only. "eager" named in both:
    # its eager mode compiles each operation at each new shape (JAX's op-by-op
    # dispatch through XLA), cached alike; on a GPU far dearer than one program.
    traced_modes: tuple[str, ...] = ()
    compiled_modes: tuple[str, ...] = ()
    # Its input pipelines (``Backend.make_pipeline``'s kinds: fwcompare.core.pipeline).
    pipelines: tuple[str, ...] = ()
    # Training end to end (``Backend.fit``): its stack's name (the end-to-end
    # study's mode) and the pipelines that stack reads, its default first.
    fit_stack: str = ""
    fit_pipelines: tuple[str, ...] = ()
    # Deployment: its paths (mode -> DeployPath), its exporter and the
    # runtimes of its own artifact kinds ("module:Class", imported on demand).
    deploy_paths: Mapping[str, DeployPath] = field(default_factory=dict)
    exporter: str = ""
    runtimes: Mapping[str, str] = field(default_factory=dict)
    source_file: str = ""

    def __post_init__(self):
        for name in ("worker_env", "deploy_paths", "runtimes", "uncompiled", "dist_device",
                     "dist_one_host", "options"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))
        object.__setattr__(self, "probe_env", _frozen(
            {k: _frozen(v) for k, v in self.probe_env.items()}))
        for name in ("modes", "train_modes", "common_modes", "generation_modes",
                     "preload", "dist_modes",
                     "server_modes", "packages", "requires", "traced_modes", "compiled_modes",
                     "pipelines", "fit_pipelines"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def traces(self, mode: str) -> bool:
        """Whether ``mode``'s first call at a shape traces or compiles."""
        return _names(self.traced_modes, mode)

    def compiles(self, mode: str) -> bool:
        """Whether ``mode``'s first call at a shape compiles device code (a
        traced mode that is not a host trace)."""
        return self.traces(mode) and _names(self.compiled_modes, mode)


def _names(modes: tuple[str, ...], mode: str) -> bool:
    """Whether ``modes`` (``traced_modes``, ``compiled_modes``) holds
    ``mode``; "*" holds every mode but eager."""
    return mode in modes or ("*" in modes and mode != "eager")


class Backend(abc.ABC):
    """The contract every framework's backend fulfils, as code: a study's plan,
    the cell measurement, the gate, the peak probe, the doctor and the
    data-parallel ranks call only these. The abstract methods every backend
    has; the others have a default a framework without that part keeps.

    A mode that traces or compiles does so in its first call, never before, so
    the first call's time is the time to first result."""

    # Whether ``memory_plan_bytes`` can answer (JAX's jit: XLA's compiled
    # plan); the others return None.
    memory_plan: bool = False

    @abc.abstractmethod
    def configure(self, threads: int, device: str, options: dict | None = None) -> None:
        """Thread counts and device, before any work; ``options``
        (``backend_options``): e.g. ``tf_autograph``."""

    def warm_compiler(self) -> None:
        """The compiler's checks of the machine, which a process that compiled
        before has made (PyTorch's: inductor's instruction-set probes): made by
        a fork server once, before it forks the first worker that compiles, so
        that no first call counts them. Default: none."""

    @abc.abstractmethod
    def load(self, weights_dir, device: str, head: str = "base", dtype: str = "float32"):
        """The model with the shared weights (fp32 in every precision), set up
        for precision ``dtype``."""

    @abc.abstractmethod
    def n_params(self, model) -> int: ...

    @abc.abstractmethod
    def make_forward(self, model, mode: str, device: str, head: str = "base",
                     dtype: str = "float32", options: dict | None = None):
        """``fn(inputs) -> output`` (hidden states of the base model, logits
        with a head) for an inference mode (Unsupported for a mode it cannot
        run); ``fn.setup`` says how it was built, ``fn.compile_count()`` the
        traces or compilations counted so far (None where none is exposed)."""

    @abc.abstractmethod
    def precision_setup(self, dtype: str, device: str) -> str:
        """How this framework runs ``dtype``, in words."""

    @abc.abstractmethod
    def set_precision(self, dtype: str, device: str) -> None:
        """The process-wide precision settings of ``dtype`` (TF32 on or off)."""

    @abc.abstractmethod
    def make_inputs(self, ids: np.ndarray, device: str):
        """The framework's tensor of int token ids."""

    @abc.abstractmethod
    def sync(self, out) -> None:
        """Wait until ``out`` is computed."""

    @abc.abstractmethod
    def to_numpy(self, out) -> np.ndarray:
        """The last hidden state (or a loss) as float64 NumPy."""

    @abc.abstractmethod
    def runtime_info(self, device: str) -> dict:
        """Versions, threads, device name, TF32 flags."""

    def make_train_step(self, model, mode: str, device: str, opt: dict, head: str,
                        accumulation_steps: int = 1, dtype: str = "float32",
                        checkpointing: bool = False):
        """``step((ids, labels)) -> loss``, with ``step.loss_scale()``."""
        raise Unsupported(f"{type(self).__name__} has no training step")

    def make_batch(self, ids: np.ndarray, labels: np.ndarray, device: str):
        raise Unsupported(f"{type(self).__name__} has no training batch")

    def make_pipeline(self, kind: str, examples, batch_size: int, device: str):
        """An input pipeline of ``kind`` (one of ``Framework.pipelines``) over
        ``examples`` (``fwcompare.core.pipeline.Examples``): an endless iterator of
        batches (ids, attention mask, labels) on ``device``, in the examples'
        order epoch after epoch, with ``close()`` and ``setup`` (how it was
        built, in words)."""
        raise Unsupported(f"{type(self).__name__} has no input pipelines")

    def fit(self, train, held_out, weights_dir, device: str, settings, log) -> list[dict]:
        """Training end to end as this framework's users run it (``Trainer``,
        Keras ``fit``, a Flax loop): ``train`` and ``held_out``
        (``pipeline.Examples``) from the sequence classifier in
        ``weights_dir``, with ``settings`` (``training_run.FitSettings``), the
        clock kept in ``log`` (``training_run.FitLog``). Returns the evaluations."""
        raise Unsupported(f"{type(self).__name__} has no end-to-end training")

    def gpu_memory(self, run: Callable[[], Any]) -> dict:
        """``peak_mem_bytes`` and ``mem_method`` of ``run()`` on the GPU (its
        own allocator's highest bytes in use, the resident weights included)."""
        raise Unsupported(f"{type(self).__name__} runs on the CPU only")

    def memory_plan_bytes(self) -> int | None:
        """What XLA's compiled plan of the last call allocates beyond its
        arguments (where ``memory_plan``); None elsewhere."""
        return None

    def is_oom(self, exc: BaseException) -> bool:
        return looks_like_oom(exc)

    def tf32_enabled(self, device: str) -> bool:
        """Whether TF32 matmuls are on now (the doctor's check)."""
        return bool(self.runtime_info(device).get("tf32_matmul"))

    def make_peak_kernels(self, n: int, elements: int, dtype: str, device: str):
        """(an n x n matmul, an add over ``elements`` float32s): the peak probe's calls."""
        raise Unsupported(f"{type(self).__name__} has no peak kernels")

    def make_generator(self, model, mode: str, device: str, params: dict, inputs) -> "Generator":
        """Greedy text generation in ``mode`` (a :class:`Generator`, built but
        not called) with the generation study's ``params``; ``inputs`` makes
        a device input from token ids (``make_inputs``)."""
        raise Unsupported(f"{type(self).__name__} has no text generation")

    def DataParallel(self, weights_dir, device: str, head: str, opt: dict, mode: str,
                     timeout_s: float = 1800.0) -> "Engine":
        """This process's :class:`Engine` of a data-parallel launch."""
        raise Unsupported(f"{type(self).__name__} has no data-parallel engine")


def crc32_of(arrays) -> int:
    """CRC-32 of the bytes of NumPy ``arrays``, in order (zlib: a small part
    of a step for a base-sized model's weights, measurements.md, "comments quoted")."""
    import zlib

    crc = 0
    for a in arrays:
        crc = zlib.crc32(np.ascontiguousarray(a).view(np.uint8), crc)
    return crc


class Engine:
    """A data-parallel engine, one per rank (``Backend.DataParallel``): ``rank``,
    ``world``, ``setup``, ``step(batch)``, ``allreduce_sum(x)``, ``perturb``,
    ``close()`` and the rest the distributed study calls. The flags only some
    engines have, with their defaults:"""

    # The processes that run the study's loop: 0, every rank; 1, a
    # parameter-server cluster's chief (which feeds the whole global batch).
    loop_ranks: int = 0
    # Tasks that run none of the study's code (parameter servers, workers of
    # a chief): their memory is read by ``task_memory`` and a fault is sent
    # to them by ``signal_task``.
    serves_tasks: bool = False

    def weights_crc(self) -> int | None:
        """CRC-32 of this rank's copy of the replicated weights (their bytes,
        in order: ``crc32_of``), or None where no weight is replicated
        (FSDP's shards, a parameter server's variables)."""
        return None

    def task_memory(self, run):
        raise NotImplementedError(f"{type(self).__name__} has no serving tasks")

    def signal_task(self, who: str, signum: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no serving tasks")


# -- text generation (the generation study), shared by every framework's generator ------
@dataclass
class Generator:
    """One mode's generation, built but not called: ``call(ids, n)`` makes
    the inputs and returns the timed callable; ``tokens(out, n)`` the
    generated ids as numpy; ``compiles()`` the traces or compilations the
    framework counted so far (None where it exposes none); ``padded(p)`` the
    prompt length the model is given (a bucket, for TensorFlow's XLA)."""

    call: Callable[[np.ndarray, int], Callable[[], Any]]
    tokens: Callable[[Any, int], np.ndarray]
    setup: str
    compiles: Callable[[], int | None] = lambda: None
    padded: Callable[[int], int] = lambda p: p
    load_s: float = math.nan


def bucket(prompt: int, buckets: list[int]) -> int:
    """The smallest bucket that holds a prompt (past the largest: the prompt's
    own length, which then traces a program of its own)."""
    return min((b for b in buckets if b >= prompt), default=prompt)


def greedy_config(model, vocab_size: int):
    """The model's generation config set for these measurements: greedy, one
    beam, and an end-of-sequence id no logit has (``vocab_size``), so no
    call stops early (Flax's generate needs an integer id there)."""
    gc = copy.deepcopy(model.generation_config)
    pad = gc.pad_token_id
    if pad is None:
        eos = gc.eos_token_id
        pad = (eos[0] if isinstance(eos, list) else eos) if eos is not None else 0
    gc.update(do_sample=False, num_beams=1, eos_token_id=vocab_size, pad_token_id=pad,
              forced_eos_token_id=None, min_length=0, min_new_tokens=None)
    return gc
