"""``fwcompare validate``: check params files (default: all of them, and the claims)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..core.paths import PARAMS, require_checkout
from ..suite.params import ParamsError, load_file
from .base import BAD_INPUT, DONE

HELP = "check params files (default: all of them, and the claims)"
EXAMPLES = (
    "fwcompare validate",
    "fwcompare validate my-params.yaml --study inference_sweep",
)


def add_arguments(p: argparse.ArgumentParser, studies: list[str]) -> None:
    p.add_argument("files", nargs="*")
    p.add_argument("--study", choices=studies,
                   help="study of the files (default: their folder name); without files, "
                        "that study's params files")


def main(args) -> int:
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
