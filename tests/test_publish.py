"""Publishable outputs: every figure as PNG (200 dpi), SVG, the CSV of what it
draws and its caption; safe names; one archive of a run, the host dropped."""
import json
import os
import socket
import tarfile
import zipfile

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import seaborn as sns
from PIL import Image

from fwcompare.suite import claims
from fwcompare.results import archive as export, plots
from fwcompare.suite.params import ParamsError

MANIFEST = {"cpu_model": "Test CPU", "cpu_cores_available": 2,
            "versions": {"torch": "2.13.0", "tensorflow": "2.21.0", "jax": "0.10.2",
                         "transformers": "4.57.6"}, "git_commit": "abcdef123456"}


def figure():
    fig, (a, b, c) = plt.subplots(1, 3)
    a.plot([8, 16, 32], [1.0, 2.0, 4.0], marker="o", label="torch/eager")
    a.fill_between([8, 16, 32], [0.9, 1.8, 3.5], [1.1, 2.2, 4.4], alpha=0.3)
    a.errorbar([8], [3.0], yerr=[[0.5], [1.0]], fmt="o", label="jax/jit")
    a.set_title("latency, batch 1")
    b.bar(["eager", "xla"], [5.0, 2.5], label="tensorflow")
    sns.heatmap(pd.DataFrame([[1.0, 0.5], [np.nan, 2.0]], index=["b1", "b8"],
                             columns=["s32", "s128"]), ax=c, cbar=True)
    fig.suptitle("Latency per call")
    plots.footer(fig, MANIFEST, "bands: 95% CI")
    return fig


def test_drawn_data_holds_every_number_drawn():
    d = plots.drawn_data(figure())
    line = d[(d["kind"] == "line") & (d["series"] == "torch/eager")]
    assert list(line["x"]) == [8, 16, 32] and list(line["y"]) == [1.0, 2.0, 4.0]
    assert set(line["panel_title"]) == {"latency, batch 1"}
    band = d[d["kind"] == "band"].set_index("x")
    assert band.loc[16, "y_low"] == 1.8 and band.loc[32, "y_high"] == 4.4
    err = d[d["kind"] == "interval"].iloc[0]
    assert (err["x"], err["y_low"], err["y_high"]) == (8, 2.5, 4.0)
    bars = d[d["kind"] == "bar"]
    assert list(zip(bars["x_label"], bars["y"])) == [("eager", 5.0), ("xla", 2.5)]
    cells = d[d["kind"] == "cell"]
    got = {(r.x_label, r.y_label): r.value for r in cells.itertuples()}
    assert got[("s32", "b1")] == 1.0 and got[("s128", "b8")] == 2.0
    assert np.isnan(got[("s32", "b8")])  # a masked (missing) cell stays, as NaN


def test_save_figure_writes_png_svg_csv_and_caption(tmp_path):
    plots.save_figure(figure(), tmp_path, "latency")
    png = Image.open(tmp_path / "latency.png")
    assert min(png.info["dpi"]) >= 199.5
    assert "<svg" in (tmp_path / "latency.svg").read_text()[:2000]
    assert len(pd.read_csv(tmp_path / "latency.csv")) > 10
    cap = (tmp_path / "latency.caption.txt").read_text()
    assert cap.startswith("Latency per call. bands: 95% CI")
    assert "Test CPU (2 cores)" in cap and "torch 2.13.0" in cap and "commit abcdef12" in cap


@pytest.mark.parametrize("name", ["../x", "a b", "Latency", "x.png", "", "<img>"])
def test_unsafe_figure_names_are_refused(tmp_path, name):
    with pytest.raises(ValueError, match="lower-case letters"):
        plots.save_figure(plt.figure(), tmp_path, name)
    assert not list(tmp_path.iterdir())


def test_a_claim_id_must_be_a_slug(tmp_path):
    import yaml

    raw = yaml.safe_load(claims.CLAIMS_FILE.read_text())
    raw["claims"][0]["id"] = 'x"><script>alert(1)</script>'
    bad = tmp_path / "claims.yaml"
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(ParamsError, match="key 'id': must be lower-case letters"):
        claims.load_claims(bad)


