"""PyTorch backend."""
from __future__ import annotations

import os

import numpy as np
import torch
import transformers

from ...core.messages import TMPDIR_PREFIX
from .. import (Engine, Unsupported, auto_class, check_precision, crc32_of, forward_fn, head_output,
                looks_like_oom, tf32_note, module_backend)
from .generate import make_generator  # noqa: F401  (the contract's call)


def _device(device: str) -> torch.device:
    if device == "gpu":
        if not torch.cuda.is_available():
            raise Unsupported("device gpu requested but torch.cuda.is_available() is False")
        return torch.device("cuda")
    return torch.device("cpu")


_AUTOCAST = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def configure(threads: int, device: str, options: dict | None = None) -> None:
    """Threads; on a CPU with ``torch_malloc: reuse``, glibc made to keep freed
    memory for the next allocation (``memory.reuse_freed_memory``), as a
    caching allocator would: the rows' ``c_allocator`` says what took effect.
    Without the key (the memory study, which sets glibc itself; the gate; the
    doctor) the C allocator is left as it is. Inductor's caches outside its
    cache directory follow the worker's compile cache
    (:func:`keep_inductor_globals`)."""
    torch.set_num_threads(threads)
    keep_inductor_globals()
    if device == "cpu" and (options or {}).get("torch_malloc") == "reuse":
        from ...core.memory import reuse_freed_memory

        if not reuse_freed_memory():  # said in the worker's log, and in the rows
            import sys

            print("fwcompare: torch_malloc reuse not in effect: the C library took neither "
                  "of glibc's thresholds", file=sys.stderr, flush=True)
    transformers.AutoModel  # resolve the lazy import now, before the memory baseline


def keep_inductor_globals() -> str | None:
    """In a worker with its own temporary directory (``launch.fresh_tmpdir``)
    and a torch.compile cache (``TORCHINDUCTOR_CACHE_DIR``), make the directory
    that inductor keeps "global" a link into that cache; returns the link made,
    or None where nothing was done (no cache, a temporary directory that is not
    a worker's own, or one that already holds it).

    Inductor puts its precompiled C++ headers in ``default_cache_dir()``, the
    system temporary directory's ``torchinductor_<user>``, not in
    ``TORCHINDUCTOR_CACHE_DIR``: they are global by design, kept even by a fresh
    cache (``torch._inductor.codecache._HEADER_DIR``, pytorch/pytorch#144002).
    A worker's temporary directory is its own and goes with it, so every worker
    compiled those headers again even where its compiled graphs came from round
    0's cache, and that g++ was most of a later round's first call
    (docs/measurements.md, "the figures the library's comments quoted").
    Linked, the headers share the compile
    cache's life: round 0 builds them cold, as a new user's first compile
    does, and later rounds read them, as they read its graphs.

    Inductor reads the place once, when ``torch._inductor.codecache`` is first
    imported: this must run before (a worker imports it with its first
    compile), or set it again where the fork server's warm-up imported it
    (:func:`warm_compiler`, :func:`_headers_follow`). The ranks of one
    launch share a temporary directory and configure at once: the one that
    links second finds the link made."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # an older PyTorch: nothing of the kind to keep
        return None
    link = default_cache_dir()
    _headers_follow(link)
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not cache:
        return None
    if (not os.path.basename(os.path.dirname(link)).startswith(TMPDIR_PREFIX)
            or os.path.lexists(link)):
        return None
    # absolute: a link's relative target is read from the link's own folder
    target = os.path.abspath(os.path.join(cache, "inductor-globals"))
    os.makedirs(target, exist_ok=True)
    try:
        os.symlink(target, link)
    except FileExistsError:  # another rank of the launch linked it first
        return None
    return link


def _headers_follow(place: str) -> None:
    """Inductor's precompiled headers in ``place``, this worker's
    ``default_cache_dir()``, where its fork server imported
    ``torch._inductor.codecache`` already (:func:`warm_compiler`), which
    fixed their folder in the server's."""
    import sys

    codecache = sys.modules.get("torch._inductor.codecache")
    if codecache is not None and hasattr(codecache, "_HEADER_DIR"):
        codecache._HEADER_DIR = os.path.join(place, "precompiled_headers")
        codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")


