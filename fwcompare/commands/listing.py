"""``fwcompare list``: list the studies, profiles, models or claims."""
from __future__ import annotations

import argparse

from ..core.paths import PARAMS, require_checkout
from .base import DONE

HELP = "list the studies, profiles, models or claims"
EXAMPLES = (
    "fwcompare list models",
    "fwcompare list claims",
)


def add_arguments(p: argparse.ArgumentParser, studies: list[str]) -> None:
    p.add_argument("what", choices=["studies", "profiles", "models", "claims"])


def main(args) -> int:
    """``fwcompare list studies|profiles|models|claims``."""
    from ..studies import STUDIES

    if args.what == "studies":
        rows = [(name, st.title) for name, st in STUDIES.items()]
    elif args.what == "profiles":
        require_checkout("params")
        found: dict[str, list[str]] = {}
        for f in sorted(PARAMS.glob("*/*.yaml")):
            if f.parent.name in STUDIES:
                found.setdefault(f.stem, []).append(f.parent.name)
        rows = [(profile, f"{len(studies)} of {len(STUDIES)} studies: " + ", ".join(studies))
                for profile, studies in sorted(found.items(), key=lambda kv: -len(kv[1]))]
    elif args.what == "models":
        from ..core.models import describe_zoo

        rows = describe_zoo()
        rows.append(("PATH/", "a local checkpoint directory (config.json and one "
                            "model.safetensors), loaded offline"))
    else:
        from ..suite.claims import load_claims

        rows = [(c.id, f"[{c.hardware}, {c.study}] {c.claim}") for c in load_claims()]
    width = max(len(r[0]) for r in rows)
    print("\n".join(f"{name:<{width}}  {text}" for name, text in rows))
    return DONE
