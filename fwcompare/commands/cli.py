"""fwcompare: which framework runs a Transformer faster, leaner and more
accurately on this machine? PyTorch, TensorFlow and JAX measured side by side.

exit codes:
  0    done
  1    run, report: a study or a cell (status error or timeout) failed;
       doctor: a check failed; compare: its gate (--fail-above,
       --fail-below) found a cell beyond it
  2    bad input, nothing measured: params, overrides, paths, or a device: gpu
       run where the doctor finds the GPU unusable
  130  interrupted (Ctrl-C or SIGTERM): finished cells are kept; run again
       to resume
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from pathlib import Path

from .. import __version__
from ..core.atomic import UnreadableFile
from ..suite.doctor import DoctorError
from ..suite.params import LIST_FLAGS, REPORT_BUDGET_S, ParamsError, load_file, profile_file
from ..core.paths import OUTPUTS, PARAMS, CheckoutError, require_checkout
from ..frameworks import FRAMEWORKS

DONE, FAILED, BAD_INPUT, INTERRUPTED = 0, 1, 2, 130


def _overrides(args) -> dict:
    """The params the command line sets (``--models`` ... ``--set``)."""
    from ..suite.params import command_line_overrides

    return command_line_overrides({key: getattr(args, key) for key in LIST_FLAGS}, args.set)


def _cmd_run(args) -> int:
    from ..suite.api import run_study
    from ..core.paths import study_dir
    from ..suite.params import overridden_profile, with_overrides

    if not args.params:
        require_checkout("params")
    path = Path(args.params) if args.params else profile_file(args.study, args.profile)
    overrides = _overrides(args)
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
    _print_cells(res)
    return _cells_failed(res.results)


def _cells_failed(results) -> int:
    """FAILED when a cell's run failed (error, timeout), naming how many."""
    from ..results.store import RUN_FAILED

    if not len(results):
        return DONE
    failed = results[results["status"].isin(RUN_FAILED)]
    if len(failed):
        first = failed.iloc[0]
        print(f"fwcompare: {failed['cell_id'].nunique()} cell(s) failed "
              f"({' or '.join(RUN_FAILED)}; run again to retry them); the first, "
              f"{first['model']} {first['framework']}/{first['mode']} b={first['batch_size']} "
              f"s={first['seq_len']}: {' '.join(str(first['error']).split())[:300]}",
              file=sys.stderr)
        return FAILED
    return DONE


def _print_cells(res) -> None:
    """A row per cell (the study's own axes where they leave their defaults:
    generation's ``new_tokens``, distributed's ``workers``), then why the
    cells that did not run ok did not, each reason once, and the folder."""
    from ..core.spec import axes
    from ..results.tables import summarize

    summary = summarize(res.results, res.samples)
    own = [a.name for a in axes() if a.name in summary
           and (summary[a.name].dropna() != a.default).any()]
    cols = ["model", "variant", "batch_size", "seq_len", *own, "status", "median_s",
            "ci_low_s", "ci_high_s", "equiv_max_abs_err"]
    print(summary[cols].to_string(index=False) if len(summary) else "no cells")
    if len(summary) and "error" in summary:
        bad = summary[(summary["status"] != "ok") & summary["error"].fillna("").astype(bool)]
        for (status, error), n in bad.groupby(["status", "error"], sort=False).size().items():
            print(f"{status} ({n} cell{'s' if n != 1 else ''}): {error}")
    print(f"results: {res.output_dir / 'results'}")


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
    _print_cells(res)
    print(f"shard {args.shard} done; when every shard is, join them with "
          f"`fwcompare merge OUT SHARD_DIR...` (this one: {out})")
    return _cells_failed(res.results)


def _cmd_merge(args) -> int:
    from ..suite.shard import ShardError, merge

    try:
        merged = merge(args.out, args.shards)
    except ShardError as exc:
        print(f"fwcompare: {exc}", file=sys.stderr)
        return BAD_INPUT
    _print_merged(merged)
    return DONE


def _print_merged(merged) -> None:
    for w in merged.warnings:
        print(f"fwcompare: warning: {w}", file=sys.stderr)
    if merged.archived:
        print(f"the results that were there are kept in {merged.archived}")
    print(f"merged {merged.shards} shards ({merged.rows} rows): {merged.results_dir}")


def _cmd_submit(args) -> int:
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
    _print_merged(merged)
    return DONE


def _cmd_validate(args) -> int:
    from ..suite.claims import CLAIMS_FILE, load_claims

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
    return BAD_INPUT if bad else DONE


