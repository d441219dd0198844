"""``fwcompare export RUN``: one archive of a run, to publish or hand on.

RUN is a profile's output folder (``outputs/quick``: every study and the
scorecard) or one study's. The archive (``.tar.gz``, or ``.zip`` by its name)
holds, per study: results, raw samples and losses (one Parquet file each),
the environment manifest (``env.json``), the params used, every figure (PNG,
SVG, its data as CSV, its caption) and the rendered pages; the scorecard
(JSON, CSV, the per-cell points, the claims judged) and ``index.html``. Not
the per-cell files the consolidated ones repeat, worker logs or archived
earlier runs (``previous/``). ``export.json`` at its top says what is in it.

``drop_host``: the machine's name leaves every file: the ``hostname``
columns are emptied, ``env.json``'s entry too, and the name as a word of any
text file (pages, notebooks, CSV) becomes ``(host)``. Nothing else about the
machine is dropped (CPU model, cores, GPU: what a reader needs to weigh the
figures).
"""
from __future__ import annotations

import io
import json
import os
import re
import socket
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

import pandas as pd

from .store import load_results
from .compare import study_folders
from .store import now_iso

TEXT = (".html", ".ipynb", ".json", ".csv", ".md", ".txt", ".yaml", ".svg")
# Files of a study folder that go in, beside figures/ (glob patterns).
STUDY_FILES = ("*.html", "*.ipynb", "params.yaml", "scorecard.json", "scorecard.csv",
               "points.csv", "claims.yaml")
TOP_FILES = ("index.html", "time_breakdown.csv")
HOST_MARK = "(host)"


class ExportError(ValueError):
    """RUN is no output folder."""


def _scrub(text: str, host: str) -> str:
    """``host`` where it stands alone (not inside a word or a base64 run) -> (host)."""
    return re.sub(rf"(?<![A-Za-z0-9+/=_.-]){re.escape(host)}(?![A-Za-z0-9+/=_-])", HOST_MARK,
                  text)


def _parquet(df: pd.DataFrame, drop_host: bool) -> bytes:
    if drop_host and "hostname" in df:
        df = df.assign(hostname=pd.Series([""] * len(df), index=df.index, dtype="string"))
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


def collect(run: Path | str, drop_host: bool = False) -> dict[str, bytes]:
    """Archive path -> bytes of everything an export holds (see the module)."""
    run = Path(run)
    try:
        studies = study_folders(run)
    except ValueError as exc:
        raise ExportError(str(exc)) from exc
    single = (run / "results").is_dir()
    host = socket.gethostname()
    files: dict[str, bytes] = {}

    def add_file(name: str, path: Path) -> None:
        data = path.read_bytes()
        if drop_host and path.suffix in TEXT:
            data = _scrub(data.decode("utf-8", errors="surrogateescape"), host).encode(
                "utf-8", errors="surrogateescape")
        files[name] = data
    for name, folder in studies.items():
        # a profile's folder: a folder per study; one study's: its files at the top (the
        # archive's own top folder already bears its name: not myrun/myrun/results)
        prefix = f"{name}/" if not single else ""
        res = load_results(folder)
        files[f"{prefix}results/results.parquet"] = _parquet(res.results, drop_host)
        files[f"{prefix}results/samples.parquet"] = _parquet(res.samples, drop_host)
        if res.losses is not None and len(res.losses):
            files[f"{prefix}results/losses.parquet"] = _parquet(res.losses, drop_host)
        if res.manifest:
            manifest = dict(res.manifest)
            if drop_host:
                manifest["hostname"] = ""
            files[f"{prefix}results/env.json"] = _scrub(
                json.dumps(manifest, indent=1), host).encode() if drop_host else \
                json.dumps(manifest, indent=1).encode()
        for pattern in STUDY_FILES:
            for f in sorted(folder.glob(pattern)):
                add_file(f"{prefix}{f.name}", f)
        for f in sorted((folder / "figures").glob("*")):
            if f.is_file():
                add_file(f"{prefix}figures/{f.name}", f)
    # The scorecard folder has no results/ of its own: its files by name.
    if not single and (run / "summary").is_dir():
        for pattern in STUDY_FILES:
            for f in sorted((run / "summary").glob(pattern)):
                add_file(f"summary/{f.name}", f)
        for f in sorted((run / "summary" / "figures").glob("*")):
            if f.is_file():
                add_file(f"summary/figures/{f.name}", f)
    if not single:
        for pattern in TOP_FILES:
            for f in sorted(run.glob(pattern)):
                add_file(f.name, f)
    files["export.json"] = json.dumps({
        "exported": now_iso(), "from": run.name, "studies": sorted(studies),
        "host_dropped": drop_host, "files": sorted(files)}, indent=1).encode()
    return files


def export(run: Path | str, archive: Path | str | None = None,
           drop_host: bool = False) -> Path:
    """Write the archive (default ``<RUN>.tar.gz`` beside RUN) through a
    temporary file: a failed export leaves nothing half-written."""
    run = Path(run).resolve()
    archive = Path(archive) if archive else run.with_name(run.name + ".tar.gz")
    if not archive.name.endswith((".tar.gz", ".zip")) or archive.name in (".tar.gz", ".zip"):
        raise ExportError(f"{archive}: an archive's name ends in .tar.gz or .zip (its format)")
    files = collect(run, drop_host)
    archive.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=archive.parent, prefix=f".{archive.name}.")
    os.close(fd)
    try:
        top = archive.name.removesuffix(".tar.gz").removesuffix(".zip")
        if archive.suffix == ".zip":
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
                for name, data in files.items():
                    z.writestr(f"{top}/{name}", data)
        else:
            with tarfile.open(tmp, "w:gz") as t:
                for name, data in files.items():
                    info = tarfile.TarInfo(f"{top}/{name}")
                    info.size, info.mtime = len(data), time.time()
                    t.addfile(info, io.BytesIO(data))
        mask = os.umask(0)  # an archive to share: the mode a new file gets (mkstemp's is 0600)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, archive)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return archive