def make_run(root):
    """A profile folder as a report leaves it: one study, the scorecard, the index."""
    from fwcompare.results.store import ResultStore, make_row
    from fwcompare.core.spec import RunSpec

    host = socket.gethostname()
    st = root / "inference_sweep"
    store = ResultStore(st / "results", run_id="r1")
    s = RunSpec(study="inference_sweep", model="tiny-bert", framework="torch", mode="eager",
                device="cpu", dtype="float32", batch_size=1, seq_len=8, threads=2)
    store.append(make_row(s, status="ok", run_id="r1", provenance={"hostname": host}),
                 [0.01, 0.011, 0.012])
    (st / "results" / "env.json").write_text(json.dumps({"hostname": host, "cpu_model": "C"}))
    (st / "results" / "work").mkdir()
    (st / "results" / "work" / "worker.log").write_text("log")
    plots.save_figure(figure(), st / "figures", "latency")
    (st / "inference_sweep.html").write_text(f"<p>ran on {host}</p><img src='data:image/png;"
                                             f"base64,AAAA+{host}9/B'>")
    (st / "params.yaml").write_text("models: [tiny-bert]\n")
    (root / "summary").mkdir()
    (root / "summary" / "scorecard.json").write_text('{"claims": []}')
    (root / "index.html").write_text(f"<td>{host}</td>")
    return host


@pytest.mark.parametrize("suffix", [".tar.gz", ".zip"])
def test_export_archives_a_run_and_can_drop_the_host(tmp_path, suffix):
    host = make_run(tmp_path / "quick")
    mask = os.umask(0o022)
    try:
        archive = export.export(tmp_path / "quick", tmp_path / f"out{suffix}", drop_host=True)
    finally:
        os.umask(mask)
    assert archive.stat().st_mode & 0o777 == 0o644  # to share: a new file's mode, not 0600
    if suffix == ".zip":
        with zipfile.ZipFile(archive) as z:
            files = {n.split("/", 1)[1]: z.read(n) for n in z.namelist()}
    else:
        with tarfile.open(archive) as t:
            files = {m.name.split("/", 1)[1]: t.extractfile(m).read() for m in t.getmembers()}
    for name in ("inference_sweep/results/results.parquet",
                 "inference_sweep/results/samples.parquet", "inference_sweep/results/env.json",
                 "inference_sweep/figures/latency.png", "inference_sweep/figures/latency.svg",
                 "inference_sweep/figures/latency.csv", "inference_sweep/params.yaml",
                 "inference_sweep/inference_sweep.html", "summary/scorecard.json",
                 "index.html", "export.json"):
        assert name in files, name
    assert not any("/work/" in n or "cells/" in n for n in files)  # no per-cell or log files
    import io

    for name in ("results.parquet", "samples.parquet"):
        df = pd.read_parquet(io.BytesIO(files[f"inference_sweep/results/{name}"]))
        assert set(df["hostname"]) == {""}
    assert json.loads(files["inference_sweep/results/env.json"])["hostname"] == ""
    assert files["index.html"].decode() == "<td>(host)</td>"
    page = files["inference_sweep/inference_sweep.html"].decode()
    assert "ran on (host)" in page and f"AAAA+{host}9/B" in page  # base64 left whole
    assert json.loads(files["export.json"])["host_dropped"] is True
    kept = export.collect(tmp_path / "quick", drop_host=False)
    assert host in kept["index.html"].decode()


def test_export_of_one_study_puts_its_files_at_the_archives_top(tmp_path):
    """A `run --out myrun` folder: myrun.tar.gz holds myrun/results/..., not
    myrun/myrun/results/... (a newcomer's walkthrough found the name twice)."""
    make_run(tmp_path / "quick")
    run = (tmp_path / "quick" / "inference_sweep").rename(tmp_path / "myrun")
    archive = export.export(run)
    assert archive == tmp_path / "myrun.tar.gz"
    with tarfile.open(archive) as t:
        names = set(t.getnames())
    assert {"myrun/results/results.parquet", "myrun/inference_sweep.html",
            "myrun/figures/latency.png", "myrun/export.json"} <= names, names
    assert not any(n.startswith("myrun/myrun/") for n in names), names


