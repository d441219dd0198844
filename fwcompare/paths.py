"""Every path is built from the project root, never from the working directory."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
PARAMS = ROOT / "params"
OUTPUTS = Path(os.environ.get("FWCOMPARE_OUTPUTS", ROOT / "outputs"))
CACHE = Path(os.environ.get("FWCOMPARE_CACHE", ROOT / ".cache"))