def _cmd_env(args) -> int:
    from ..core.env import manifest

    print(json.dumps(manifest(), indent=2))
    return DONE


def _cmd_compare(args) -> int:
    from .. import studies  # noqa: F401 (registers the studies' cell axes, which cells match on)
    from ..results.compare import CompareError, compare

    try:
        c = compare(args.a, args.b)
    except CompareError as exc:
        print(f"fwcompare: {exc}", file=sys.stderr)
        return BAD_INPUT
    hits = c.regressions(args.fail_above, args.fail_below)
    for w in c.warnings if args.json else []:  # the text prints them itself
        print(f"fwcompare: warning: {w}", file=sys.stderr)
    for w in c.gate_warnings(hits):
        print(f"fwcompare: warning: {w}", file=sys.stderr)
    if args.json:
        print(json.dumps(c.to_json(args.fail_above, args.fail_below), indent=1))
    else:
        if len(hits):  # what stops the gate, first
            cols = ["study", "model", "variant", "dtype", "batch_size", "seq_len",
                    "time_b_over_a", "ci_low", "ci_high", "status_a", "status_b", "why"]
            print(f"FAIL: {len(hits)} cell(s) beyond the gate:\n"
                  + hits[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}")
                  + "\n")
        print(c.text())
    if args.out:
        print("written: " + ", ".join(str(f) for f in c.write(args.out)),
              file=sys.stderr if args.json else sys.stdout)
    if len(hits):
        print(f"fwcompare: {len(hits)} cell(s) beyond the gate "
              f"({_gate_text(args)})", file=sys.stderr)
        return FAILED
    return DONE


def _gate_text(args) -> str:
    return " and ".join(t for t in (
        f"--fail-above {args.fail_above:g}" if args.fail_above is not None else "",
        f"--fail-below {args.fail_below:g}" if args.fail_below is not None else "") if t)


def _positive_float(text: str, zero: bool = False) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (v >= 0 if zero else v > 0) or v == float("inf"):
        raise argparse.ArgumentTypeError(
            f"must be {'zero or more' if zero else 'positive'} and finite, got {text}")
    return v


def _minutes(text: str) -> float:
    return _positive_float(text, zero=True)


def _cmd_export(args) -> int:
    from ..results.archive import ExportError, export

    try:
        archive = export(args.run, args.out, drop_host=args.drop_host)
    except ExportError as exc:
        print(f"fwcompare: {exc}", file=sys.stderr)
        return BAD_INPUT
    print(f"archive: {archive} ({archive.stat().st_size / 2**20:.1f} MiB)")
    return DONE


def _cmd_report(args) -> int:
    import pandas as pd

    from ..results.store import load_results
    from ..suite.report import ReportError, build
    from ..studies import STUDIES

    require_checkout()
    try:
        index = build(args.profile, out_root=args.out, fresh=args.fresh,
                      studies=args.study or None, overrides=_overrides(args),
                      progress=not args.quiet,
                      budget_s=None if args.budget is None else args.budget * 60,
                      dry_run=args.dry_run)
    except ReportError as exc:
        print(f"fwcompare: {exc}", file=sys.stderr)
        return FAILED
    if index is None:  # --dry-run: nothing measured
        return DONE
    results = [load_results(index.parent / s).results for s in args.study or STUDIES
               if (index.parent / s / "results").is_dir()]
    return _cells_failed(pd.concat(results, ignore_index=True) if results else pd.DataFrame())


def _cmd_doctor(args) -> int:
    from ..suite import doctor

    return doctor.main(["--device", args.device, "--frameworks", args.frameworks])


def _cmd_list(args) -> int:
    """``fwcompare list studies|profiles|models|claims``."""
    from ..studies import STUDIES

    if args.what == "studies":
        rows = [(name, st.title) for name, st in STUDIES.items()]
    elif args.what == "profiles":
        require_checkout("params")
        found: dict[str, list[str]] = {}
        for f in sorted(PARAMS.glob("*/*.yaml")):
            if f.parent.name in STUDIES:
                found.setdefault(f.stem, []).append(f.parent.name)
        rows = [(profile, f"{len(studies)} of {len(STUDIES)} studies: " + ", ".join(studies))
                for profile, studies in sorted(found.items(), key=lambda kv: -len(kv[1]))]
    elif args.what == "models":
        from ..core.models import describe_zoo

        rows = describe_zoo()
        rows.append(("PATH/", "a local checkpoint directory (config.json and one "
                            "model.safetensors), loaded offline"))
    else:
        from ..suite.claims import load_claims

        rows = [(c.id, f"[{c.hardware}, {c.study}] {c.claim}") for c in load_claims()]
    width = max(len(r[0]) for r in rows)
    print("\n".join(f"{name:<{width}}  {text}" for name, text in rows))
    return DONE


