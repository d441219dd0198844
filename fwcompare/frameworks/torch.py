"""PyTorch backend."""
from __future__ import annotations

import numpy as np
import torch
import transformers

from . import Unsupported, looks_like_oom


def _device(device: str) -> torch.device:
    if device == "gpu":
        if not torch.cuda.is_available():
            raise Unsupported("device gpu requested but torch.cuda.is_available() is False")
        return torch.device("cuda")
    return torch.device("cpu")


def configure(threads: int, device: str) -> None:
    torch.set_num_threads(threads)
    transformers.AutoModel  # resolve the lazy import now, before the memory baseline


def load(weights_dir, device: str):
    model = transformers.AutoModel.from_pretrained(weights_dir, local_files_only=True,
                                                   torch_dtype=torch.float32)
    return model.eval().to(_device(device))


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def make_forward(model, mode: str, device: str):
    if mode != "eager":
        raise Unsupported(f"torch mode {mode!r} is not implemented")

    def forward(ids):
        with torch.inference_mode():
            return model(input_ids=ids).last_hidden_state
    return forward


def make_inputs(ids: np.ndarray, device: str):
    return torch.as_tensor(ids, dtype=torch.long, device=_device(device))


def sync(out) -> None:
    if out is not None and out.is_cuda:
        torch.cuda.synchronize(out.device)


def to_numpy(out) -> np.ndarray:
    return out.detach().cpu().numpy().astype(np.float64)


def reset_peak_memory(device: str) -> None:
    if device == "gpu":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def peak_memory_bytes(device: str) -> int | None:
    if device == "gpu":
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated())
    return None


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or looks_like_oom(exc)


def runtime_info(device: str) -> dict:
    info = {"framework_version": torch.__version__,
            "framework_threads": torch.get_num_threads(),
            "device_name": "cpu"}
    if device == "gpu" and torch.cuda.is_available():
        info["device_name"] = torch.cuda.get_device_name()
        info["tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
        info["tf32_cudnn"] = bool(torch.backends.cudnn.allow_tf32)
    return info
