"""The report's first page, index.html: the claims scorecard, then every
study's figures and links, then the environment."""
from __future__ import annotations

import html
import json
import math
import urllib.parse
from pathlib import Path

from .. import claims
from ...core import env, models
from ... import frameworks, load_results
from ...core.atomic import UnreadableFile, write_text
from ...results import tables
from ...studies import STUDIES

SUMMARY = "summary"  # the claims scorecard: judged after every study, opens index.html
FOREST = "scorecard_forest"  # its figure of every judged claim, above its table
SUMMARY_NOTEBOOK = "summary.ipynb"
# A quiet machine's typical round-to-round spread of the timed claims (the
# variance prior's s0, from three fresh quick reports: docs/measurements.md, "the
# figures the library's comments quoted"). Where a run's spread is above
# NOISY_FACTOR times it, the first page says the machine was noisy, and by how much.
QUIET_SPREAD = 0.01
NOISY_FACTOR = 2.0
# Its parameters: the report sets results_dir (and profile, output_dir, as for
# every notebook); claims_file is for running it by hand on other claims.
SUMMARY_PARAMETERS = ("profile", "results_dir", "claims_file", "output_dir")


def _readable_scorecard(out: Path) -> bool:
    """Whether the scorecard in ``out`` can be read (one cut short is judged anew)."""
    try:
        claims.read(out)
    except UnreadableFile:
        return False
    return True


def _href(path: str) -> str:
    """A relative link, quoted for a URL and escaped for an attribute."""
    return html.escape(urllib.parse.quote(path), quote=True)


def _figure_html(folder: str, png: Path, lead: str = "") -> str:
    """One figure of the index: the PNG, its caption (``<name>.caption.txt``,
    plots.save_figure: what it shows, the hardware, the versions; the file
    name where a figure has none) after ``lead``, and links to its SVG and its
    data (CSV)."""
    stem = png.name[:-len(".png")]
    cap = png.with_name(f"{stem}.caption.txt")
    text = cap.read_text().strip() if cap.is_file() else stem
    text = f"{lead}: {text}" if lead else text
    alts = " · ".join(f'<a href="{_href(f"{folder}/{stem}{ext}")}">{label}</a>'
                      for ext, label in ((".svg", "SVG"), (".csv", "data (CSV)"))
                      if png.with_name(stem + ext).is_file())
    src = _href(f"{folder}/{png.name}")
    return (f'<figure><a href="{src}"><img src="{src}" alt="{html.escape(text)}"></a>'
            f"<figcaption>{html.escape(text)}{' · ' + alts if alts else ''}</figcaption>"
            f"</figure>")


def _table(rows: dict) -> str:
    cells = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
                    for k, v in rows.items())
    return f"<table>{cells}</table>"


