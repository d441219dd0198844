"""Where fwcompare writes and reads, in a source checkout and installed elsewhere.

An installed copy is made by copying the package into a temporary folder with no
params/ or notebooks/ beside it and putting that folder first on PYTHONPATH: the
interpreter then imports it as it would from site-packages."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fwcompare.core.paths import ROOT

pytestmark = pytest.mark.slow  # each test starts an interpreter

SHOW = ("import json, fwcompare, fwcompare.core.paths as p, fwcompare.measure.peak as peak; "
        "print(json.dumps({'file': fwcompare.__file__, 'cache': str(p.CACHE), "
        "'outputs': str(p.OUTPUTS), 'params': str(p.PARAMS), 'checkout': p.IN_CHECKOUT, "
        "'peak': str(peak.CACHE)}))")


def _python(code_or_args, pythonpath: Path, tmp_path: Path, **env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FWCOMPARE_")}
    clean.update(PYTHONPATH=str(pythonpath), XDG_CACHE_HOME=str(tmp_path / "xdg-cache"),
                 XDG_DATA_HOME=str(tmp_path / "xdg-data"), **env)
    args = ["-c", code_or_args] if isinstance(code_or_args, str) else code_or_args
    return subprocess.run([sys.executable, *args], env=clean, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)


def _show(pythonpath: Path, tmp_path: Path, **env) -> dict:
    r = _python(SHOW, pythonpath, tmp_path, **env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture
def installed(tmp_path) -> Path:
    """A copy of the package in a folder of its own, as pip would install it."""
    site = tmp_path / "site-packages"
    shutil.copytree(ROOT / "fwcompare", site / "fwcompare",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return site


def test_installed_copy_caches_in_the_user_cache_folder(installed, tmp_path):
    got = _show(installed, tmp_path)
    assert Path(got["file"]).is_relative_to(installed)  # the copy, not the checkout
    assert got["checkout"] is False
    assert Path(got["cache"]) == tmp_path / "xdg-cache" / "fwcompare"
    assert Path(got["peak"]).is_relative_to(tmp_path / "xdg-cache" / "fwcompare")
    assert Path(got["outputs"]) == tmp_path / "xdg-data" / "fwcompare" / "outputs"
    assert not any(installed.glob(".cache")) and not any(installed.glob("outputs"))


def test_installed_copy_says_what_is_missing_when_params_are_needed(installed, tmp_path):
    r = _python("from fwcompare.core.paths import require_checkout; require_checkout()",
                installed, tmp_path)
    assert r.returncode == 1
    assert "CheckoutError: params/ and notebooks/ not found in " + str(installed) in r.stderr
    assert "FWCOMPARE_ROOT" in r.stderr and "git clone" in r.stderr


@pytest.mark.parametrize("command", [["run", "inference_sweep", "--profile", "smoke"],
                                     ["validate"], ["report", "--profile", "smoke"]])
def test_installed_cli_fails_clearly_without_a_checkout(installed, tmp_path, command):
    r = _python(["-m", "fwcompare", *command], installed, tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("fwcompare: params/"), r.stderr
    assert "not found in " + str(installed) in r.stderr and "Traceback" not in r.stderr


def test_installed_copy_uses_the_checkout_fwcompare_root_names(installed, tmp_path):
    got = _show(installed, tmp_path, FWCOMPARE_ROOT=str(ROOT))
    assert got["checkout"] is True
    assert Path(got["params"]) == ROOT / "params"
    assert Path(got["cache"]) == ROOT / ".cache"
    r = _python("from fwcompare.core.paths import require_checkout; require_checkout()",
                installed, tmp_path, FWCOMPARE_ROOT=str(ROOT))
    assert r.returncode == 0, r.stderr


def test_checkout_keeps_its_own_cache_and_outputs(tmp_path):
    got = _show(ROOT, tmp_path)
    assert Path(got["file"]).is_relative_to(ROOT)
    assert got["checkout"] is True
    assert Path(got["cache"]) == ROOT / ".cache"
    assert Path(got["peak"]) == ROOT / ".cache" / "peak"
    assert Path(got["outputs"]) == ROOT / "outputs"


@pytest.mark.parametrize("where", ["installed", "checkout"])
def test_cache_and_outputs_variables_win_everywhere(installed, tmp_path, where):
    got = _show(installed if where == "installed" else ROOT, tmp_path,
                FWCOMPARE_CACHE=str(tmp_path / "c"), FWCOMPARE_OUTPUTS=str(tmp_path / "o"))
    assert (Path(got["cache"]), Path(got["outputs"])) == (tmp_path / "c", tmp_path / "o")
