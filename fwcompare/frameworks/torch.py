"""PyTorch backend."""
from __future__ import annotations

import numpy as np
import torch
import transformers

from . import Unsupported, auto_class, looks_like_oom


def _device(device: str) -> torch.device:
    if device == "gpu":
        if not torch.cuda.is_available():
            raise Unsupported("device gpu requested but torch.cuda.is_available() is False")
        return torch.device("cuda")
    return torch.device("cpu")


def configure(threads: int, device: str) -> None:
    torch.set_num_threads(threads)
    transformers.AutoModel  # resolve the lazy import now, before the memory baseline


def load(weights_dir, device: str, head: str = "base"):
    model = auto_class("", weights_dir, head).from_pretrained(
        weights_dir, local_files_only=True, torch_dtype=torch.float32)
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


def _loss(logits, labels, head: str):
    if head == "causal_lm":  # predict token t+1 from tokens <= t
        logits, labels = logits[:, :-1], labels[:, 1:]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             labels.reshape(-1))


def make_train_step(model, mode: str, device: str, opt: dict, head: str,
                    accumulation_steps: int = 1):
    """Forward, loss, backward and AdamW step; ``step((ids, labels)) -> loss``.
    With accumulation, the batch is split into equal micro-batches whose
    gradients are averaged before one optimizer step."""
    if mode != "eager":
        raise Unsupported(f"torch training mode {mode!r} is not implemented")
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=opt["learning_rate"],
                                  betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"],
                                  weight_decay=opt["weight_decay"])

    def step(batch):
        ids, labels = batch
        total = torch.zeros((), device=ids.device)
        for mids, mlabels in zip(ids.chunk(accumulation_steps), labels.chunk(accumulation_steps)):
            loss = _loss(model(input_ids=mids).logits, mlabels, head) / accumulation_steps
            loss.backward()
            total += loss.detach()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return total
    return step


def make_batch(ids: np.ndarray, labels: np.ndarray, device: str):
    dev = _device(device)
    return (torch.as_tensor(ids, dtype=torch.long, device=dev),
            torch.as_tensor(labels, dtype=torch.long, device=dev))


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
