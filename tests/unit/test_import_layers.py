"""The import graph of ``onnxfold`` and ``rules``: no cycles, no upward import, rules use the API.

The graph is read with :mod:`ast` from the source files, so it sees every import: at module top,
inside functions and under ``TYPE_CHECKING`` (an import deferred into a function is still an
edge: deferring it hides a cycle from the interpreter, not from the design). ``from pkg import
name`` is an edge to the submodule ``pkg.name`` when there is one, else to ``pkg`` itself (its
``__init__`` and what it re-exports); importing ``pkg.sub`` is an edge to ``pkg.sub`` only, not
to ``pkg``'s ``__init__``. Imports by name at run time (``importlib.import_module``) are not
edges: the catalogue loads ``onnxfold.rules`` that way, on purpose.

The layers, bottom to top, are those of docs/ARCHITECTURE.md: a module may import from its own
layer or lower ones. ``rules/`` is installed as ``onnxfold.rules`` and may import only the
rule API, the one module ``onnxfold.declare`` (not its submodules), and ``onnxfold.ir`` (and
itself).
"""

from __future__ import annotations

import ast
import textwrap
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Bottom to top; each entry names module prefixes (a package and everything in it).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("leaves", ("onnxfold.errors", "onnxfold.numbers", "onnxfold._lazy",
                "onnxfold._deferred_imports", "onnxfold._version")),
    ("ir", ("onnxfold.ir",)),
    ("host", ("onnxfold.host",)),
    ("analysis", ("onnxfold.analysis",)),
    ("io", ("onnxfold.io",)),
    ("declare", ("onnxfold.declare",)),
    ("rewrite", ("onnxfold.rewrite",)),
    ("fold", ("onnxfold.fold",)),
    ("signature", ("onnxfold.signature",)),
    ("pipeline", ("onnxfold.pipeline",)),
    ("runtime", ("onnxfold.runtime",)),
    ("check", ("onnxfold.check",)),
    ("latency", ("onnxfold.latency",)),
    ("app", ("onnxfold.app",)),
    ("top", ("onnxfold", "onnxfold.__main__")),
)
# a module by its name; ``pkg.*``: a package and everything in it
RULES_MAY_IMPORT = ("onnxfold.declare", "onnxfold.ir.*")
# A verifier shares no execution code with what it verifies: the check imports nothing of the
# fold's runner, pool, materialization or writer, nor of the passes that call them; of the run
# that folded it reads pure data only (its evidence and rewrite log).
APART: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("onnxfold.check", ("onnxfold.fold", "onnxfold.io.writer", "onnxfold.pipeline",
                        "onnxfold.rewrite"),
     ("onnxfold.pipeline.evidence", "onnxfold.rewrite.log")),
    # the check's three jobs share only their floor, check/running/ (issue 66, item 3)
    ("onnxfold.check.folds", ("onnxfold.check.outputs", "onnxfold.check.rewrites"), ()),
    ("onnxfold.check.outputs", ("onnxfold.check.folds", "onnxfold.check.rewrites"), ()),
    ("onnxfold.check.rewrites", ("onnxfold.check.folds", "onnxfold.check.outputs"), ()),
    # the fold verification proves dims with its own reading of the graph, never with the
    # fold's symbolic dims, the rules' shape steps or op facts (issue 63, item 4)
    ("onnxfold.check.folds", ("onnxfold.analysis", "onnxfold.declare", "onnxfold.rules"), ()),
    ("onnxfold.check.rewrites", ("onnxfold.analysis", "onnxfold.declare", "onnxfold.rules"), ()),
    # the input planner reads dims with its own walk, never with the fold's symbolic walk, its
    # dim algebra or the rules' shape steps (issue 82 item 5; calls: test_graph_dims.py)
    ("onnxfold.check", ("onnxfold.analysis.symbolic", "onnxfold.analysis.symbolic_update",
                        "onnxfold.analysis.step_inputs", "onnxfold.analysis.dim_algebra",
                        "onnxfold.declare.view", "rules"), ()),
)


@dataclass
class ImportGraph:
    """Modules (dotted names) and, for each, the internal modules it imports (with line numbers)."""

    files: dict[str, Path] = field(default_factory=dict)
    edges: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))


