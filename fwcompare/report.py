"""`fwcompare report`: run every study notebook for a profile and index it.

For each study: validate its params file (before anything runs), execute the
notebook with papermill into a temporary file and move it into place (a failed
run leaves no half-written output), render HTML with the code hidden, then
write ``outputs/<profile>/index.html``. A study whose inputs (params file,
notebook, library source, package versions) did not change is not run again.
"""
from __future__ import annotations

import hashlib
import html
import json
import os
import shutil
import sys
import time
from pathlib import Path

import yaml

from . import env, load_results
from .params import ParamsError, load_file
from .paths import NOTEBOOKS, OUTPUTS, PARAMS, ROOT
from .results import ResultStore
from .studies import STUDIES


def _inputs_hash(study: str, profile: str) -> str:
    h = hashlib.sha1()
    files = [PARAMS / study / f"{profile}.yaml", NOTEBOOKS / STUDIES[study].notebook,
             *sorted((ROOT / "fwcompare").rglob("*.py"))]
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    h.update(json.dumps(env.versions(), sort_keys=True).encode())
    return h.hexdigest()[:16]


def _render_html(notebook: Path, target: Path) -> None:
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(exclude_input=True, exclude_input_prompt=True,
                            exclude_output_prompt=True)
    body, _ = exporter.from_notebook_node(nbformat.read(notebook, as_version=4))
    tmp = target.with_name("." + target.name + ".tmp")
    tmp.write_text(body, encoding="utf-8")
    os.replace(tmp, target)


class ReportError(RuntimeError):
    """One or more studies failed; the others and the index were still written."""


def run_notebook(study: str, profile: str, params: dict, out: Path) -> Path:
    """Execute a study notebook into ``out``. On failure the partial notebook is
    kept as ``<study>.failed.ipynb`` (for its traceback) and the error re-raised."""
    import papermill as pm

    out.mkdir(parents=True, exist_ok=True)
    nb_in = NOTEBOOKS / STUDIES[study].notebook
    tmp = out / f".{study}.running.ipynb"
    try:
        pm.execute_notebook(str(nb_in), str(tmp), cwd=str(ROOT), kernel_name="python3",
                            parameters={**params, "profile": profile, "output_dir": str(out)},
                            log_output=True, progress_bar=False)
    except BaseException:
        if tmp.exists():
            os.replace(tmp, out / f"{study}.failed.ipynb")
        raise
    final = out / f"{study}.ipynb"
    os.replace(tmp, final)
    (out / f"{study}.failed.ipynb").unlink(missing_ok=True)
    return final


def build(profile: str = "quick", out_root: Path | None = None, fresh: bool = False,
          studies: list[str] | None = None) -> Path:
    out_root = Path(out_root or OUTPUTS) / profile
    chosen = studies or list(STUDIES)
    # Validate every params file first: a typo fails in seconds, before any run.
    raw = {}
    for study in chosen:
        path = PARAMS / study / f"{profile}.yaml"
        if not path.is_file():
            raise ParamsError(f"no params file {path} for profile {profile!r}")
        load_file(path, study)
        raw[study] = yaml.safe_load(path.read_text()) or {}
    failures: dict[str, str] = {}
    for study in chosen:
        out = out_root / study
        stamp = out / ".inputs"
        digest = _inputs_hash(study, profile)
        if (not fresh and stamp.is_file() and stamp.read_text() == digest
                and (out / f"{study}.html").is_file()):
            print(f"{study}: inputs unchanged, not run again ({out})", file=sys.stderr)
            continue
        if fresh:
            ResultStore(out / "results").archive()
        print(f"{study}: running {STUDIES[study].notebook} (profile {profile})", file=sys.stderr)
        t0 = time.perf_counter()
        try:
            executed = run_notebook(study, profile, raw[study], out)
        except Exception as exc:  # one failed study never loses the others
            last_line = (str(exc).strip().splitlines() or [""])[-1]
            failures[study] = f"{type(exc).__name__}: {last_line}"
            print(f"{study}: FAILED ({failures[study]}); see {out / (study + '.failed.ipynb')}",
                  file=sys.stderr)
            continue
        _render_html(executed, out / f"{study}.html")
        shutil.copyfile(PARAMS / study / f"{profile}.yaml", out / "params.yaml")
        stamp.write_text(digest)
        print(f"{study}: done in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    index = write_index(profile, out_root, failures)
    print(f"report: {index}", file=sys.stderr)
    if failures:
        raise ReportError(f"{len(failures)} study(ies) failed: " + "; ".join(
            f"{k}: {v}" for k, v in failures.items()))
    return index


def _table(rows: dict) -> str:
    cells = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
                    for k, v in rows.items())
    return f"<table>{cells}</table>"