def warm_compiler() -> None:
    """Inductor's check of the machine's vector instruction sets (a g++ build
    of a probe program per set, and a process that loads it), made in the fork
    server before it forks a worker that compiles: once per server, as a
    process that compiled before has it made, not in every worker's first
    call (its cost: docs/measurements.md). The check's answer is kept in the
    module (``valid_vec_isa_list``) that the worker inherits."""
    from torch._inductor import cpu_vec_isa

    cpu_vec_isa.valid_vec_isa_list()


def set_precision(dtype: str, device: str) -> None:
    """TF32 on only for the "tf32" precision (a GPU tensor-core mode); float32
    means full float32, so TF32 is switched off explicitly."""
    check_precision(dtype, device)
    if device == "gpu":
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        torch.backends.cudnn.allow_tf32 = dtype == "tf32"


def precision_setup(dtype: str, device: str) -> str:
    return ((f"torch.autocast({dtype}), fp32 weights" if dtype in _AUTOCAST else "float32")
            + (", GradScaler in training" if dtype == "float16" else "")
            + tf32_note(dtype, device))


def load(weights_dir, device: str, head: str = "base", dtype: str = "float32"):
    """fp32 weights in every precision: bfloat16 and float16 run through
    torch.autocast at call time (mixed precision), not by casting the model."""
    set_precision(dtype, device)
    model = auto_class("", weights_dir, head).from_pretrained(
        weights_dir, local_files_only=True, dtype=torch.float32)
    return model.eval().to(_device(device))


def _autocast(device: str, dtype: str):
    dev = "cuda" if device == "gpu" else "cpu"
    if dtype in _AUTOCAST:
        return torch.autocast(dev, dtype=_AUTOCAST[dtype])
    return torch.autocast(dev, enabled=False)


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


_DYNAMIC = {"auto": None, "true": True, "false": False}


def make_forward(model, mode: str, device: str, head: str = "base", dtype: str = "float32",
                 options: dict | None = None):
    """eager; torchscript: ``torch.jit.trace`` on the first call's input, then
    the traced graph (PyTorch's profiling executor specialises it on the
    first calls; those re-optimisations are not counted); compile:
    ``torch.compile`` (inductor), compiled on the first call and recompiled
    when guards fail (e.g. a new shape), counted as Dynamo's compiled graphs."""
    options = options or {}

    graphs = device == "gpu" and mode == "compile" and (
        options.get("torch_compile_mode") in _GRAPH_MODES)

    def eager(ids):
        _graphs[0] = False
        with torch.inference_mode(), _autocast(device, dtype):
            return head_output(model(input_ids=ids), head)
    if mode == "eager":
        return forward_fn(eager, "eager")
    if mode == "torchscript":
        if dtype != "float32":
            raise Unsupported("TorchScript tracing under torch.autocast is not supported here")
        traced: dict = {"traces": 0}

        def scripted(ids):
            _graphs[0] = False
            if "fn" not in traced:
                with torch.no_grad():
                    traced["fn"] = torch.jit.trace(model, (ids,), strict=False)
                traced["traces"] += 1
            with torch.inference_mode():
                return head_output(traced["fn"](ids), head)
        return forward_fn(scripted, "torch.jit.trace(strict=False) on the first call's input",
                          lambda: traced["traces"])
    if mode == "compile":
        import torch._dynamo.utils as dynamo_utils

        cmode = options.get("torch_compile_mode", "default")
        dynamic = _DYNAMIC[options.get("torch_compile_dynamic", "auto")]
        compiled = torch.compile(model, mode=cmode, dynamic=dynamic)

        def fn(ids):
            _graphs[0] = graphs
            with torch.inference_mode(), _autocast(device, dtype):
                return head_output(compiled(input_ids=ids), head)
        return forward_fn(fn, f"torch.compile(mode={cmode!r}, dynamic={dynamic}), inductor",
                          lambda: int(dynamo_utils.counters["stats"]["unique_graphs"]))
    raise Unsupported(f"torch mode {mode!r} is not implemented")


