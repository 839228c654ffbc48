"""The package's structure: every module imports on its own, modules import in one direction, no
module global of the model is reassigned, function-level imports only where a heavy optional
dependency justifies one, and modules stay small enough to read."""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "codesign"
ROOT = PACKAGE.parent

#: function-level imports allowed, and why: (module, imported module) -> reason
LAZY_IMPORTS = {
    ("codesign", "codesign.api"): "`import codesign` stays light; the API loads on first use",
    ("codesign.proof.driver", "codesign.backends.pyomo"): "Pyomo takes a second to import; only pyomo:<name> needs it",
    ("codesign.calibration.plot", "matplotlib"): "matplotlib takes ~0.5 s to import; only --plot needs it",
    ("codesign.tradeoffs.plot", "matplotlib"): "matplotlib takes ~0.5 s to import; only --plot needs it",
    ("codesign.cli.sweep", "codesign.sweep.executor"): "dask.distributed and pyarrow add ~0.5 s of CPU to every "
                                                       "command's start (`codesign --help`: 1.2 -> 1.7 s); only sweep needs them",
    ("codesign.cli.sweep", "codesign.sweep.run"): "the same: it imports the executor and pyarrow",
    ("codesign.tradeoffs.sensitivity", "codesign.sweep.executor"): "the same: only sensitivity --workers needs dask",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of the package (``__main__`` runs the command line when imported: left out)."""
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if p.name != "__main__.py"}


@cache
def imports(path: Path) -> tuple[frozenset[str], tuple[tuple[int, str], ...]]:
    """(modules imported at the top level, (line, module) imported inside functions). ``if
    TYPE_CHECKING:`` blocks import nothing at run time and are skipped. ``from a import b`` counts
    as importing ``a.b`` when that is a module of the package, else ``a``. Parsed once per file
    (three tests read every module's imports)."""
    tree = ast.parse(path.read_text())
    top: set[str] = set()
    inner: list[tuple[int, str]] = []
    known = set(modules()) if path.is_relative_to(PACKAGE) else set()

    def names(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known]
            return subs if len(subs) == len(node.names) else [node.module, *subs]
        return []

    def visit(node: ast.AST, depth: int) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                if depth == 0:
                    top.update(names(child))
                else:
                    inner.extend((child.lineno, n) for n in names(child))
            visit(child, depth + (1 if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else 0))

    visit(tree, 0)
    return frozenset(top), tuple(inner)


#: the modules are checked in this many parts, one interpreter each (pytest-xdist spreads them)
IMPORT_PARTS = 4


@pytest.mark.parametrize("part", range(IMPORT_PARTS))
def test_every_module_imports_on_its_own(part):
    """Each module imported first, in a fresh interpreter state (every codesign module removed from
    ``sys.modules`` before it): an import cycle or a missing import fails here. Every module is in
    exactly one part."""
    names = sorted(modules())
    assert len(names) >= IMPORT_PARTS

    def script(part: list[str]) -> str:
        return (
            "import importlib, sys\n"
            f"bad = []\nfor name in {part!r}:\n"
            "    for m in [m for m in sys.modules if m == 'codesign' or m.startswith('codesign.')]:\n"
            "        del sys.modules[m]\n"
            "    try:\n        importlib.import_module(name)\n"
            "    except Exception as exc:\n        bad.append(f'{name}: {exc!r}')\n"
            "print('\\n'.join(bad))\nsys.exit(1 if bad else 0)\n"
        )

    run = subprocess.run([sys.executable, "-c", script(names[part::IMPORT_PARTS])], capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_import_graph_has_no_cycle():
    """Modules import in one direction (top-level and function-level imports together)."""
    mods = modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        top, inner = imports(path)
        graph[name] = {m for m in top | {n for _, n in inner} if m in mods and m != "codesign" and m != name}
    graph.pop("codesign", None)
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(v: str) -> list[str] | None:
        state[v] = 1
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return [*stack[stack.index(w):], w]
            if w not in state and (cycle := walk(w)):
                return cycle
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state and (cycle := walk(v)):
            raise AssertionError(" -> ".join(cycle))


def test_function_level_imports_are_the_justified_ones():
    found = []
    for name, path in modules().items():
        _, inner = imports(path)
        for line, imported in inner:
            if not any(imported == m or imported.startswith(m + ".") for (mod, m) in LAZY_IMPORTS if mod == name):
                found.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    assert not found, "\n".join(found)


def test_no_module_global_is_assigned_from_outside():
    """``module.CONSTANT = value`` anywhere in the package, the benchmarks, research or the tests
    would make a model variant a patch instead of an option."""
    found = []
    for directory in ("codesign", "benchmarks", "research", "tests"):
        for path in sorted((ROOT / directory).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else []
                for t in targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.attr.isupper() and len(t.attr) >= 3:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(t)}")
    assert not found, "\n".join(found)


def test_modules_stay_small():
    """A module over ~600 lines holds more than one responsibility."""
    big = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > 620}
    assert not big, big


def test_nothing_points_outside_the_repository():
    """The package, the tests and the documents stand alone: nothing names the workspace's shared
    directory beside the repository."""
    needle = "../" + "shared"
    found = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md")]:
        if needle in path.read_text(errors="replace"):
            found.append(str(path.relative_to(ROOT)))
    assert not found, found


#: the layers, lowest first: a module imports (at run time) only from its own layer or below
LAYERS = (
    ("codesign.errors", "codesign.jsonio", "codesign.paths", "codesign.schema", "codesign.names"),
    ("codesign.catalog", "codesign.model.units"),
    ("codesign.model", "codesign.mip"),
    ("codesign.backends",),
    ("codesign.kinds.base",),
    ("codesign.proof.tolerances", "codesign.proof.records", "codesign.proof.driver"),
    ("codesign.kinds.fixed", "codesign.kinds.grid", "codesign.kinds.mapping", "codesign.kinds.placement",
     "codesign.kinds.dlrm", "codesign.kinds.training"),
    ("codesign.kinds.registry", "codesign.proof.certify", "codesign.proof.check"),
    ("codesign.calibration", "codesign.api", "codesign.cli", "codesign.sweep", "codesign.tradeoffs", "codesign"),
)


def layer_of(module: str) -> int:
    """The layer of a module: that of the longest prefix listed in LAYERS."""
    best, rank = -1, None
    for i, names in enumerate(LAYERS):
        for n in names:
            if (module == n or module.startswith(n + ".")) and len(n) > best:
                best, rank = len(n), i
    assert rank is not None, f"{module} is in no layer of LAYERS"
    return rank


def test_modules_import_only_their_layer_or_below():
    """The model imports no kind, the kinds no command line, and so on (docs/architecture.md)."""
    mods = modules()
    found = []
    for name, path in mods.items():
        top, inner = imports(path)
        for m in top | {n for _, n in inner}:
            if m in mods and m != "codesign" and layer_of(m) > layer_of(name):
                found.append(f"{name} (layer {layer_of(name)}) imports {m} (layer {layer_of(m)})")
    assert not found, "\n".join(sorted(found))
