"""Command line: fwcompare run | merge | submit | compare | export | validate | env | report | doctor."""
from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from pathlib import Path

from .doctor import DoctorError
from .params import ParamsError, load_file
from .paths import OUTPUTS, PARAMS, CheckoutError, require_checkout
from .spec import FRAMEWORKS


def _cmd_run(args) -> int:
    from . import run_study, study_dir

    if not args.params:
        require_checkout("params")
    path = Path(args.params) if args.params else PARAMS / args.study / f"{args.profile}.yaml"
    params = load_file(path, args.study)
    if args.shard:
        return _run_shard(args, params)
    if args.dry_run:
        from .estimate import estimate

        print(estimate(args.study, params, study_dir(args.study, args.profile, args.out)
                       / "results").text())
        return 0
    res = run_study(args.study, params, profile=args.profile, output_dir=args.out)
    _print_cells(res)
    return 0


def _print_cells(res) -> None:
    from .tables import summarize

    summary = summarize(res.results, res.samples)
    cols = ["model", "variant", "batch_size", "seq_len", "status", "median_s", "ci_low_s",
            "ci_high_s", "equiv_max_abs_err"]
    print(summary[cols].to_string(index=False) if len(summary) else "no cells")
    print(f"results: {res.output_dir / 'results'}")


def _shard_arg(text: str):
    from .shard import Shard, ShardError

    try:
        return Shard.parse(text)
    except ShardError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _run_shard(args, params: dict) -> int:
    """``run STUDY --shard I/N``: the shard's cells only, into its own folder."""
    from . import study_dir
    from .params import study_named, validate
    from .shard import ShardError, plan_shard, run_shard, shard_dir

    out = Path(args.out) if args.out else shard_dir(
        study_dir(args.study, args.profile), args.shard)
    if args.dry_run:
        p = validate(args.study, params, source=str(args.params or args.study))
        print(plan_shard(study_named(args.study), p, args.shard).text())
        print(f"results would go to {out / 'results'}")
        return 0
    try:
        res = run_shard(args.study, params, args.shard, output_dir=out, profile=args.profile)
    except ShardError as exc:
        print(f"fwcompare: {exc}", file=sys.stderr)
        return 2
    _print_cells(res)
    print(f"shard {args.shard} done; when every shard is, join them with "
          f"`fwcompare merge OUT SHARD_DIR...` (this one: {out})")
    return 0


def _cmd_merge(args) -> int:
    from .shard import ShardError, merge

    try:
        merged = merge(args.out, args.shards)
    except ShardError as exc:
        print(f"fwcompare: {exc}", file=sys.stderr)
        return 2
    _print_merged(merged)
    return 0


def _print_merged(merged) -> None:
    for w in merged.warnings:
        print(f"fwcompare: warning: {w}", file=sys.stderr)
    if merged.archived:
        print(f"the results that were there are kept in {merged.archived}")
    print(f"merged {merged.shards} shards ({merged.rows} rows): {merged.results_dir}")


def _cmd_submit(args) -> int:
    from . import study_dir
    from .shard import ShardError, submit
    from .studies import STUDIES, module_file

    path = Path(args.params) if args.params else PARAMS / args.study / f"{args.profile}.yaml"
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
        return 2
    _print_merged(merged)
    return 0


def _cmd_validate(args) -> int:
    from .claims import CLAIMS_FILE, load_claims

    if not args.files:
        require_checkout("params")
    files = [Path(f) for f in args.files] or sorted(PARAMS.glob(f"{args.study or '*'}/*.yaml"))
    bad = 0
    if not args.files and not args.study:
        try:
            n = len(load_claims(CLAIMS_FILE))
            print(f"ok    {CLAIMS_FILE} ({n} claims)")
        except ParamsError as exc:
            bad += 1
            print(f"ERROR {exc}", file=sys.stderr)
    for f in files:
        try:
            load_file(f, args.study)
            print(f"ok    {f}")
        except ParamsError as exc:
            bad += 1
            print(f"ERROR {exc}", file=sys.stderr)
    return 2 if bad else 0


def _cmd_env(args) -> int:
    from .env import manifest

    print(json.dumps(manifest(), indent=2))
    return 0


def _cmd_compare(args) -> int:
    from .compare import CompareError, compare

    try:
        c = compare(args.a, args.b)
    except CompareError as exc:
        print(f"fwcompare: {exc}", file=sys.stderr)
        return 2
    print(c.text())
    if args.out:
        print("written: " + ", ".join(str(f) for f in c.write(args.out)))
    return 0


def _cmd_export(args) -> int:
    from .export import ExportError, export

    try:
        archive = export(args.run, args.out, drop_host=args.drop_host)
    except ExportError as exc:
        print(f"fwcompare: {exc}", file=sys.stderr)
        return 2
    print(f"archive: {archive} ({archive.stat().st_size / 2**20:.1f} MiB)")
    return 0