def _module_files(root: Path, top: str, name: str) -> dict[str, Path]:
    """Dotted module name -> file, for the package in ``root/top`` installed as ``name``."""
    files = {}
    for path in sorted((root / top).rglob("*.py")):
        parts = [name, *path.relative_to(root / top).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    return files


def _imported_names(tree: ast.AST, module: str,
                    is_package: bool) -> Iterable[tuple[str, list[str], int]]:
    """(absolute module, names imported from it, line) for every import statement anywhere."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            yield base, [alias.name for alias in node.names], node.lineno


def build_graph(root: Path, packages: Mapping[str, str]) -> ImportGraph:
    """The import graph of the packages ``{directory under root: installed name}``."""
    graph = ImportGraph()
    renames = {}
    for top, name in packages.items():
        graph.files.update(_module_files(root, top, name))
        if top != name:
            renames[name] = top  # onnxfold.rules (installed) is rules (in the tree)
    files = {_canonical(m, renames): p for m, p in graph.files.items()}
    graph.files = files

    for module, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for target, names, line in _imported_names(tree, module, path.name == "__init__.py"):
            target = _canonical(target, renames)
            hits = [f"{target}.{n}" for n in names if f"{target}.{n}" in files]
            plain = [n for n in names if f"{target}.{n}" not in files]
            if target in files and (plain or not names):
                hits.append(target)
            for hit in hits:
                if hit != module:
                    graph.edges[module].setdefault(hit, line)
    return graph


def _canonical(module: str, renames: Mapping[str, str]) -> str:
    for installed, tree_name in renames.items():
        if module == installed or module.startswith(installed + "."):
            return tree_name + module[len(installed):]
    return module


def cycles(graph: ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph.files):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.edges.get(start, {}))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.edges.get(child, {})))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def layer_of(module: str, layers: Sequence[tuple[str, Sequence[str]]]) -> int | None:
    """The rank of the layer whose longest prefix names the module (None: in no layer).

    A root package name (no dot) names only its ``__init__``, not every module under it.
    """
    best: tuple[int, int] | None = None
    for rank, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            matches = module == prefix or ("." in prefix and module.startswith(prefix + "."))
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), rank)
    return None if best is None else best[1]


def _allowed(target: str, allowed: Sequence[str]) -> bool:
    """Whether ``target`` is a module ``allowed`` names (``pkg.*``: ``pkg`` or under it)."""
    return any(target == p.removesuffix(".*") or
               (p.endswith(".*") and target.startswith(p.removesuffix("*"))) for p in allowed)


def problems(graph: ImportGraph, layers: Sequence[tuple[str, Sequence[str]]], top: str,
             rules: str, rules_may_import: Sequence[str]) -> list[str]:
    """Every cycle, module outside the layers, upward import and rules import outside the API."""
    found = []
    for component in cycles(graph):
        inside = set(component)
        links = [f"    {a} -> {b} (line {line})" for a in component
                 for b, line in sorted(graph.edges.get(a, {}).items()) if b in inside]
        found.append(f"cycle of {len(component)} modules: {', '.join(component)}\n"
                     + "\n".join(links))
    names = [name for name, _ in layers]
    for module in sorted(graph.files):
        if module == rules or module.startswith(rules + "."):
            for target, line in sorted(graph.edges.get(module, {}).items()):
                if not _allowed(target, (f"{rules}.*", *rules_may_import)):
                    found.append(f"rules import outside {', '.join(rules_may_import)}: "
                                 f"{module} -> {target} (line {line})")
            continue
        if not (module == top or module.startswith(top + ".")):
            continue
        rank = layer_of(module, layers)
        if rank is None:
            found.append(f"module in no layer: {module} (add it to a package of the layer map)")
            continue
        for target, line in sorted(graph.edges.get(module, {}).items()):
            target_rank = layer_of(target, layers)
            if target_rank is not None and target_rank > rank:
                found.append(f"upward import: {module} ({names[rank]}) -> {target} "
                             f"({names[target_rank]}) (line {line})")
    return found


def test_onnxfold_and_rules_have_no_cycles_and_respect_the_layers() -> None:
    graph = build_graph(REPO, {"onnxfold": "onnxfold", "rules": "onnxfold.rules"})
    assert len(graph.files) > 50, "the walk found too few modules: is REPO the repository root?"
    found = problems(graph, LAYERS, "onnxfold", "rules", RULES_MAY_IMPORT)
    assert not found, f"{len(found)} import-layer problems:\n" + "\n".join(found)


def apart_problems(graph: ImportGraph,
                   apart: Sequence[tuple[str, Sequence[str], Sequence[str]]]) -> list[str]:
    """Every import of a package that must stand apart (``apart``: the package, what it must
    not import, the pure-data modules it may)."""
    found = []
    for package, banned, data in apart:
        for module in sorted(graph.files):
            if not (module == package or module.startswith(package + ".")):
                continue
            for target, line in sorted(graph.edges.get(module, {}).items()):
                if target in data:
                    continue
                if any(target == b or target.startswith(b + ".") for b in banned):
                    found.append(f"{module} -> {target} (line {line}): {package} stands apart "
                                 f"from {', '.join(banned)}")
    return found


def test_the_check_shares_no_execution_code_with_the_fold() -> None:
    graph = build_graph(REPO, {"onnxfold": "onnxfold", "rules": "onnxfold.rules"})
    assert any(m.startswith("onnxfold.check.") for m in graph.files)
    found = apart_problems(graph, APART)
    assert not found, "\n".join(found)


def test_an_import_across_the_separation_is_reported(tmp_path: Path) -> None:
    _plant(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/fold/__init__.py": "",
        "pkg/fold/runner.py": "",
        "pkg/fold/data.py": "",
        "pkg/check/__init__.py": "",
        "pkg/check/cones.py": "from pkg.fold import runner, data\n",
    })
    found = apart_problems(build_graph(tmp_path, {"pkg": "pkg"}),
                           (("pkg.check", ("pkg.fold",), ("pkg.fold.data",)),))
    assert found == ["pkg.check.cones -> pkg.fold.runner (line 1): pkg.check stands apart "
                     "from pkg.fold"]


def _plant(root: Path, files: Mapping[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


FAKE_LAYERS = (("low", ("pkg.low",)), ("high", ("pkg.high",)), ("top", ("pkg",)))


def test_a_cycle_through_a_function_level_import_is_reported(tmp_path: Path) -> None:
    _plant(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low/__init__.py": "",
        "pkg/low/a.py": "from pkg.low import b\n",
        "pkg/low/b.py": "def f():\n    from . import a\n    return a\n",
    })
    found = problems(build_graph(tmp_path, {"pkg": "pkg"}), FAKE_LAYERS, "pkg", "rules", ())
    assert len(found) == 1
    assert found[0].startswith("cycle of 2 modules: pkg.low.a, pkg.low.b")
    assert "pkg.low.b -> pkg.low.a (line 2)" in found[0]


def test_upward_type_checking_and_rules_imports_are_reported(tmp_path: Path) -> None:
    _plant(tmp_path, {
        "pkg/__init__.py": "from pkg.high.h import H\n",
        "pkg/low/__init__.py": "",
        "pkg/low/a.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                         "    from pkg.high.h import H\n"),
        "pkg/high/__init__.py": "",
        "pkg/high/h.py": "H = 1\n",
        "pkg/stray.py": "",
        "pkg/high/api.py": "",
        "rules/__init__.py": "",
        "rules/r.py": ("from pkg.low.a import x\nfrom pkg.high import h\nfrom pkg.rules import s\n"
                       "from pkg.high import api\nfrom pkg import high\n"),
        "rules/s.py": "",
    })
    graph = build_graph(tmp_path, {"pkg": "pkg", "rules": "pkg.rules"})
    found = problems(graph, FAKE_LAYERS,
                     "pkg", "rules", ("pkg.low.*", "pkg.high"))
    assert "upward import: pkg.low.a (low) -> pkg.high.h (high) (line 3)" in found
    allowed = "rules import outside pkg.low.*, pkg.high"
    assert f"{allowed}: rules.r -> pkg.high.h (line 2)" in found
    assert f"{allowed}: rules.r -> pkg.high.api (line 4)" in found  # the module, not its parts
    assert "module in no layer: pkg.stray (add it to a package of the layer map)" in found
    assert len(found) == 4, found  # rules.r -> pkg.low.a, -> pkg.high, -> rules.s are allowed


def test_importing_a_submodule_is_no_edge_to_its_package_init(tmp_path: Path) -> None:
    _plant(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low/__init__.py": "from pkg.low.a import A\n",
        "pkg/low/a.py": "A = 1\n",
        "pkg/low/b.py": "import pkg.low.a\nfrom pkg.low import a\nfrom . import a as again\n",
    })
    graph = build_graph(tmp_path, {"pkg": "pkg"})
    assert graph.edges["pkg.low.b"] == {"pkg.low.a": 1}
    assert graph.edges["pkg.low"] == {"pkg.low.a": 1}