def _loss(logits, labels, head: str):
    if head == "causal_lm":  # predict token t+1 from tokens <= t
        logits, labels = logits[:, :-1], labels[:, 1:]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             labels.reshape(-1))


def make_train_step(model, mode: str, device: str, opt: dict, head: str,
                    accumulation_steps: int = 1, dtype: str = "float32",
                    checkpointing: bool = False):
    """Forward, loss, backward and AdamW step; ``step((ids, labels)) -> loss``.
    With accumulation, the batch is split into equal micro-batches whose
    gradients are averaged before one optimizer step. ``checkpointing``:
    transformers' gradient checkpointing (each layer's activations recomputed
    in the backward pass; the non-reentrant torch.utils.checkpoint).
    bfloat16/float16: the forward and loss under torch.autocast, fp32 weights and optimizer; float16
    adds torch.amp.GradScaler (dynamic loss scaling: a step whose gradients
    overflow is skipped and the scale halved). ``step.loss_scale()`` is the
    current scale (NaN without scaling)."""
    if mode != "eager":
        raise Unsupported(f"torch training mode {mode!r} is not implemented")
    if checkpointing:
        if not model.supports_gradient_checkpointing:
            raise Unsupported(f"transformers' PyTorch {model.config.model_type} has no "
                              "gradient checkpointing")
        model.config.use_cache = False  # a cache is incompatible with recomputation
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=opt["learning_rate"],
                                  betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"],
                                  weight_decay=opt["weight_decay"])
    scaler = torch.amp.GradScaler("cuda" if device == "gpu" else "cpu",
                                  enabled=dtype == "float16")

    def step(batch):
        _graphs[0] = False
        ids, labels = batch
        total = torch.zeros((), device=ids.device)
        for mids, mlabels in zip(ids.chunk(accumulation_steps), labels.chunk(accumulation_steps)):
            with _autocast(device, dtype):
                loss = _loss(model(input_ids=mids).logits, mlabels, head) / accumulation_steps
            scaler.scale(loss).backward()
            total += loss.detach().float()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return total
    step.loss_scale = lambda: float(scaler.get_scale()) if scaler.is_enabled() else float("nan")
    return step


def make_batch(ids: np.ndarray, labels: np.ndarray, device: str):
    dev = _device(device)
    return (torch.as_tensor(ids, dtype=torch.long, device=dev),
            torch.as_tensor(labels, dtype=torch.long, device=dev))


def make_inputs(ids: np.ndarray, device: str):
    return torch.as_tensor(ids, dtype=torch.long, device=_device(device))


def fit(train, held_out, weights_dir, device: str, settings, log) -> list[dict]:
    from .trainer import fit as run

    return run(load, train, held_out, weights_dir, device, settings, log)


def make_pipeline(kind: str, examples, batch_size: int, device: str):
    from .pipeline import Pipeline

    return Pipeline(kind, examples, batch_size, _device(device))


def sync(out) -> None:
    if out is not None and out.is_cuda:
        torch.cuda.synchronize(out.device)


def to_numpy(out) -> np.ndarray:
    return out.detach().to(torch.float64).cpu().numpy()


