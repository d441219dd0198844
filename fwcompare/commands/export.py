"""``fwcompare export``: one archive of a run: results, samples, manifests, figures
(PNG, SVG, CSV), scorecard."""
from __future__ import annotations

import argparse
import sys

from .base import BAD_INPUT, DONE

HELP = "one archive of a run: results, samples, manifests, figures (PNG, SVG, CSV), scorecard"
EXAMPLES = (
    "fwcompare export outputs/quick --drop-host",
)


def add_arguments(p: argparse.ArgumentParser, studies: list[str]) -> None:
    p.add_argument("run", help="outputs/PROFILE (every study) or outputs/PROFILE/STUDY")
    p.add_argument("--out", help="the archive, .tar.gz or .zip (default RUN.tar.gz)")
    p.add_argument("--drop-host", action="store_true",
                   help="leave the machine's name out of every file")


def main(args) -> int:
    from ..results.archive import ExportError, export

    try:
        archive = export(args.run, args.out, drop_host=args.drop_host)
    except ExportError as exc:
        print(f"fwcompare: {exc}", file=sys.stderr)
        return BAD_INPUT
    print(f"archive: {archive} ({archive.stat().st_size / 2**20:.1f} MiB)")
    return DONE
