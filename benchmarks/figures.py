"""What saving a report's figures costs (a benchmark, not a test): the
scorecard's claim figures of a finished report, each saved by
``plots.save_figure`` (one layout and one tight box for its PNG and SVG) and
by the two ``bbox_inches="tight"`` savefigs it replaced, alternating, in one
process. Prints each way's median seconds for all the figures, the ratio, and
whether the PNGs came out the same size (in pixels).

Usage: .venv/bin/python benchmarks/figures.py RESULTS_DIR [--profile smoke] [--repeats 3]
(RESULTS_DIR: a report's folder, e.g. outputs/quick, holding a folder per study)
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image  # noqa: E402

from fwcompare.suite import claims
from fwcompare.core import env
from fwcompare.results import plots  # noqa: E402


def both_tight(fig, directory: Path, name: str) -> None:
    """The way before: each file's savefig lays the figure out for its own tight box."""
    fig.savefig(directory / f"{name}.png", dpi=plots.PNG_DPI, bbox_inches="tight")
    fig.savefig(directory / f"{name}.svg", bbox_inches="tight")
    plots.drawn_data(fig).to_csv(directory / f"{name}.csv", index=False)
    (directory / f"{name}.caption.txt").write_text(plots.caption(fig, name) + "\n")
    plt.close(fig)


def size(png: Path) -> tuple[int, int]:
    with Image.open(png) as im:
        return im.size


def save_all(card, save, directory: Path) -> float:
    with warnings.catch_warnings():  # every figure open at once: matplotlib warns past 20
        warnings.simplefilter("ignore")
        figures = list(plots.claim_figures(card))  # built outside the clock
    start = time.perf_counter()
    for name, fig in figures:
        save(fig, directory, name)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results_dir", type=Path)
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        card = claims.scorecard(args.profile, results_dir=args.results_dir,
                                output_dir=tmp / "summary")
        ways = {"save_figure": plots.save_figure, "two tight savefigs": both_tight}
        seconds: dict[str, list[float]] = {w: [] for w in ways}
        for i in range(args.repeats):
            order = list(ways.items())  # each way first in every other repeat
            for way, save in order if i % 2 == 0 else order[::-1]:
                out = tmp / way.replace(" ", "-")
                out.mkdir(exist_ok=True)
                seconds[way].append(save_all(card, save, out))
            print(f"repeat {i + 1}: " + ", ".join(f"{w} {s[-1]:.2f} s" for w, s in seconds.items()),
                  flush=True)
        pngs = sorted((tmp / "save_figure").glob("*.png"))
        n, same = len(pngs), sum(size(p) == size(tmp / "two-tight-savefigs" / p.name)
                                 for p in pngs)
    med = {w: statistics.median(s) for w, s in seconds.items()}
    print(f"{n} claim figures, {args.repeats} repeats, {env.cpu_model()}:")
    for way, m in med.items():
        print(f"  {way}: median {m:.2f} s ({min(seconds[way]):.2f}-{max(seconds[way]):.2f})")
    print(f"  ratio {med['save_figure'] / med['two tight savefigs']:.2f}; "
          f"PNGs of the same size: {same} of {n}")


if __name__ == "__main__":
    main()
