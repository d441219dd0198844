"""Atomic file writes: a reader sees the old file or the whole new one, never
half of it (an interrupted run, a failed notebook, two runs at once)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable


class UnreadableFile(ValueError):
    """A stored file that cannot be read (empty, cut short, not what it should
    hold); the message names the file and what to do."""


def first_line(exc: BaseException) -> str:
    """An exception's message in one line (its type's name where it has none)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def read_json(path: Path | str, what: str, then: str, holds=None) -> dict:
    """The JSON object stored in ``path``, or :class:`UnreadableFile` saying that
    it is not a readable ``what`` (why) and ``then``, what to do. ``holds(doc)``:
    a further check, the reason it fails or None."""
    try:
        doc = json.loads(Path(path).read_text())
        why = (f"a JSON {type(doc).__name__}, not an object" if not isinstance(doc, dict)
               else holds(doc) if holds else None)
        if why:
            raise ValueError(why)
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError too
        raise UnreadableFile(f"{path}: not a readable {what} ({first_line(exc)}); {then}") \
            from None
    return doc


def write_atomic(path: Path | str, write: Callable[[Path], Any]) -> Path:
    """``write(tmp)`` writes a temporary file beside ``path``, then it is
    renamed into place (an atomic replace on one filesystem)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # two writers at once each have one
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_text(path: Path | str, text: str) -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json(path: Path | str, obj: Any, **kwargs) -> Path:
    kwargs = {"indent": 2, "sort_keys": True, "default": str, **kwargs}
    return write_text(path, json.dumps(obj, **kwargs))
