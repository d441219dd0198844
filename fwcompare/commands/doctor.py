"""``fwcompare doctor``: check that each framework can run on the CPU and the GPU
(device, TF32, memory counters)."""
from __future__ import annotations

import argparse

from ..frameworks import FRAMEWORKS

HELP = "check that each framework can run on the CPU and the GPU (device, TF32, memory counters)"
EXAMPLES = (
    "fwcompare doctor --device gpu --frameworks torch,jax",
)


def add_arguments(p: argparse.ArgumentParser, studies: list[str]) -> None:
    p.add_argument("--device", choices=["cpu", "gpu", "all"], default="all")
    p.add_argument("--frameworks", default=",".join(FRAMEWORKS))


def main(args) -> int:
    from ..suite import doctor

    return doctor.main(["--device", args.device, "--frameworks", args.frameworks])