def _scorecard_section(out_root: Path, failures: dict[str, str]) -> str:
    """The claims scorecard, first thing on the page: one row per claim with
    its verdict, coloured; links to each claim's figure."""
    out = out_root / SUMMARY
    head = "<section id=\"scorecard\"><h2>Claims scorecard</h2>"
    try:
        card = claims.read(out)
    except UnreadableFile as exc:
        return f'{head}<p class="failed">{html.escape(str(exc))}</p></section>'

    if SUMMARY in failures or card is None:
        why = (f"The scorecard failed: {html.escape(failures[SUMMARY])}. "
               f'<a href="{SUMMARY}/{SUMMARY}.failed.ipynb">the failed notebook</a>'
               if SUMMARY in failures and (out / f"{SUMMARY}.failed.ipynb").exists() else
               "No scorecard for this profile yet.")
        return f'{head}<p class="failed">{why}</p></section>'
    counts = " · ".join(f'<span class="v" data-verdict="{v}">{n} {v}</span>'
                        for v, n in card["verdicts"].items() if n)
    counts += _unmeasured_html(card)
    rows = []
    for r in card["claims"]:
        fig = f"{SUMMARY}/figures/claim_{r['id']}.png"
        fig_link = f' <a href="{_href(fig)}">figure</a>' if (out_root / fig).is_file() else ""
        rows.append(
            f'<tr id="claim-{html.escape(r["id"])}"><td><b>{html.escape(r["claim"])}</b>'
            f'<br><span class="src" title="{html.escape(r["source_text"])}">'
            f'{html.escape(r["source"])}</span>{fig_link}</td>'
            f"<td>{html.escape(r['claimed'])}</td>"
            f"<td><span class=\"num\">{html.escape(claims.format_value(r))}</span><br>"
            f"<span class=\"src\">"
            f"{html.escape(r['unit'])}</span></td>"
            f"<td class=\"num\">{html.escape(claims.format_band(r))}</td>"
            f'<td class="verdict" data-verdict="{html.escape(r["verdict"])}">'
            f"{html.escape(r['verdict'])}</td>"
            f'<td title="{html.escape(r["cells"])}">{r["n_cells"]}</td>'
            f"<td>{html.escape(r['measured_on'].split(':')[0] if r['n_cells'] else '')}</td>"
            f"<td>{html.escape(r['note'])}</td></tr>")
    links = " · ".join(
        f'<a href="{SUMMARY}/{fn}">{label}</a>' for fn, label in [
            (f"{SUMMARY}.html", "scorecard report, one figure per claim"),
            (f"{SUMMARY}.ipynb", "executed notebook"), ("claims.yaml", "claims judged"),
            ("scorecard.csv", "scorecard (CSV)"), ("points.csv", "per-cell values (CSV)")]
        if (out / fn).exists())
    figs = "".join(
        _figure_html(f"{SUMMARY}/figures", png, f"{r['id']} ({r['verdict']})")
        for r in card["claims"]
        for png in [out / "figures" / f"claim_{r['id']}.png"] if png.is_file())
    figs = (f'<details open><summary>Each claim beside its measurement (green: where the '
            f'claim holds; dashed: the claimed figure; dots: each cell; diamond: the summary '
            f'with its 95% CI)</summary><div class="figs">{figs}</div></details>'
            if figs else "")
    forest = out / "figures" / f"{FOREST}.png"
    glance = (f'<div class="glance">{_figure_html(f"{SUMMARY}/figures", forest, "")}</div>'
              if forest.is_file() else "")
    priors = card.get("variance_priors") or {}
    spreads = sorted(math.sqrt(p["var"]) for p in priors.values())
    # the quietest class: the others spread more by their kind (whole training
    # runs, exports), not by the machine
    spread = spreads[0] if spreads else math.nan
    pooled = ""
    if priors:
        worth = sorted(min(float(p["dof"]), float(p.get("total_dof", "inf")))  # "inf" in JSON
                       for p in priors.values())
        pooled = (f" A timed claim's interval from rounds borrows the round-to-round spread "
                  f"of the other timed claims of its class (one study on one device and "
                  f"schedule; moderated t) where its class has three or more: "
                  f"{len(priors)} class(es) here, typical spreads "
                  f"{_span(spreads, '.2%')} of the log ratio, worth {_span(worth, '.0f')} "
                  f"degrees of freedom; one that spreads more than its class keeps its own "
                  f"t, and the scorecard CSV gives each claim's own-t interval beside "
                  f"(docs/methodology.md).")
    if spread > NOISY_FACTOR * QUIET_SPREAD:
        pooled += (f" <b>This machine was noisy:</b> even the quietest class's spread is "
                   f"{spread / QUIET_SPREAD:.0f} "
                   f"times a quiet machine's (about {QUIET_SPREAD:.0%} on a 2-core Xeon), so its "
                   f"intervals are wider and more verdicts inconclusive than a quiet machine's; "
                   f"a quieter machine, or more rounds (<code>--set rounds=5</code>), narrows "
                   f"them.")
    return (f"{head}<p>Each claim from the 2019 Hugging Face study or framework-comparison "
            f"articles, judged against this profile's measurements: <b>supported</b> when "
            f"the whole interval (95%, or the level it names after extra rounds) lies "
            f"where the claim holds, <b>contradicted</b> when it lies "
            f"wholly outside, <b>inconclusive</b> when it straddles an edge, <b>not measured "
            f"here</b> when this run has no cells for it (a GPU claim on a CPU, say). "
            f"Verdicts are about this machine, not the frameworks in general."
            f"{_wrong_html(card['claims'])}{pooled}</p>"
            f"<p>{counts}</p><p>{links}</p>{glance}"
            f'<table class="scorecard"><thead><tr><th>claim</th><th>claimed</th>'
            f"<th>measured here (interval)</th><th>holds when</th><th>verdict</th>"
            f"<th>cells</th><th>on</th><th>note</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>{figs}</section>")


def _span(values: list[float], spec: str) -> str:
    """"a" or "a to b": the smallest and the largest of sorted ``values``."""
    lo, hi = format(values[0], spec), format(values[-1], spec)
    return lo if lo == hi else f"{lo} to {hi}"


def _wrong_html(rows: list[dict]) -> str:
    """How many wrong verdicts a scorecard of this size should expect, at
    most, and why (``claims.wrong_verdicts_bound``)."""
    decided = [r for r in rows if r["verdict"] in ("supported", "contradicted")]
    if not decided:
        return ""
    bound = claims.wrong_verdicts_bound(rows)
    bare = claims.decided_without_interval(rows)
    text = (f" Of the {len(decided)} decided verdicts, at most about {bound:.1f} are expected "
            f"to be wrong: one is wrong only where its interval misses the truth on one "
            f"side, a chance of at most 2.5% at 95% (5% for a contradicted claim whose band "
            f"has two edges), and a claim that took extra rounds spent that chance at each "
            f"look it took, as long as the intervals keep their level.")
    exact = sum(1 for r in decided if r.get("exact") in (True, "True"))
    if exact:
        text += (f" {exact} of them rest on an exact figure (the same in every process, or a "
                 f"file's size), not counted in that bound.")
    if bare:
        text += (f" {bare} of them rest on a single figure without an interval and carry no "
                 f"such bound.")
    return text