def _cmd_report(args) -> int:
    from .report import ReportError, build

    require_checkout()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        build(args.profile, out_root=args.out, fresh=args.fresh, studies=args.study or None)
    except ReportError as exc:
        print(f"fwcompare: {exc}", file=sys.stderr)
        return 1
    return 0


def _cmd_doctor(args) -> int:
    from . import doctor

    return doctor.main(["--device", args.device, "--frameworks", args.frameworks])


def main(argv: list[str] | None = None) -> int:
    from .studies import STUDIES

    ap = argparse.ArgumentParser(prog="fwcompare", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run", help="run one study (no notebook) and print its cells")
    p.add_argument("study", choices=list(STUDIES))
    p.add_argument("--profile", default="quick")
    p.add_argument("--params", help="params file (default params/STUDY/PROFILE.yaml)")
    p.add_argument("--out", help="output directory (default outputs/PROFILE/STUDY)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the cells and an estimate of the duration, measure nothing")
    p.add_argument("--shard", type=_shard_arg, metavar="I/N",
                   help="run only shard I of N (I from 1 to N): whole worker groups, the same "
                        "split on every machine; into OUT/shards/shard-I-of-N unless --out "
                        "(join the shards with `fwcompare merge`)")
    p.set_defaults(fn=_cmd_run)
    p = sub.add_parser("merge", help="join the folders of `run --shard` into one results folder")
    p.add_argument("out", help="output folder: the merged results go to OUT/results")
    p.add_argument("shards", nargs="+", metavar="SHARD_DIR",
                   help="the folders of shards 1..N (each with results/shard.json)")
    p.set_defaults(fn=_cmd_merge)
    p = sub.add_parser("submit", help="run a study as N shard jobs (Slurm through submitit), "
                                      "wait for them, merge")
    p.add_argument("study", choices=list(STUDIES))
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
    p.set_defaults(fn=_cmd_submit)
    p = sub.add_parser("validate", help="check params files (default: all of them)")
    p.add_argument("files", nargs="*")
    p.add_argument("--study", choices=list(STUDIES),
                   help="study of the files (default: their folder name); without files, "
                        "that study's params files")
    p.set_defaults(fn=_cmd_validate)
    p = sub.add_parser("env", help="print the environment and fairness manifest")
    p.set_defaults(fn=_cmd_env)
    p = sub.add_parser("compare", help="two runs or machines cell by cell: time ratios with "
                                       "CIs, cells in one only, the environments' differences")
    p.add_argument("a", help="output folder A: outputs/PROFILE or outputs/PROFILE/STUDY")
    p.add_argument("b", help="output folder B (time_b_over_a above 1: B is slower)")
    p.add_argument("--out", help="also write cells.csv, variants.csv, only_in_one.csv, "
                                 "env_diff.csv and compare.md here")
    p.set_defaults(fn=_cmd_compare)
    p = sub.add_parser("export", help="one archive of a run: results, samples, manifests, "
                                      "figures (PNG, SVG, CSV), scorecard")
    p.add_argument("run", help="outputs/PROFILE (every study) or outputs/PROFILE/STUDY")
    p.add_argument("--out", help="the archive, .tar.gz or .zip (default RUN.tar.gz)")
    p.add_argument("--drop-host", action="store_true",
                   help="leave the machine's name out of every file")
    p.set_defaults(fn=_cmd_export)
    p = sub.add_parser("doctor", help="check that each framework can run on the CPU and "
                                      "the GPU (device, TF32, memory counters)")
    p.add_argument("--device", choices=["cpu", "gpu", "all"], default="all")
    p.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    p.set_defaults(fn=_cmd_doctor)
    p = sub.add_parser("report", help="run every study notebook and write index.html")
    p.add_argument("--profile", default="quick")
    p.add_argument("--out", help=f"output root (default {OUTPUTS})")
    p.add_argument("--study", action="append", choices=list(STUDIES),
                   help="only this study (repeatable)")
    p.add_argument("--fresh", action="store_true",
                   help="archive earlier results and measure every cell again")
    p.set_defaults(fn=_cmd_report)
    args = ap.parse_args(argv)
    previous = _stop_on_sigterm()
    try:
        return args.fn(args)
    except (DoctorError, CheckoutError) as exc:  # the machine or the install, not the params
        print(f"fwcompare: {exc}", file=sys.stderr)
        return 2
    except ParamsError as exc:
        print(f"fwcompare: invalid params: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fwcompare: interrupted; finished cells are kept, run again to resume",
              file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _stop_on_sigterm():
    """SIGTERM (``timeout``, ``kill``, a scheduler's stop) ends a command as
    Ctrl-C does, through the clean-up that ends its workers, launches and
    fork servers: Python's default would leave them running. Returns the
    handler it replaced (None off the main thread, where none can be set)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    return signal.signal(signal.SIGTERM, stop)
