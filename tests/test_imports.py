"""The house has floors, one folder each: no import circle among fwcompare's
modules, no import from a floor to one above it (docs/contributing.md, Layout); at
most 12 modules at the top of the package; no module over 600 lines.

Read from the source with ``ast`` (nothing is imported): every ``import`` and
``from ... import`` of a fwcompare module counts, at module level or inside a
function, except those under ``if TYPE_CHECKING:`` (annotations only, never run).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fwcompare"
CONTRIBUTING = PACKAGE.parent / "docs" / "contributing.md"

# The floors, lowest first: each is a folder of fwcompare/, and a module stands on
# its folder's floor. docs/contributing.md's layout table lists them in this order.
LAYERS = ("core", "frameworks", "plan", "results", "measure", "execution", "studies", "suite",
          "commands")
# Beside the layers at the top: the package itself (its version, and the names a
# notebook uses, imported by name when first asked for: it imports no module, so it
# stands on the ground floor) and ``python -m fwcompare`` (the top).
TOP = ("__init__", "__main__", "data")
MAX_TOP = 12


def floor_of(name: str) -> int:
    """The floor (0 lowest) of module ``fwcompare.x.y``: its folder's."""
    if name == "fwcompare":
        return 0
    first = name.split(".")[1]
    if first == "__main__":
        return len(LAYERS)
    if first not in LAYERS:
        raise KeyError(f"{name} is in no layer folder: move it into one of {LAYERS}")
    return LAYERS.index(first)


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
    """Imports from a floor to one above it, each with both floors."""
    return sorted(f"{a} ({LAYERS[floor_of(a)] if floor_of(a) < len(LAYERS) else 'top'}) imports "
                  f"{b} ({LAYERS[floor_of(b)] if floor_of(b) < len(LAYERS) else 'top'})"
                  for a, deps in g.items() for b in deps if floor_of(b) > floor_of(a))


def top_entries(package: Path = PACKAGE) -> list[str]:
    """The modules, packages and folders at the top of the package."""
    return sorted(p.stem for p in package.iterdir()
                  if p.suffix == ".py" or (p.is_dir() and p.name != "__pycache__"))


def test_no_import_circle():
    found = circles(graph())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_every_import_runs_to_the_same_floor_or_below():
    assert upward(graph()) == []


def test_the_top_of_the_package_is_its_floors():
    top = top_entries()
    assert set(top) == {*LAYERS, *TOP}, "a module or folder at the top outside the layers"
    assert len([t for t in top if t != "data"]) <= MAX_TOP
    # the layout table of docs/contributing.md names the floors in the same order
    named = re.findall(r"^\| `([a-z]+)/` \|", CONTRIBUTING.read_text(), re.M)
    assert tuple(dict.fromkeys(named)) == LAYERS


def test_the_reader_sees_a_circle_and_an_upward_import(tmp_path):
    """The checks can fail: a package with a circle and a ground-floor module importing up."""
    pkg = tmp_path / "fwcompare"
    for folder in ("core", "studies", "execution"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "stats.py").write_text("def f():\n    from ..studies import x\n")
    (pkg / "studies" / "__init__.py").write_text("from . import x\n")
    (pkg / "studies" / "x.py").write_text(
        "from typing import TYPE_CHECKING\nfrom ..core import stats\n"
        "if TYPE_CHECKING:\n    from ..execution.runner import R\n")
    (pkg / "execution" / "runner.py").write_text("import fwcompare.studies.x\n")
    g = graph(pkg)
    assert g["fwcompare.studies.x"] == {"fwcompare.core.stats"}  # TYPE_CHECKING left out
    assert circles(g) == [["fwcompare.core.stats", "fwcompare.studies.x"]]
    assert upward(g) == ["fwcompare.core.stats (core) imports fwcompare.studies.x (studies)",
                         "fwcompare.execution.runner (execution) imports "
                         "fwcompare.studies.x (studies)"]
    with pytest.raises(KeyError, match="in no layer folder"):
        floor_of("fwcompare.stray")
    (pkg / "stray.py").write_text("")
    assert "stray" in top_entries(pkg)


def framework_names(package: Path = PACKAGE, names=("torch", "tensorflow", "jax")) -> list[str]:
    """Where a module outside ``frameworks/`` names a framework as a string of
    code (``"torch"``, a variant ``"torch/eager"``, the start of an f-string
    naming one): a fact about a framework that its package does not hold.
    Prose (docstrings, messages, comments) is not such a string."""
    word = re.compile(rf"^({'|'.join(map(re.escape, names))})(/[\w-]*)?$")
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).parts[0] == "frameworks":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and word.match(node.value):
                found.append(f"{path.relative_to(package.parent)}:{node.lineno}: {node.value!r}")
    return found


def test_no_module_outside_the_frameworks_names_one(tmp_path):
    from fwcompare.frameworks import BUILT_IN

    assert framework_names(names=BUILT_IN) == []
    pkg = tmp_path / "fwcompare"  # the check can fail
    (pkg / "frameworks" / "torch").mkdir(parents=True)
    (pkg / "frameworks" / "torch" / "__init__.py").write_text('NAME = "torch"\n')
    (pkg / "studies").mkdir()
    (pkg / "studies" / "x.py").write_text(
        '"""torch is prose here."""\nMODES = {"torch": ["eager"]}\nV = f"jax/{1}"\n'
        'WHY = "tensorflow ps runs on the CPU only"\n')
    assert framework_names(pkg) == ["fwcompare/studies/x.py:2: 'torch'",
                                    "fwcompare/studies/x.py:3: 'jax/'"]


def context_members_used(package: Path = PACKAGE) -> dict[str, set[str]]:
    """What the schedules and the studies read or call on the run they are
    handed (named ``runner``, ``self.runner`` or, in a schedule, ``r``), per module."""
    used: dict[str, set[str]] = {}
    schedules = sorted((package / "execution" / "schedules").rglob("*.py"))
    for path in [*sorted((package / "studies").rglob("*.py")), *schedules]:
        names = ("runner", "r") if path in schedules else ("runner",)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            v = node.value
            if (isinstance(v, ast.Name) and v.id in names) or (
                    isinstance(v, ast.Attribute) and v.attr == "runner"
                    and isinstance(v.value, ast.Name) and v.value.id == "self"):
                used.setdefault(str(path.relative_to(package)), set()).add(node.attr)
    return used


def test_schedules_and_studies_use_only_the_run_context(tmp_path):
    from fwcompare.execution.context import RunContext

    members = {n for n in dir(RunContext) if not n.startswith("_")}
    used = context_members_used()
    assert used and set().union(*used.values()) <= members, {
        m: sorted(u - members) for m, u in used.items() if u - members}
    pkg = tmp_path / "fwcompare"  # the check can fail: a study reaching for the fork servers
    (pkg / "studies").mkdir(parents=True)
    (pkg / "execution" / "schedules").mkdir(parents=True)
    (pkg / "studies" / "x.py").write_text("def spawn(runner, r):\n    runner.servers.close()\n"
                                          "    return r.servers\n")
    assert context_members_used(pkg) == {"studies/x.py": {"servers"}}


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
