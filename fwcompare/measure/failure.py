"""What became of a cell that did not finish: its status, from the exception
that stopped it (the gate's and the cell's measurement share it)."""
from __future__ import annotations


class CellFailure(Exception):
    """A cell (or every cell of a variant) cannot be measured: its status and message."""

    def __init__(self, status: str, message: str, figures: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.figures = status, message, figures or {}


def failure_status(backend, exc: BaseException) -> str:
    from ..frameworks import Unsupported

    if isinstance(exc, CellFailure):
        return exc.status
    if isinstance(exc, Unsupported):
        return "unsupported"
    return "oom" if backend.is_oom(exc) else "error"


def describe(exc: BaseException) -> str:
    if isinstance(exc, CellFailure):
        return exc.message
    return f"{type(exc).__name__}: {exc}"
