"""PyTorch, declared (light: nothing here imports torch). The backend is
``backend.py``, its deployment exporter and TorchScript runtime ``export.py``,
its data-parallel launch (torchrun) ``launch.py``."""
from __future__ import annotations

from ..base import DeployPath, Framework, Option

FRAMEWORK = Framework(
    name="torch",
    # torchscript: torch.jit.trace; compile: torch.compile (inductor).
    modes=("eager", "torchscript", "compile"),
    train_modes=("eager",),
    common_modes=("eager",),
    # static-compile: torch.compile of the decoder with a static KV cache.
    generation_modes=("eager", "static-compile"),
    uncompiled={"static-compile": "eager"},
    backend="fwcompare.frameworks.torch.backend",
    options={
        "torch_malloc": Option("str", "reuse", "PyTorch on a CPU (a GPU ignores it): reuse (glibc keeps freed memory for the next allocation: its mmap and trim thresholds raised, memory.reuse_freed_memory; what PyTorch's CPU tuning guide asks of jemalloc or TCMalloc, which reuse of their own accord where preloaded) or system (glibc as it comes: a training step's gradients and optimizer temporaries come back as fresh pages every step); the rows' c_allocator says what took effect", ("reuse", "system")),
        # the acceleration study's (its compile mode's settings)
        "torch_compile_mode": Option(
            "str", "default", "torch.compile mode",
            ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
            shared=False),
        "torch_compile_dynamic": Option(
            "str", "auto", "torch.compile dynamic shapes: auto (recompile as dynamic after a "
            "shape changes), true, false", ("auto", "true", "false"), shared=False),
    },
    worker_env={"USE_TF": "0", "USE_FLAX": "0"},
    model_module_prefix="",
    # eager: DistributedDataParallel under torchrun; ddp-fp16 / ddp-bf16: the
    # same with PyTorch's fp16 / bf16 gradient compression hook; fsdp: fully
    # sharded data parallel (FSDP2 fully_shard).
    dist_modes=("eager", "ddp-fp16", "ddp-bf16", "fsdp"),
    launcher="fwcompare.frameworks.torch.launch",
    dist_device={"ddp-bf16": ("gpu", "needs a GPU (PyTorch's bf16_compress_hook requires CUDA "
                              "11+ and NCCL 2.10+; gloo has no bfloat16 path for it): use "
                              "ddp-fp16 on the CPU")},
    gpu_reserve_gib=1.0,
    packages=("torch", "onnx", "onnxscript"),
    requires=("torch", "transformers"),
    traced_modes=("torchscript", "compile", "static-compile"),
    compiled_modes=("compile", "static-compile"),  # Inductor; TorchScript traces on the host
    # memory: tensors on the device; dataloader-wN: a DataLoader with N worker
    # processes (pipeline.py)
    pipelines=("memory", "dataloader-w0", "dataloader-w1"),
    # Hugging Face Trainer on its DataLoader (trainer.py)
    fit_stack="trainer",
    fit_pipelines=("dataloader-w0", "dataloader-w1"),
    deploy_paths={
        "eager": DeployPath("PyTorch eager (the baseline)", "PyTorch"),
        "torchscript": DeployPath("torch.jit.trace, saved to a file, torch.jit.load", "TorchScript", artifact="torchscript"),
        "dynamic-int8": DeployPath("torch.ao.quantization.quantize_dynamic (Linear layers, qint8), traced and saved as TorchScript", "TorchScript", "int8", "torchscript"),
        "onnxruntime": DeployPath("torch.onnx.export(dynamo=True)", "ONNX Runtime", artifact="onnx"),
        "onnxruntime-fused": DeployPath("torch.onnx.export(dynamo=True), then onnxruntime.transformers.optimizer (transformer fusions)", "ONNX Runtime", artifact="onnx"),
        "onnxruntime-int8": DeployPath("the fused ONNX model, then onnxruntime.quantization.quantize_dynamic (QInt8 weights)", "ONNX Runtime", "int8", "onnx"),
    },
    exporter="fwcompare.frameworks.torch.export:TorchExporter",
    runtimes={"torchscript": "fwcompare.frameworks.torch.export:TorchScript"},
)
