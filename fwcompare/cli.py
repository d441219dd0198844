"""Command line: fwcompare run | validate | env | report."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from .doctor import DoctorError
from .params import ParamsError, load_file
from .paths import PARAMS, ROOT
from .spec import FRAMEWORKS


def _cmd_run(args) -> int:
    from . import run_study
    from .tables import summarize

    path = Path(args.params) if args.params else PARAMS / args.study / f"{args.profile}.yaml"
    params = load_file(path, args.study)
    if args.dry_run:
        from . import study_dir
        from .estimate import estimate

        print(estimate(args.study, params, study_dir(args.study, args.profile, args.out)
                       / "results").text())
        return 0
    res = run_study(args.study, params, profile=args.profile, output_dir=args.out)
    summary = summarize(res.results, res.samples)
    cols = ["model", "variant", "batch_size", "seq_len", "status", "median_s", "ci_low_s",
            "ci_high_s", "equiv_max_abs_err"]
    print(summary[cols].to_string(index=False) if len(summary) else "no cells")
    print(f"results: {res.output_dir / 'results'}")
    return 0


def _cmd_validate(args) -> int:
    from .claims import CLAIMS_FILE, load_claims

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


def _cmd_report(args) -> int:
    from .report import ReportError, build

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
    p.set_defaults(fn=_cmd_run)
    p = sub.add_parser("validate", help="check params files (default: all of them)")
    p.add_argument("files", nargs="*")
    p.add_argument("--study", choices=list(STUDIES),
                   help="study of the files (default: their folder name); without files, "
                        "that study's params files")
    p.set_defaults(fn=_cmd_validate)
    p = sub.add_parser("env", help="print the environment and fairness manifest")
    p.set_defaults(fn=_cmd_env)
    p = sub.add_parser("doctor", help="check that each framework can run on the CPU and "
                                      "the GPU (device, TF32, memory counters)")
    p.add_argument("--device", choices=["cpu", "gpu", "all"], default="all")
    p.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    p.set_defaults(fn=_cmd_doctor)
    p = sub.add_parser("report", help="run every study notebook and write index.html")
    p.add_argument("--profile", default="quick")
    p.add_argument("--out", help=f"output root (default {ROOT / 'outputs'})")
    p.add_argument("--study", action="append", choices=list(STUDIES),
                   help="only this study (repeatable)")
    p.add_argument("--fresh", action="store_true",
                   help="archive earlier results and measure every cell again")
    p.set_defaults(fn=_cmd_report)
    args = ap.parse_args(argv)
    try:
        return args.fn(args)
    except DoctorError as exc:  # the machine, not the params
        print(f"fwcompare: {exc}", file=sys.stderr)
        return 2
    except ParamsError as exc:
        print(f"fwcompare: invalid params: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fwcompare: interrupted; finished cells are kept, run again to resume",
              file=sys.stderr)
        return 130