def write_index(profile: str, out_root: Path, failures: dict[str, str] | None = None) -> Path:
    manifest = env.manifest()
    sections = []
    for name, study in STUDIES.items():
        out = out_root / name
        if name in (failures or {}):
            link = (f' <a href="{name}/{name}.failed.ipynb">the failed notebook</a>'
                    if (out / f"{name}.failed.ipynb").exists() else "")
            sections.append(f"<section><h2>{html.escape(study.title)}</h2>"
                            f'<p class="failed">This study failed: '
                            f"{html.escape(failures[name])}.{link}</p></section>")
            continue
        if not (out / f"{name}.html").is_file():
            sections.append(f"<section><h2>{html.escape(study.title)}</h2>"
                            f"<p>Not run for this profile.</p></section>")
            continue
        res = load_results(out)
        counts = res.results["status"].value_counts().to_dict() if len(res.results) else {}
        status = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "no cells"
        # In the order the notebook saved them, which is the order it explains them.
        figs = sorted((out / "figures").glob("*.png"), key=lambda f: f.stat().st_mtime_ns)
        imgs = "".join(
            f'<figure><a href="{name}/figures/{f.name}"><img src="{name}/figures/{f.name}" '
            f'alt="{html.escape(f.stem)}"></a><figcaption>{html.escape(f.stem)}</figcaption></figure>'
            for f in figs)
        links = " · ".join(
            f'<a href="{name}/{fn}">{label}</a>' for fn, label in [
                (f"{name}.html", "report (code hidden)"), (f"{name}.ipynb", "executed notebook"),
                ("params.yaml", "params used"), ("results/results.parquet", "results (Parquet)"),
                ("results/samples.parquet", "raw samples (Parquet)"),
                ("results/env.json", "environment of the run")]
            if (out / fn).exists())
        sections.append(f"<section><h2>{html.escape(study.title)}</h2><p>{links}</p>"
                        f"<p>Cells by status: {html.escape(status)}</p>"
                        f'<div class="figs">{imgs}</div></section>')
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>fwcompare report: {html.escape(profile)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }}
table {{ border-collapse: collapse; font-size: 0.85em; }}
th, td {{ border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; vertical-align: top; }}
.figs {{ display: flex; flex-wrap: wrap; gap: 1em; }}
figure {{ margin: 0; width: 380px; }} figure img {{ width: 100%; border: 1px solid #ddd; }}
figcaption {{ font-size: 0.8em; color: #555; }} .failed {{ color: #b00; }}
</style></head><body>
<h1>fwcompare report: profile <code>{html.escape(profile)}</code></h1>
<p>PyTorch, TensorFlow and JAX on Transformer models, measured on this machine. Every
figure shows 95% confidence intervals; failed cells are marked, not dropped. Index written
{html.escape(manifest['timestamp'])}.</p>
{''.join(sections)}
<section><h2>Environment</h2>{_table({k: (json.dumps(v) if isinstance(v, (dict, list)) else v)
                                       for k, v in manifest.items()})}</section>
</body></html>
"""
    out_root.mkdir(parents=True, exist_ok=True)
    index = out_root / "index.html"
    tmp = out_root / ".index.html.tmp"
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, index)
    return index
