"""What every part of the memory study shares: the techniques (a training
step made another way), the search's tasks and the units of its budget."""
from __future__ import annotations

# Technique -> (micro-batches per optimizer step, gradient checkpointing).
TECHNIQUES = {"plain": (1, False), "checkpointing": (1, True),
              "accumulate-2": (2, False), "accumulate-4": (4, False)}
FORWARD = "forward"  # a search's forward pass (inference, no gradients)
PLAIN = "plain"
SEARCH, TRY = "largest_batch", "fit"
GIB = 2 ** 30
MIB = 2 ** 20
# The analytic parts of a training step's memory (fp32 weights, gradients and
# AdamW's two moments: workloads.trained_variant); the rest is activations,
# workspace and runtime.
PARTS = ("param_bytes", "grad_bytes", "optimizer_state_bytes")


def micro_batches(mode: str) -> int:
    """Micro-batches of a technique (a batch must split into them); 1 for forward."""
    return TECHNIQUES.get(mode, (1, False))[0]