def make_peak_kernels(n: int, elements: int, dtype: str, device: str):
    """The hardware-peak probes (fwcompare.measure.peak): an n x n matmul in ``dtype``
    and an elementwise add over ``elements`` float32 into a buffer allocated
    once (one read, one write; a fresh output would time page faults)."""
    dev = _device(device)
    dt = _AUTOCAST.get(dtype, torch.float32)
    a = torch.randn(n, n, device=dev).to(dt)
    b = torch.randn(n, n, device=dev).to(dt)
    x = torch.zeros(elements, device=dev)
    y = torch.empty_like(x)
    return (lambda: torch.matmul(a, b)), (lambda: torch.add(x, 1.0, out=y))


# Whether the last forward call replays CUDA graphs (torch.compile's
# "reduce-overhead" and "max-autotune" modes on a GPU): their memory lives in
# a private pool the replay does not allocate from again.
_graphs = [False]
_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def graph_pool_bytes(segments) -> int:
    """Bytes reserved in private (CUDA-graph) pools and not allocated now:
    the graphs' intermediates, which ``max_memory_allocated`` misses because a
    replay writes them without allocating (``segments``: the caching
    allocator's ``memory_snapshot()``)."""
    return sum(int(s["total_size"]) - int(s["allocated_size"]) for s in segments
               if tuple(s.get("segment_pool_id", (0, 0))) != (0, 0))