def _add_overrides(p: argparse.ArgumentParser, where: str) -> None:
    g = p.add_argument_group(
        "your own question", f"merged into the profile's params and checked as a params file "
        f"is (a bad value exits 2 before anything is measured); results go to "
        f"outputs/<profile>-<hash of the overrides>/, never into the profile's own folder. "
        f"{where}")
    g.add_argument("--models", metavar="A,B", help="zoo names (`fwcompare list models`) or "
                   "local checkpoint directories")
    g.add_argument("--frameworks", metavar="A,B", help=f"a subset of {','.join(FRAMEWORKS)}")
    g.add_argument("--batch-sizes", dest="batch_sizes", metavar="1,8", help="batch sizes")
    g.add_argument("--seq-lens", dest="seq_lens", metavar="128,512",
                   help="sequence lengths in tokens")
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any params key, its value in YAML (repeatable): --set rounds=3, "
                        "--set 'modes={torch: [eager, compile]}', --set device=gpu --set "
                        "schedule=sequential")


def build_parser() -> argparse.ArgumentParser:
    """Every command, with its options and an example in its ``--help``."""
    from ..studies import STUDIES

    studies = list(STUDIES)
    common = argparse.ArgumentParser(add_help=False)
    loud = common.add_mutually_exclusive_group()
    loud.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                      help="print no progress lines (results, warnings and errors only)")
    loud.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                      help="debug logging, and the traceback of an error")
    ap = argparse.ArgumentParser(
        prog="fwcompare", description=__doc__, parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  fwcompare list models\n"
               "  fwcompare run inference_sweep --models bert-base-cased --batch-sizes 1,8\n"
               "  fwcompare report --profile quick   (what `make report` runs)\n\n"
               "`fwcompare COMMAND --help` tells a command's options, with an example.")
    ap.add_argument("--version", action="version", version=f"fwcompare {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    def command(name: str, help: str, fn, *examples: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, parents=[common],
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog=f"example{'s' if len(examples) > 1 else ''}:\n  "
                                  + "\n  ".join(examples))
        p.set_defaults(fn=fn)
        return p

    p = command("list", "list the studies, profiles, models or claims", _cmd_list,
                "fwcompare list models", "fwcompare list claims")
    p.add_argument("what", choices=["studies", "profiles", "models", "claims"])
    p = command("run", "run one study (no notebook) and print its cells", _cmd_run,
                "fwcompare run inference_sweep --models bert-base-cased --batch-sizes 1,8",
                "fwcompare run training --models ~/ckpt/my-bert --frameworks torch,jax "
                "--set rounds=3",
                "fwcompare run inference_sweep --dry-run   (the cells and a time estimate)")
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
    _add_overrides(p, "")
    p = command("merge", "join the folders of `run --shard` into one results folder",
                _cmd_merge, "fwcompare merge outputs/quick/training shard-1 shard-2")
    p.add_argument("out", help="output folder: the merged results go to OUT/results")
    p.add_argument("shards", nargs="+", metavar="SHARD_DIR",
                   help="the folders of shards 1..N (each with results/shard.json)")
    p = command("submit", "run a study as N shard jobs (Slurm through submitit), wait for "
                "them, merge", _cmd_submit,
                "fwcompare submit inference_sweep --shards 4 --profile full "
                "--slurm-partition gpu --gpus-per-node 1")
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
    p = command("validate", "check params files (default: all of them, and the claims)",
                _cmd_validate, "fwcompare validate", "fwcompare validate my-params.yaml "
                "--study inference_sweep")
    p.add_argument("files", nargs="*")
    p.add_argument("--study", choices=studies,
                   help="study of the files (default: their folder name); without files, "
                        "that study's params files")
    command("env", "print the environment and fairness manifest (versions, CPU and its "
            "instruction-set flags, GPUs)", _cmd_env, "fwcompare env")
    p = command("compare", "two runs or machines cell by cell: time ratios with CIs, cells "
                "in one only, the environments' differences; a regression gate with "
                "--fail-above", _cmd_compare,
                "fwcompare compare outputs/quick old-run/quick",
                "fwcompare compare main/quick branch/quick --fail-above 1.05   "
                "(exit 1: a cell's interval lies wholly above 1.05)")
    p.add_argument("a", help="output folder A: outputs/PROFILE or outputs/PROFILE/STUDY")
    p.add_argument("b", help="output folder B (time_b_over_a above 1: B is slower)")
    p.add_argument("--out", help="also write cells.csv, variants.csv, only_in_one.csv, "
                                 "env_diff.csv and compare.md here")
    p.add_argument("--fail-above", type=_positive_float, metavar="RATIO",
                   help="exit 1 when a cell's B/A time ratio lies above RATIO for sure (its "
                        "95%% interval's lower end above it), or a cell measured in A "
                        "failed in B; those cells are printed first")
    p.add_argument("--fail-below", type=_positive_float, metavar="RATIO",
                   help="exit 1 when a cell's B/A ratio lies below RATIO for sure (the "
                        "interval's upper end below it): B faster than expected")
    p.add_argument("--json", action="store_true",
                   help="print the comparison (and the gate's cells) as JSON")
    p = command("export", "one archive of a run: results, samples, manifests, figures "
                "(PNG, SVG, CSV), scorecard", _cmd_export,
                "fwcompare export outputs/quick --drop-host")
    p.add_argument("run", help="outputs/PROFILE (every study) or outputs/PROFILE/STUDY")
    p.add_argument("--out", help="the archive, .tar.gz or .zip (default RUN.tar.gz)")
    p.add_argument("--drop-host", action="store_true",
                   help="leave the machine's name out of every file")
    p = command("doctor", "check that each framework can run on the CPU and the GPU "
                "(device, TF32, memory counters)", _cmd_doctor,
                "fwcompare doctor --device gpu --frameworks torch,jax")
    p.add_argument("--device", choices=["cpu", "gpu", "all"], default="all")
    p.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    p = command("report", "run every study and its notebook, judge the claims, write "
                "index.html", _cmd_report,
                "fwcompare report --profile quick   (what `make report` runs)",
                "fwcompare report --study inference_sweep --study training "
                "--models distilbert-base-uncased --batch-sizes 1,4",
                "fwcompare report --profile gpu --dry-run   (each study's cells and the "
                "report's estimate)")
    p.add_argument("--profile", default="quick")
    p.add_argument("--out", help=f"output root (default {OUTPUTS})")
    p.add_argument("--study", action="append", choices=studies,
                   help="only this study (repeatable)")
    p.add_argument("--fresh", action="store_true",
                   help="archive earlier results and measure every cell again")
    p.add_argument("--dry-run", action="store_true",
                   help="print each study's cells and estimate and the report's, measure "
                   "nothing")
    p.add_argument("--budget", type=_minutes, metavar="MINUTES",
                   help="the report's time budget: extra rounds for doubtful claims start "
                   "only where they fit in it, the notebooks' time after them (default: the "
                   "profile's, " + ", ".join(f"{k} {v / 60:g}" for k, v in
                                             REPORT_BUDGET_S.items())
                   + ", where no params are overridden; 0: none, only the studies' "
                   "more_rounds_s)")
    _add_overrides(p, "Each applies to every chosen study whose params have that key.")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.quiet = getattr(args, "quiet", False)
    logging.basicConfig(level=logging.DEBUG if getattr(args, "verbose", False) else
                        logging.WARNING if args.quiet else logging.INFO, format="%(message)s")
    previous = _stop_on_sigterm()
    try:
        code = args.fn(args)
        sys.stdout.flush()  # a reader that left surfaces here (below), not at Python's exit
        return code
    except (DoctorError, CheckoutError, UnreadableFile) as exc:  # not the params
        _traceback(args)
        print(f"fwcompare: {exc}", file=sys.stderr)
        return BAD_INPUT
    except ParamsError as exc:
        _traceback(args)
        print(f"fwcompare: invalid params: {exc}", file=sys.stderr)
        return BAD_INPUT
    except KeyboardInterrupt:
        print("fwcompare: interrupted; finished cells are kept, run again to resume",
              file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # `fwcompare list models | head -2`: the reader left, quietly
        try:  # so that Python's flush at exit finds no pipe to fail on either
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # stdout is no file (captured, replaced)
            pass
        return FAILED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _traceback(args) -> None:
    """Under ``-v``, where an error was raised."""
    if getattr(args, "verbose", False):
        import traceback

        traceback.print_exc()


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
