"""Store the cell ids of a study's params files in tests/data/cell_ids.json.

    python tools/cell_ids.py STUDY [--check]

``tests/test_cell_ids.py`` holds every params file's cell ids to what they
were when stored: a new study (or a new params file) stores its own here
once; the ids of the files already stored are never rewritten (a changed id
would orphan every stored result of that cell). As the test does, the ids
are made on 2 cores (``threads: 0`` means the cores a run may use).
``--check``: print what would be added, write nothing.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
STORE = ROOT / "tests" / "data" / "cell_ids.json"


def new_ids(study: str, stored: dict) -> dict[str, list[str]]:
    """The ids of ``study``'s params files not stored yet."""
    from fwcompare.core import env
    from fwcompare.studies import STUDIES
    from fwcompare.suite import params

    if study not in STUDIES:
        raise SystemExit(f"unknown study {study!r}; known: {', '.join(STUDIES)}")
    env.default_threads = lambda: 2  # the stored ids' cores (tests/test_cell_ids.py)
    out = {}
    for file in sorted((ROOT / "params" / study).glob("*.yaml")):
        key = str(file.relative_to(ROOT))
        if key not in stored:
            out[key] = [c.cell_id for c in STUDIES[study].cells(params.load_file(file, study))]
    return out


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        raise SystemExit(__doc__)
    stored = json.loads(STORE.read_text())
    added = new_ids(argv[0], stored)
    for key, ids in added.items():
        print(f"{key}: {len(ids)} cells")
    if not added:
        print(f"every params file of {argv[0]} is stored already")
    elif "--check" not in argv:
        STORE.write_text(json.dumps({**stored, **added}, indent=0, sort_keys=True) + "\n")
        print(f"written: {STORE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