def _unmeasured_html(card: dict) -> str:
    """Why the claims not measured here are not, counted by reason
    (``unmeasured.why_unmeasured``: a framework or package this machine lacks, the
    GPUs a study needs, what the profile's params leave out...), most first;
    "" where every claim was measured (or the scorecard predates the count)."""
    from collections import Counter

    why = Counter(r.get("unmeasured") for r in card["claims"]
                  if r["verdict"] == "not measured here" and r.get("unmeasured"))
    if not why:
        return ""
    return ("<br>Not measured here, by reason: " + " · ".join(
        f"<b>{n}</b> {html.escape(reason)}" for reason, n in why.most_common()))


def _not_installed_html() -> str:
    """The frameworks this machine lacks, said once on the first page: their
    cells are unsupported with that reason (``frameworks.not_installed``)."""
    lacking = [why for fw in frameworks.BUILT_IN if (why := frameworks.not_installed(fw))]
    missing = [why for m in models.REAL if (why := models.not_installed(m))]
    return "".join([*(f'<p class="failed">{html.escape(why)}: its cells are unsupported and '
                      f'its claims not judged from them; the other frameworks ran.</p>'
                      for why in lacking),
                    *(f'<p class="failed">{html.escape(why)}: its cells are unsupported and '
                      f'the claims about it not judged from them; the other models ran.</p>'
                      for why in missing)])


def write_index(profile: str, out_root: Path, failures: dict[str, str] | None = None) -> Path:
    manifest = env.manifest()
    failures = failures or {}
    sections = []
    toc = []
    for name, study in STUDIES.items():
        out = out_root / name
        toc.append(f'<a href="#{name}">{html.escape(study.title.split(":")[0])}</a>')
        head = f'<section id="{name}"><h2>{html.escape(study.title)}</h2>'
        if name in failures:
            link = (f' <a href="{name}/{name}.failed.ipynb">the failed notebook</a>'
                    if (out / f"{name}.failed.ipynb").exists() else "")
            sections.append(f'{head}<p class="failed">This study failed: '
                            f"{html.escape(failures[name])}.{link}</p></section>")
            continue
        if not (out / f"{name}.html").is_file():
            sections.append(f"{head}<p>Not run for this profile.</p></section>")
            continue
        res = load_results(out)
        counts = res.results["status"].value_counts().to_dict() if len(res.results) else {}
        status = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "no cells"
        # In the order the notebook saved them, which is the order it explains them.
        figs = sorted((out / "figures").glob("*.png"), key=lambda f: f.stat().st_mtime_ns)
        imgs = "".join(_figure_html(f"{name}/figures", f) for f in figs)
        links = " · ".join(
            f'<a href="{name}/{fn}">{label}</a>' for fn, label in [
                (f"{name}.html", "report (code hidden)"), (f"{name}.ipynb", "executed notebook"),
                ("params.yaml", "params used"), ("results/results.parquet", "results (Parquet)"),
                ("results/samples.parquet", "raw samples (Parquet)"),
                ("results/env.json", "environment of the run")]
            if (out / fn).exists())
        sections.append(f"{head}<p>{links}</p>"
                        f"<p>Cells by status: {html.escape(status)}</p>"
                        f'<div class="figs">{imgs}</div></section>')
    colours = "".join(f'[data-verdict="{v}"] {{ background: {c}; }}\n'
                      for v, c in claims.VERDICT_COLOURS.items())
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>fwcompare report: {html.escape(profile)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222;
       padding: 0 1em; }}
table {{ border-collapse: collapse; font-size: 0.85em; }}
th, td {{ border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; vertical-align: top; }}
table.scorecard {{ width: 100%; }} table.scorecard td:first-child {{ min-width: 16em; }}
.num {{ white-space: nowrap; }}
td.verdict {{ font-weight: bold; white-space: nowrap; }} .v {{ padding: 0.1em 0.4em; }}
.src {{ color: #555; font-size: 0.85em; }} nav a {{ margin-right: 1em; }}
{colours}.figs {{ display: flex; flex-wrap: wrap; gap: 1em; }}
figure {{ margin: 0; width: 380px; }} figure img {{ width: 100%; border: 1px solid #ddd; }}
.glance figure {{ width: min(100%, 900px); margin: 0.5em 0 1em; }}
figcaption {{ font-size: 0.8em; color: #555; }} .failed {{ color: #b00; }}
</style></head><body>
<h1>fwcompare report: profile <code>{html.escape(profile)}</code></h1>
<p>PyTorch, TensorFlow and JAX on Transformer models, measured on this machine
({html.escape(tables.hardware_line(manifest))}). Every figure shows 95% confidence intervals;
failed cells are marked, not dropped. Index written {html.escape(manifest['timestamp'])}.</p>
{_not_installed_html()}
<nav><a href="#scorecard">Claims scorecard</a>{''.join(toc)}<a href="#environment">Environment</a></nav>
{_scorecard_section(out_root, failures)}
{''.join(sections)}
<section id="environment"><h2>Environment</h2>{_table({k: (json.dumps(v) if isinstance(v, (dict, list)) else v)
                                       for k, v in manifest.items()})}</section>
</body></html>
"""
    out_root.mkdir(parents=True, exist_ok=True)
    return write_text(out_root / "index.html", page)
