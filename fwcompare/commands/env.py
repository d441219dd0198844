"""``fwcompare env``: print the environment and fairness manifest (versions, CPU and
its instruction-set flags, GPUs)."""
from __future__ import annotations

import argparse
import json

from .base import DONE

HELP = ("print the environment and fairness manifest (versions, CPU and its instruction-set "
        "flags, GPUs)")
EXAMPLES = (
    "fwcompare env",
)


def add_arguments(p: argparse.ArgumentParser, studies: list[str]) -> None:
    pass


def main(args) -> int:
    from ..core.env import manifest

    print(json.dumps(manifest(), indent=2))
    return DONE
