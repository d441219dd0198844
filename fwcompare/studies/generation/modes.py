"""The generation study's modes per framework (each framework declares its
own: ``Framework.generation_modes``), and the mode each compiled mode is
compared with."""
from __future__ import annotations

from ...frameworks import GENERATION_MODES, find

# Read when used: a framework registered later (a test's) is known too.
GEN_MODES = GENERATION_MODES


def uncompiled(framework: str, mode: str) -> str | None:
    """The mode ``framework``'s compiled generation ``mode`` is compared with
    (its compile's breakeven); None for a mode that compiles nothing."""
    declared = find(framework)
    return declared.uncompiled.get(mode) if declared is not None else None