def test_export_to_a_name_that_says_no_format_is_refused(tmp_path):
    make_run(tmp_path / "quick")
    for name in ("x.tar", "x.tgz", "x"):
        with pytest.raises(export.ExportError, match="ends in .tar.gz or .zip"):
            export.export(tmp_path / "quick", tmp_path / name)
        assert not (tmp_path / name).exists()


def test_export_of_no_run_is_refused(tmp_path):
    with pytest.raises(export.ExportError, match="no study results"):
        export.export(tmp_path, tmp_path / "x.tar.gz")
    assert not (tmp_path / "x.tar.gz").exists()


def test_the_export_command(tmp_path, capsys):
    from fwcompare.commands.cli import main

    make_run(tmp_path / "quick")
    assert main(["export", str(tmp_path / "quick"), "--drop-host"]) == 0
    assert (tmp_path / "quick.tar.gz").is_file()
    assert "archive:" in capsys.readouterr().out
    assert main(["export", str(tmp_path / "none")]) == 2
    assert "no such folder" in capsys.readouterr().err


def _card(rows):
    return claims.Scorecard(pd.DataFrame(rows), pd.DataFrame(columns=["id", "cell", "value"]),
                            "quick", frozenset({"precision_stability"}))


def test_the_scorecard_at_a_glance_draws_every_judged_claim_by_study(tmp_path):
    nan = float("nan")
    ratio = dict(claim="c", expected=1.2, band_low=1.1, band_high=1.3, unit="time ratio",
                 metric="time_ratio", study="training")
    rows = [dict(ratio, id="fast", verdict="supported", value=1.2, ci_low=1.15, ci_high=1.25),
            dict(ratio, id="count", study="mixed_precision", metric="precision_stability",
                 expected=1, band_low=0.0, band_high=float("inf"), verdict="contradicted",
                 value=-2.0, ci_low=nan, ci_high=nan),
            dict(ratio, id="gpu-only", verdict="not measured here", value=0.9, ci_low=0.8,
                 ci_high=1.0),
            dict(ratio, id="slow", verdict="inconclusive", value=1.1, ci_low=0.9, ci_high=1.35)]
    fig = plots.scorecard_forest(_card(rows), MANIFEST)
    d = plots.drawn_data(fig)
    # one marker per judged claim, its verdict named; the unjudged one not drawn
    marks = d[(d["kind"] == "point") & d["series"].str.contains(":")]
    assert sorted(marks["series"]) == ["count: contradicted", "fast: supported",
                                      "slow: inconclusive"]
    assert list(marks.set_index("series").loc[["fast: supported", "count: contradicted"], "x"]) \
        == [1.2, -2.0]
    # the intervals drawn are the CIs (none for the figure without one)
    spans = d[d["kind"] == "interval"]
    assert sorted(zip(spans["x_low"], spans["x_high"])) == [(0.9, 1.35), (1.15, 1.25)]
    # grouped by study, in the order the claims come: training's two, then mixed precision's
    texts = list(d.loc[d["kind"] == "text", "text"])
    named = [t for t in texts if t in ("training study", "fast", "slow", "mixed_precision study",
                                       "count", "gpu-only")]
    assert named == ["training study", "fast", "slow", "mixed_precision study", "count"]
    plots.save_figure(fig, tmp_path, "scorecard_forest")
    cap = (tmp_path / "scorecard_forest.caption.txt").read_text()
    assert cap.startswith("The scorecard at a glance: 1 supported, 1 contradicted, "
                          "1 inconclusive, 1 not measured here"), cap
    assert "Test CPU" in cap and (tmp_path / "scorecard_forest.png").stat().st_size > 10_000
    none = plots.scorecard_forest(_card([rows[2]]), MANIFEST)
    assert "no claim could be judged" in " ".join(t.get_text() for t in none.axes[0].texts)
