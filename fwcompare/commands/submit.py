"""``fwcompare submit``: run a study as N shard jobs (Slurm through submitit), wait for
them, merge."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..suite.params import load_file, profile_file
from .base import BAD_INPUT, DONE
from .merge import print_merged

HELP = "run a study as N shard jobs (Slurm through submitit), wait for them, merge"
EXAMPLES = (
    ("fwcompare submit inference_sweep --shards 4 --profile full --slurm-partition gpu "
     "--gpus-per-node 1"),
)


def add_arguments(p: argparse.ArgumentParser, studies: list[str]) -> None:
    p.add_argument("study", choices=studies)
    p.add_argument("--shards", type=int, required=True, metavar="N")
    p.add_argument("--profile", default="quick")
    p.add_argument("--params", help="params file (default params/STUDY/PROFILE.yaml)")
    p.add_argument("--out", help="output directory (default outputs/PROFILE/STUDY); the "
                                 "shards go to OUT/shards/ (a folder every node can reach)")
    p.add_argument("--executor", choices=["slurm", "local"], default="slurm",
                   help="slurm, or local: the shards as processes of this machine, all at "
                        "once (tests and trials, not measurements)")
    p.add_argument("--slurm-partition")
    p.add_argument("--gpus-per-node", type=int)
    p.add_argument("--cpus-per-task", type=int,
                   help="cores per shard job (threads: 0 in the params uses them all)")
    p.add_argument("--slurm-exclusive", action="store_true",
                   help="a node to each shard job alone: no other job's load in its timings")
    p.add_argument("--timeout-min", type=int, default=240,
                   help="each shard job's time limit in minutes (default 240)")
    p.add_argument("--poll-s", type=float, default=10.0, help=argparse.SUPPRESS)


def main(args) -> int:
    from ..core.paths import study_dir
    from ..suite.shard import ShardError
    from ..suite.submit import submit
    from ..studies import STUDIES, module_file

    path = Path(args.params) if args.params else profile_file(args.study, args.profile)
    params = load_file(path, args.study)
    try:
        merged = submit(args.study, params, args.shards,
                        out=Path(args.out) if args.out else study_dir(args.study, args.profile),
                        profile=args.profile, executor=args.executor,
                        partition=args.slurm_partition, gpus_per_node=args.gpus_per_node,
                        cpus_per_task=args.cpus_per_task, exclusive=args.slurm_exclusive,
                        timeout_min=args.timeout_min,
                        poll_s=args.poll_s, study_file=module_file(STUDIES[args.study]),
                        log=lambda line: print(line, flush=True))
    except ShardError as exc:
        print(f"fwcompare: {exc}", file=sys.stderr)
        return BAD_INPUT
    print_merged(merged)
    return DONE
