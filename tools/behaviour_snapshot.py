"""What a refactor must not change, written to a pickle; two pickles compared.

    python tools/behaviour_snapshot.py take RESULTS_ROOT OUT.pkl
    python tools/behaviour_snapshot.py diff OLD.pkl NEW.pkl

``take`` records, with the code of the tree it runs in:

- every params file under params/: its validated values and its cells' ids;
- every study notebook, run in this process on the stored results under
  RESULTS_ROOT/<study> (a profile's output folder: nothing is measured,
  ``run_study`` only loads): every frame it displays, in order;
- the scorecard of those results (the summary notebook's frames).

``diff`` says what differs, frame by frame; exit 1 when anything does. Run
``take`` in a checkout of the code before a change and in the changed tree,
on the same copy of stored results (a notebook writes figures and tables
under RESULTS_ROOT, so use a scratch copy).
"""
from __future__ import annotations

import ast
import dataclasses
import json
import pickle
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _plain(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def params_and_cells() -> dict:
    from fwcompare.suite import params
    from fwcompare.studies import STUDIES

    out = {}
    for path in sorted((ROOT / "params").glob("*/*.yaml")):
        study = path.parent.name
        if study not in STUDIES:
            continue
        full = params.load_file(path, study)
        cells = [c.cell_id for c in STUDIES[study].cells(full)]
        out[str(path.relative_to(ROOT))] = {"params": _plain(full), "cell_ids": cells}
    return out


# Rows of the environment manifest of the moment (the summary notebook shows the
# machine and the code that render it): they differ between any two takes.
_OF_THE_MOMENT = ("timestamp", "git_commit", "git_dirty")


def _timeless(frame):
    """The frame without the rows of the moment it was made (the environment
    manifest's time and the code's commit)."""
    present = [k for k in _OF_THE_MOMENT if k in frame.index]
    return frame.drop(index=present) if present else frame


def _run_cells(source_cells: list[str], namespace: dict, shown: list) -> None:
    import pandas as pd

    for source in source_cells:
        tree = ast.parse(source)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, "<notebook>", "exec"), namespace)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), "<notebook>", "eval"), namespace)
            if hasattr(value, "data") and isinstance(getattr(value, "data"), pd.DataFrame):
                value = value.data  # a Styler
            if isinstance(value, (pd.DataFrame, pd.Series)):
                shown.append(_timeless(value))


def notebook_frames(study: str, namespace_extra: dict) -> list:
    import IPython.display
    import matplotlib.pyplot as plt
    import pandas as pd

    import fwcompare
    from fwcompare.results import plots

    nb = json.loads((ROOT / "notebooks" / f"{study}.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    shown: list = []

    def display(*objs, **_):
        for o in objs:
            if hasattr(o, "data") and isinstance(getattr(o, "data"), pd.DataFrame):
                o = o.data
            if isinstance(o, (pd.DataFrame, pd.Series)):
                shown.append(_timeless(o.copy()))

    saved = (IPython.display.display, fwcompare.run_study, plots.save_figure)
    IPython.display.display = display
    fwcompare.run_study = lambda study, params=None, *, output_dir=None, **_: \
        fwcompare.load_results(output_dir)
    plots.save_figure = lambda fig, *a, **k: plt.close(fig)
    try:
        namespace: dict = {}
        exec(code[0], namespace)  # the parameters cell
        namespace.update(namespace_extra)
        _run_cells(code[1:], namespace, shown)
        if "card" in namespace:  # the scorecard: every column, values and intervals too
            shown.append(namespace["card"].table.copy())
    finally:
        IPython.display.display, fwcompare.run_study, plots.save_figure = saved
        plt.close("all")
    return shown


def take(results_root: Path, out: Path) -> None:
    import yaml

    import matplotlib

    matplotlib.use("Agg")
    from fwcompare.studies import STUDIES

    snap = {"params": params_and_cells(), "notebooks": {}}
    profile = results_root.name
    for study in STUDIES:
        folder = results_root / study
        if not (folder / "results").is_dir():
            continue
        values = yaml.safe_load((ROOT / "params" / study / f"{profile}.yaml").read_text()) or {}
        print(f"{study} ...", file=sys.stderr, flush=True)
        snap["notebooks"][study] = notebook_frames(
            study, {**values, "profile": profile, "output_dir": str(folder)})
    snap["notebooks"]["summary"] = notebook_frames(
        "summary", {"profile": profile, "results_dir": str(results_root),
                    "output_dir": str(results_root / "summary")})
    out.write_bytes(pickle.dumps(snap))
    print(f"{out}: {len(snap['params'])} params files, "
          + ", ".join(f"{k} {len(v)} frames" for k, v in snap["notebooks"].items()))


def diff(old: Path, new: Path) -> int:
    import pandas as pd

    a, b = pickle.loads(old.read_bytes()), pickle.loads(new.read_bytes())
    problems = []
    for path in sorted(set(a["params"]) | set(b["params"])):
        pa, pb = a["params"].get(path), b["params"].get(path)
        if pa is None or pb is None:
            problems.append(f"{path}: only in {'new' if pa is None else 'old'}")
            continue
        if pa["params"] != pb["params"]:
            keys = sorted(k for k in set(pa["params"]) | set(pb["params"])
                          if pa["params"].get(k) != pb["params"].get(k))
            problems.append(f"{path}: validated params differ in {keys}")
        if pa["cell_ids"] != pb["cell_ids"]:
            problems.append(f"{path}: cell ids differ")
    for study in sorted(set(a["notebooks"]) | set(b["notebooks"])):
        fa, fb = a["notebooks"].get(study, []), b["notebooks"].get(study, [])
        if len(fa) != len(fb):
            problems.append(f"{study}: {len(fa)} frames before, {len(fb)} after")
        for i, (x, y) in enumerate(zip(fa, fb)):
            x, y = _timeless(x), _timeless(y)
            try:
                if isinstance(x, pd.Series):
                    pd.testing.assert_series_equal(x, y)
                else:
                    pd.testing.assert_frame_equal(x, y)
            except AssertionError as exc:
                problems.append(f"{study} frame {i}: {' '.join(str(exc).split())[:300]}")
    frames = sum(len(v) for v in a["notebooks"].values())
    print(f"{len(a['params'])} params files, {frames} frames compared: "
          + ("the same" if not problems else f"{len(problems)} differences"))
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "take":
        take(Path(sys.argv[2]).resolve(), Path(sys.argv[3]))
    elif len(sys.argv) == 4 and sys.argv[1] == "diff":
        sys.exit(diff(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
