"""``fwcompare merge``: join the folders of `run --shard` into one results folder."""
from __future__ import annotations

import argparse
import sys

from .base import BAD_INPUT, DONE

HELP = "join the folders of `run --shard` into one results folder"
EXAMPLES = (
    "fwcompare merge outputs/quick/training shard-1 shard-2",
)


def add_arguments(p: argparse.ArgumentParser, studies: list[str]) -> None:
    p.add_argument("out", help="output folder: the merged results go to OUT/results")
    p.add_argument("shards", nargs="+", metavar="SHARD_DIR",
                   help="the folders of shards 1..N (each with results/shard.json)")


def main(args) -> int:
    from ..suite.shard import ShardError, merge

    try:
        merged = merge(args.out, args.shards)
    except ShardError as exc:
        print(f"fwcompare: {exc}", file=sys.stderr)
        return BAD_INPUT
    print_merged(merged)
    return DONE



def print_merged(merged) -> None:
    for w in merged.warnings:
        print(f"fwcompare: warning: {w}", file=sys.stderr)
    if merged.archived:
        print(f"the results that were there are kept in {merged.archived}")
    print(f"merged {merged.shards} shards ({merged.rows} rows): {merged.results_dir}")
