"""``fwcompare run``: run one study (no notebook) and print its cells."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..core.paths import require_checkout
from ..suite.params import profile_file
from .base import BAD_INPUT, DONE, add_overrides, cells_failed, overrides_of, print_cells

HELP = "run one study (no notebook) and print its cells"
EXAMPLES = (
    "fwcompare run inference_sweep --models bert-base-cased --batch-sizes 1,8",
    "fwcompare run training --models ~/ckpt/my-bert --frameworks torch,jax --set rounds=3",
    "fwcompare run inference_sweep --dry-run   (the cells and a time estimate)",
)


def add_arguments(p: argparse.ArgumentParser, studies: list[str]) -> None:
    p.add_argument("study", choices=studies)
    p.add_argument("--profile", default="quick", help="the params the run starts from: "
                   "params/STUDY/PROFILE.yaml (default quick; `fwcompare list profiles`)")
    p.add_argument("--params", help="params file (default params/STUDY/PROFILE.yaml)")
    p.add_argument("--out", help="output directory (default outputs/PROFILE/STUDY)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the cells and an estimate of the duration, measure nothing")
    p.add_argument("--shard", type=_shard_arg, metavar="I/N",
                   help="run only shard I of N (I from 1 to N): whole worker groups, the same "
                        "split on every machine; into OUT/shards/shard-I-of-N unless --out "
                        "(join the shards with `fwcompare merge`)")
    add_overrides(p, "")


def main(args) -> int:
    from ..suite.api import run_study
    from ..core.paths import study_dir
    from ..suite.params import overridden_profile, with_overrides

    if not args.params:
        require_checkout("params")
    path = Path(args.params) if args.params else profile_file(args.study, args.profile)
    overrides = overrides_of(args)
    params = with_overrides(args.study, path, overrides)
    profile = overridden_profile(args.profile, overrides)
    out = study_dir(args.study, profile, args.out)
    if overrides and not args.quiet and not args.shard:
        print(f"your own question: results in {out}", file=sys.stderr)
    if args.shard:
        return _run_shard(args, params, profile)
    if args.dry_run:
        from ..suite.api import run_plan
        from ..suite.doctor import dry_run_note
        from ..execution.estimate import estimate

        print("\n".join(filter(None, [estimate(run_plan(args.study, params), out / "results",
                                                cells=True).text(),
                                       dry_run_note(params["device"])])))
        return DONE
    res = run_study(args.study, params, profile=profile, output_dir=out,
                    progress=not args.quiet)
    print_cells(res)
    return cells_failed(res.results)



def _shard_arg(text: str):
    from ..suite.shard import Shard, ShardError

    try:
        return Shard.parse(text)
    except ShardError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _run_shard(args, params: dict, profile: str) -> int:
    """``run STUDY --shard I/N``: the shard's cells only, into its own folder."""
    from ..core.paths import study_dir
    from ..suite.api import run_plan
    from ..suite.shard import ShardError, plan_shard, run_shard, shard_dir

    out = Path(args.out) if args.out else shard_dir(study_dir(args.study, profile), args.shard)
    if args.dry_run:
        print(plan_shard(run_plan(args.study, params), args.shard).text())
        print(f"results would go to {out / 'results'}")
        return DONE
    try:
        res = run_shard(args.study, params, args.shard, output_dir=out, profile=profile)
    except ShardError as exc:
        print(f"fwcompare: {exc}", file=sys.stderr)
        return BAD_INPUT
    print_cells(res)
    print(f"shard {args.shard} done; when every shard is, join them with "
          f"`fwcompare merge OUT SHARD_DIR...` (this one: {out})")
    return cells_failed(res.results)