def gpu_memory(run) -> dict:
    """The peak of ``run()`` by PyTorch's caching allocator, its counter reset
    right before (``max_memory_allocated``: bytes of live tensors at the
    highest point, the resident weights included); a CUDA-graph mode adds its
    pool (``graph_pool_bytes``)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    run()
    torch.cuda.synchronize()
    peak = int(torch.cuda.max_memory_allocated())
    if _graphs[0]:
        return {"peak_mem_bytes": peak + graph_pool_bytes(torch.cuda.memory_snapshot()),
                "mem_method": "torch_allocator_peak_plus_cuda_graph_pool"}
    return {"peak_mem_bytes": peak, "mem_method": "torch_allocator_peak"}


def memory_plan_bytes() -> None:
    """No compiled memory plan in PyTorch (see jax.memory_plan_bytes)."""
    return None


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or looks_like_oom(exc)


def runtime_info(device: str) -> dict:
    from ...core.memory import allocator_setup

    info = {"framework_version": torch.__version__,
            "framework_threads": torch.get_num_threads(),
            "device_name": "cpu", "c_allocator": allocator_setup()}
    if device == "gpu" and torch.cuda.is_available():
        info["device_name"] = torch.cuda.get_device_name()
        info["tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
        info["tf32_cudnn"] = bool(torch.backends.cudnn.allow_tf32)
    return info


# -- data-parallel training (the distributed study) -----------------------------
class DataParallel(Engine):
    """One rank of ``torch.nn.parallel.DistributedDataParallel`` training,
    started by ``torchrun`` (its RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
    MASTER_PORT). Backend gloo on the CPU, NCCL on GPUs (one GPU per local
    rank). Each rank loads the shared weights; DDP broadcasts rank 0's at
    construction and averages gradients (bucketed all-reduce, overlapped with
    the backward pass), so the step is the training study's step with the
    average of every rank's gradients.

    Modes: ``eager``, plain DDP; ``ddp-fp16`` and ``ddp-bf16``, DDP with
    PyTorch's gradient compression communication hook
    (``ddp_comm_hooks.default_hooks.fp16_compress_hook`` /
    ``bf16_compress_hook``): each bucket is cast to half precision, all-reduced
    and cast back, half the bytes on the wire; every rank decompresses the same
    sum, so the replicas stay equal. ``fsdp``: fully sharded data parallel
    (FSDP2, ``torch.distributed.fsdp.fully_shard`` on every module of the
    model's layer lists, then on the model): each rank holds 1/N of the
    weights, gradients and optimizer state; a layer's weights are all-gathered
    before its forward and again before its backward, and its gradients
    reduce-scattered after it. There are no replicas to compare: the
    agreement rests on the losses against the single-process run."""

    engine = "torch.distributed DistributedDataParallel"
    HOOKS = {"ddp-fp16": ("fp16_compress_hook", torch.float16),
             "ddp-bf16": ("bf16_compress_hook", torch.bfloat16)}

    def __init__(self, weights_dir, device: str, head: str, opt: dict, mode: str = "eager",
                 timeout_s: float = 1800.0):
        import datetime
        import os

        import torch.distributed as dist
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        from torch.nn.parallel import DistributedDataParallel

        if mode not in ("eager", "fsdp", *self.HOOKS):
            raise Unsupported(f"torch data-parallel mode {mode!r} is not implemented "
                              f"(eager, fsdp, {', '.join(self.HOOKS)})")
        self.dist = dist
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if device == "gpu":
            _device(device)  # Unsupported without CUDA
            torch.cuda.set_device(local_rank)
            self.dev = torch.device("cuda", local_rank)
        else:
            self.dev = torch.device("cpu")
        self.backend = "nccl" if device == "gpu" else "gloo"
        dist.init_process_group(self.backend,
                                timeout=datetime.timedelta(seconds=timeout_s))
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.head = head
        model = load(weights_dir, device, head)  # "cuda" is this rank's GPU now
        model.train()
        self.model = model
        self.wire_dtype = torch.float32
        self.sharded = mode == "fsdp"
        if self.sharded:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            mesh = init_device_mesh(self.dev.type, (self.world,))
            # The layers of the outermost layer lists (a list of lists: the inner
            # lists' layers; fully_shard takes modules with a forward, children first).
            self.units, names = [], []
            containers = (torch.nn.ModuleList, torch.nn.ModuleDict)
            for name, lst in model.named_modules():
                if isinstance(lst, torch.nn.ModuleList) and not any(
                        name.startswith(n + ".") for n in names):
                    for i, layer in enumerate(lst):
                        if not isinstance(layer, containers):
                            self.units.append(layer)
                            names.append(f"{name}.{i}")
            for unit in self.units:
                fully_shard(unit, mesh=mesh)
            fully_shard(model, mesh=mesh)  # the rest: embeddings, head, norms
            self.units.append(model)
            self.net = model
            kind = (f"FSDP2 fully_shard ({len(self.units) - 1} layers and the root), "
                    f"backend {self.backend}")
        else:
            self.net = DistributedDataParallel(
                model, device_ids=[local_rank] if device == "gpu" else None)
            kind = f"DistributedDataParallel, backend {self.backend}"
        if mode in self.HOOKS:
            name, self.wire_dtype = self.HOOKS[mode]
            self.net.register_comm_hook(None, getattr(default_hooks, name))
            kind += f", gradients compressed by {name}"
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=opt["learning_rate"],
                                           betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"],
                                           weight_decay=opt["weight_decay"])
        self.setup = f"{kind}, {self.world} process(es)"

    def batch(self, ids: np.ndarray, labels: np.ndarray):
        return (torch.as_tensor(ids, dtype=torch.long, device=self.dev),
                torch.as_tensor(labels, dtype=torch.long, device=self.dev))

    def step(self, batch) -> float:
        """One training step on this rank's shard; this rank's loss (the
        value fetched, so the step has finished on the device)."""
        ids, labels = batch
        loss = _loss(self.net(input_ids=ids).logits, labels, self.head)
        loss.backward()  # DDP all-reduces the gradients here (FSDP reduce-scatters them)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    def allreduce_sum(self, value: float) -> float:
        """Sum of ``value`` over ranks: a barrier that also carries a number."""
        t = torch.tensor([value], dtype=torch.float64, device=self.dev)
        self.dist.all_reduce(t)
        return float(t[0])

    def weights_crc(self) -> int | None:
        if self.sharded:
            return None
        with torch.no_grad():
            return crc32_of(p.detach().reshape(-1).view(torch.uint8).cpu().numpy()
                            for p in self.model.parameters())

    def max_weight_diff(self) -> float | None:
        """Largest |w_i - w_j| over every weight and every pair of ranks
        (element-wise max and min all-reduced, one parameter at a time); None
        under FSDP, where each weight lives on one rank only: nothing to compare."""
        if self.sharded:
            return None
        worst = 0.0
        with torch.no_grad():
            for p in self.model.parameters():
                hi, lo = p.detach().clone(), p.detach().clone()
                self.dist.all_reduce(hi, self.dist.ReduceOp.MAX)
                self.dist.all_reduce(lo, self.dist.ReduceOp.MIN)
                worst = max(worst, float((hi - lo).max()))
        return worst

    def allreduce_grads_s(self, repeats: int) -> list[float]:
        """Seconds per all-reduce of one step's gradients (every trainable
        parameter, in DDP's bucket size of 25 MiB, in the dtype they travel
        in: half precision under a compression hook), measured alone: DDP
        overlaps it with the backward pass, so this bounds what it adds."""
        import time

        if self.sharded:
            return self._sharded_comm_s(repeats)
        numels = [p.numel() for p in self.model.parameters() if p.requires_grad]
        bucket = 25 * 2**20 // 4
        sizes, cur = [], 0
        for n in numels:
            cur += n
            if cur >= bucket:
                sizes.append(cur)
                cur = 0
        sizes += [cur] if cur else []
        buffers = [torch.zeros(n, device=self.dev, dtype=self.wire_dtype) for n in sizes]
        times = []
        for _ in range(repeats):
            self.allreduce_sum(0.0)
            t0 = time.perf_counter()
            works = [self.dist.all_reduce(b, async_op=True) for b in buffers]
            for w in works:
                w.wait()
            if self.dev.type == "cuda":
                torch.cuda.synchronize(self.dev)
            times.append(time.perf_counter() - t0)
        return times

    def _sharded_comm_s(self, repeats: int) -> list[float]:
        """FSDP's collectives of one step, timed alone: per sharded module, the
        all-gather of its weights before the forward and again before the
        backward (the root's once: FSDP2 keeps the root unsharded between its
        forward and backward), and the reduce-scatter of its gradients;
        float32, each weight's dim-0 chunk padded to an equal size per rank,
        as FSDP2 pads it."""
        import time

        dist, world = self.dist, self.world
        gathers = []
        for unit in self.units:
            n = sum(-(-p.shape[0] // world) * (p.numel() // max(1, p.shape[0]))
                    if p.dim() else 1 for p in self._own_params(unit))
            if n:
                gathers.append((torch.zeros(n, device=self.dev),
                                torch.zeros(n * world, device=self.dev),
                                1 if unit is self.model else 2))
        times = []
        for _ in range(repeats):
            self.allreduce_sum(0.0)
            t0 = time.perf_counter()
            for shard, full, count in gathers:
                for _ in range(count):
                    dist.all_gather_into_tensor(full, shard)
            for shard, full, _ in reversed(gathers):
                dist.reduce_scatter_tensor(shard, full)
            if self.dev.type == "cuda":
                torch.cuda.synchronize(self.dev)
            times.append(time.perf_counter() - t0)
        return times

    def _own_params(self, unit):
        """The parameters ``unit``'s fully_shard manages: its own, not those of
        the sharded modules inside it."""
        inner = {id(p) for u in self.units if u is not unit and any(
            u is m for m in unit.modules()) for p in u.parameters()}
        return [p for p in unit.parameters() if id(p) not in inner]

    def perturb(self, amount: float) -> None:
        """Fault injection: shift this rank's first weight (tests the check)."""
        with torch.no_grad():
            p = next(self.model.parameters())
            (p.to_local() if hasattr(p, "to_local") else p).view(-1)[0] += amount

    def close(self) -> None:
        if self.dist.is_initialized():
            self.dist.destroy_process_group()


BACKEND = module_backend(__name__, "TorchBackend")
