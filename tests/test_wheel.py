"""fwcompare as pip installs it from a wheel: built from this checkout, installed
into a fresh venv, run from a folder outside the checkout.

The venv reaches the test venv's packages (torch, pandas...) through a path
file, so nothing is downloaded; fwcompare itself comes from the wheel alone
(the checkout's editable install is a .pth the fresh venv never reads). A
module or data file the wheel leaves out fails here, where a copy of the
source tree (tests/test_paths.py) would still pass."""
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fwcompare import __version__
from fwcompare.core.paths import ROOT

pytestmark = pytest.mark.slow  # it builds a wheel and starts interpreters


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the fresh venv's python, the wheel, a folder outside the checkout)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"  # a copy: setuptools builds in its source folder (build/, egg-info)
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "fwcompare", src / "fwcompare",
                    ignore=shutil.ignore_patterns("__pycache__"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "--quiet", "--wheel-dir", str(tmp / "dist"), str(src)],
                       capture_output=True, text=True, timeout=300, cwd=tmp)
    assert r.returncode == 0, r.stderr[-3000:]
    wheel, = (tmp / "dist").glob("fwcompare-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig."
                                   "get_paths()['purelib'])"], capture_output=True, text=True,
                                  check=True).stdout.strip())
    # the dependencies: the test venv's site-packages, as a plain path (its .pth
    # files, the editable fwcompare's among them, are not read from there)
    (purelib / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                        "--quiet", "--no-deps", "--no-index", str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    away = tmp / "elsewhere"
    away.mkdir()
    return python, wheel, away


def run(python, away, *args, **env):
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("FWCOMPARE_", "PYTHON")) and k != "VIRTUAL_ENV"}
    clean.update(HOME=str(away), XDG_CACHE_HOME=str(away / "cache"),
                 XDG_DATA_HOME=str(away / "data"), **env)
    return subprocess.run([str(python), *args], capture_output=True, text=True, cwd=away,
                          env=clean, timeout=600)


def test_the_wheel_holds_every_module_and_data_file(installed):
    _, wheel, _ = installed
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    source = {str(p.relative_to(ROOT)) for p in (ROOT / "fwcompare").rglob("*")
              if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".tsv")}
    assert source and source <= names, sorted(source - names)


def test_the_installed_command_runs_from_outside_the_checkout(installed):
    python, _, away = installed
    r = run(python, away, "-c", "import fwcompare, sys; print(fwcompare.__file__)")
    assert r.returncode == 0, r.stderr
    assert not Path(r.stdout.strip()).is_relative_to(ROOT), r.stdout  # the wheel's copy
    r = run(python.parent / "fwcompare", away, "--version")  # pip's console script
    assert r.returncode == 0 and __version__ in r.stdout + r.stderr, (r.stdout, r.stderr)
    fwcompare = [str(python), "-m", "fwcompare"]
    # Without a checkout, a run says what is missing, before anything is measured
    r = run(python, away, *fwcompare[1:], "run", "inference_sweep", "--profile", "smoke",
            "--dry-run")
    assert r.returncode == 2 and "FWCOMPARE_ROOT" in r.stderr, r.stderr
    # ...and with one named, plans the smoke run and measures nothing.
    r = run(python, away, *fwcompare[1:], "run", "inference_sweep", "--profile", "smoke",
            "--dry-run", FWCOMPARE_ROOT=str(ROOT))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("inference_sweep: ") and " cells, " in r.stdout, r.stdout
    assert "estimate: " in r.stdout
    # the package's own data file, from the installed copy
    r = run(python, away, "-c", "from importlib.resources import files; "
            "print(len((files('fwcompare') / 'data' / 'sentence_pairs.tsv').read_text()))")
    assert r.returncode == 0 and int(r.stdout) > 100, r.stderr
