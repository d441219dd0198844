"""The house has floors: no import circle among fwcompare's modules, and the low
floor (pure functions and data) imports nothing above it (docs/contributing.md, Layout);
no module is over 600 lines.

Read from the source with ``ast`` (nothing is imported): every ``import`` and
``from ... import`` of a fwcompare module counts, at module level or inside a
function, except those under ``if TYPE_CHECKING:`` (annotations only, never run).
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fwcompare"

# Pure functions and data: they import nothing of fwcompare above this floor.
LOW = ("stats", "spec", "timing", "memory", "precision", "atomic", "paths", "protocol",
       "host", "env", "energy", "pipeline", "fitting")


# The floors above it (docs/contributing.md, Layout): a module imports modules of its
# own floor or below. A package's modules stand on the package's floor.
FLOORS = {
    "low": LOW,
    "language": ("models", "results", "schema", "tables", "plots", "judging", "job", "outcome",
                 "frameworks", "peak", "compare", "export"),
    "worker": ("gate", "cell", "workloads", "forkserver", "launch", "schedules"),
    "running": ("runner", "estimate", "studies"),
    "entry": ("params", "claims", "worker", "forkserver_main", "api", "report", "shard",
              "submit", "doctor", "cli", "__main__", ""),
}


def floor_of(name: str) -> int:
    """The floor (0 lowest) of module ``fwcompare.x.y``: its first part's."""
    first = name.split(".")[1] if "." in name else ""
    for i, members in enumerate(FLOORS.values()):
        if first in members:
            return i
    raise KeyError(f"{name} is on no floor: add it to FLOORS (and to docs/contributing.md)")


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Dotted name (``fwcompare.x.y``) -> file, packages by their ``__init__``."""
    out = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside ``if TYPE_CHECKING:`` blocks."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for b in node.body for n in ast.walk(b)}
    return skip


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The fwcompare modules that module ``name`` (at ``path``) imports."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_only(tree)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]

    def nearest(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {nearest(a.name) for a in node.names if a.name.startswith("fwcompare")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1]
                                + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if not base.startswith("fwcompare"):
                continue
            for alias in node.names:  # `from . import x`: the submodule x, if it is one
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else nearest(base))
    found.discard(None)
    found.discard(name)
    return found


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    known = modules(package)
    return {name: imports(name, path, known) for name, path in known.items()}


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def upward(g: dict[str, set[str]]) -> list[str]:
    """Imports from the low floor (a low module, or one of a low package) upward."""
    return sorted(f"{a} imports {b}" for a, deps in g.items() if floor_of(a) == 0
                  for b in deps if floor_of(b) > 0)


def test_no_import_circle():
    found = circles(graph())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_low_floor_imports_nothing_above_it():
    g = graph()
    assert {f"fwcompare.{m}" for m in LOW} <= set(g), "a low module is missing"
    assert upward(g) == []


def test_every_import_runs_to_the_same_floor_or_below():
    g = graph()
    up = sorted(f"{a} ({list(FLOORS)[floor_of(a)]}) imports {b} ({list(FLOORS)[floor_of(b)]})"
                for a, deps in g.items() for b in deps if floor_of(b) > floor_of(a))
    assert up == []


def test_the_reader_sees_a_circle_and_an_upward_import(tmp_path):
    """The checks can fail: a package with a circle and a low module importing up."""
    pkg = tmp_path / "fwcompare"
    (pkg / "studies").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "stats.py").write_text("def f():\n    from .studies import x\n")
    (pkg / "studies" / "__init__.py").write_text("from . import x\n")
    (pkg / "studies" / "x.py").write_text(
        "from typing import TYPE_CHECKING\nfrom .. import stats\n"
        "if TYPE_CHECKING:\n    from ..runner import R\n")
    (pkg / "runner.py").write_text("import fwcompare.studies.x\n")
    g = graph(pkg)
    assert g["fwcompare.studies.x"] == {"fwcompare.stats"}  # TYPE_CHECKING left out
    assert circles(g) == [["fwcompare.stats", "fwcompare.studies.x"]]
    assert upward(g) == ["fwcompare.stats imports fwcompare.studies.x"]


MAX_LINES = 600  # a module longer than this does more than one job: split it by job


def long_modules(package: Path = PACKAGE) -> list[str]:
    """The modules over MAX_LINES lines, with their length."""
    return sorted(f"{path.relative_to(package.parent)}: {n} lines"
                  for path in package.rglob("*.py")
                  if (n := len(path.read_text().splitlines())) > MAX_LINES)


def test_no_module_is_over_600_lines(tmp_path):
    assert long_modules() == []
    pkg = tmp_path / "fwcompare"  # the check can fail
    (pkg / "sub").mkdir(parents=True)
    (pkg / "sub" / "big.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (pkg / "small.py").write_text("x = 1\n" * MAX_LINES)
    assert long_modules(pkg) == [f"fwcompare/sub/big.py: {MAX_LINES + 1} lines"]
