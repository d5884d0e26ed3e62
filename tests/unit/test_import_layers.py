"""The import graph of ``onnxfold`` and ``rules``: no cycles, no upward import, rules use the API.

The graph is read with :mod:`ast` from the source files, so it sees every import: at module top,
inside functions and under ``TYPE_CHECKING`` (an import deferred into a function is still an
edge: deferring it hides a cycle from the interpreter, not from the design). ``from pkg import
name`` is an edge to the submodule ``pkg.name`` when there is one, else to ``pkg`` itself (its
``__init__`` and what it re-exports); importing ``pkg.sub`` is an edge to ``pkg.sub`` only, not
to ``pkg``'s ``__init__``. An import by name at run time (``importlib.import_module``) is an
edge to every module it can name: a constant name, or an f-string whose start names a package
(``f"onnxfold.runtime.backends.{name}"``, or ``f"{package.__name__}.{name}"`` with
``package`` an imported module: the catalogue loads every ``onnxfold.rules`` module that way);
one whose start names none is reported (the test cannot see where it leads).

What must stand apart (``APART``) is judged on the modules each one *reaches*, through every
module between (an import of a module of the check's floor that imports the fold's walk is the
fold's walk imported), the way to each one found printed.

The layers, bottom to top, are those of docs/ARCHITECTURE.md: a module may import from its own
layer or lower ones. ``rules/`` is installed as ``onnxfold.rules`` and may import only the
rule API, the one module ``onnxfold.declare`` (not its submodules), and ``onnxfold.ir`` (and
itself).
"""

from __future__ import annotations

import ast
import textwrap
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
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
    # the check's rooms by job (issue 83, item 1): running models is the floor; what feeds
    # them and what judges their values stand on it, apart from each other
    ("onnxfold.check.running", ("onnxfold.check.inputs", "onnxfold.check.judging",
                                "onnxfold.check.outputs", "onnxfold.check.folds",
                                "onnxfold.check.rewrites"), ()),
    ("onnxfold.check.inputs", ("onnxfold.check.judging",), ()),
    ("onnxfold.check.judging", ("onnxfold.check.inputs",), ()),
    # the check's three jobs share only their floors (issue 66, item 3)
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


# What a package that stands apart still reaches of what it must not, each with why it is
# let be for now: a ratchet (a crossing not listed fails; a listed one no longer there fails
# too, so that its entry goes). The check's shapes are ONNX's inference through the fold's own
# wrapper (its light serialization, its merge of the inferred types: ``running.cones.reinferred``,
# ``inputs.dim_relations``); the dim proof reads them. Its own is issue 83's open part.
KNOWN_CROSSINGS: dict[tuple[str, str], str] = {
    ("onnxfold.check.folds", "onnxfold.analysis.shapes"): "inference through the fold's wrapper",
    ("onnxfold.check.rewrites", "onnxfold.analysis.shapes"): "inference through the fold's wrapper",
    # a guard that refuses a model onnxruntime would inline into too many nodes, and the
    # wrapper's choice whether inference may expand functions: no result the check judges
    ("onnxfold.check.folds", "onnxfold.analysis.expansion"): "the inlining guard",
    ("onnxfold.check.rewrites", "onnxfold.analysis.expansion"): "the inlining guard",
}


@dataclass
class ImportGraph:
    """Modules (dotted names) and, for each, the internal modules it imports (with line
    numbers; ``importlib`` edges among them), and the imports by name it could not resolve."""

    files: dict[str, Path] = field(default_factory=dict)
    edges: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    unresolved: list[str] = field(default_factory=list)
    # the ``importlib`` edges among ``edges``: no order of imports (the interpreter takes them
    # when called, every module loaded): they join what a module reaches, not its cycles
    dynamic: set[tuple[str, str]] = field(default_factory=set)


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


def _dynamic_imports(tree: ast.AST) -> Iterable[tuple[str | None, bool, int]]:
    """(module name or package prefix, whether a prefix, line) of every
    ``importlib.import_module`` call; None where its argument's start names nothing."""
    aliases = {alias.asname or alias.name: alias.name for node in ast.walk(tree)
               if isinstance(node, ast.Import) for alias in node.names}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module") or
                (isinstance(node.func, ast.Name) and node.func.id == "import_module"))):
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            yield arg.value, False, node.lineno
        elif isinstance(arg, ast.JoinedStr) and arg.values:
            head, rest = arg.values[0], arg.values[1:]
            if isinstance(head, ast.Constant) and isinstance(head.value, str) and \
                    head.value.endswith("."):
                yield head.value.rstrip("."), True, node.lineno
            elif isinstance(head, ast.FormattedValue) and isinstance(head.value, ast.Attribute) \
                    and head.value.attr == "__name__" and isinstance(head.value.value, ast.Name) \
                    and head.value.value.id in aliases and rest and \
                    isinstance(rest[0], ast.Constant) and rest[0].value == ".":
                yield aliases[head.value.value.id], True, node.lineno
            else:
                yield None, True, node.lineno
        else:
            yield None, False, node.lineno


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
        for target, prefix, line in _dynamic_imports(tree):
            if target is None:
                graph.unresolved.append(f"{module} (line {line})")
                continue
            target = _canonical(target, renames)
            for hit in (m for m in files if m == target or (prefix and m.startswith(target + "."))):
                if hit != module and hit not in graph.edges[module]:
                    graph.edges[module][hit] = line
                    graph.dynamic.add((module, hit))
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
    def imports(module: str) -> Iterator[str]:
        return iter(sorted(t for t in graph.edges.get(module, {})
                           if (module, t) not in graph.dynamic))

    for start in sorted(graph.files):
        if start in index:
            continue
        work = [(start, imports(start))]
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
                    work.append((child, imports(child)))
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


def _ways(graph: ImportGraph, start: str, data: Sequence[str]) -> dict[str, list[str]]:
    """Every module ``start`` reaches, with the way to it (``a -> b (line n)`` steps), first
    found breadth-first; a pure-data module (``data``) is reached but not gone through."""
    ways: dict[str, list[str]] = {start: []}
    queue = [start]
    for module in queue:
        if module in data:
            continue
        for target, line in sorted(graph.edges.get(module, {}).items()):
            if target not in ways:
                ways[target] = [*ways[module], f"{module} -> {target} (line {line})"]
                queue.append(target)
    return ways


def apart_problems(graph: ImportGraph,
                   apart: Sequence[tuple[str, Sequence[str], Sequence[str]]]) -> list[str]:
    """Every module a package that must stand apart reaches (``apart``: the package, what it
    must not reach, the pure-data modules it may import), with the way there."""
    found = []
    for package, banned, data in apart:
        for module in sorted(graph.files):
            if not (module == package or module.startswith(package + ".")):
                continue
            for target, way in sorted(_ways(graph, module, data).items()):
                if target not in data and any(
                        target == b or target.startswith(b + ".") for b in banned):
                    found.append(f"{module} reaches {target}: {package} stands apart from "
                                 f"{', '.join(banned)}\n    " + "\n    ".join(way))
    return found


def test_the_check_shares_no_execution_code_with_the_fold() -> None:
    graph = build_graph(REPO, {"onnxfold": "onnxfold", "rules": "onnxfold.rules"})
    assert any(m.startswith("onnxfold.check.") for m in graph.files)
    found = apart_problems(graph, APART)
    crossings = {(f.split(": ")[1].split(" stands")[0], f.split(" reaches ")[1].split(":")[0])
                 for f in found}
    new = [f for f in found if (f.split(": ")[1].split(" stands")[0],
                                f.split(" reaches ")[1].split(":")[0]) not in KNOWN_CROSSINGS]
    assert not new, f"{len(new)} found:\n" + "\n".join(new)
    assert set(KNOWN_CROSSINGS) <= crossings, \
        f"crossings gone (remove their entries): {set(KNOWN_CROSSINGS) - crossings}"


def test_every_import_by_name_is_seen() -> None:
    """An ``importlib.import_module`` whose argument names no module or package is a way the
    tests above cannot follow: there is none but ``_lazy``'s and ``_deferred_imports``' (they
    name ``onnxfold``'s own public attributes and deferred third-party modules)."""
    graph = build_graph(REPO, {"onnxfold": "onnxfold", "rules": "onnxfold.rules"})
    assert [u for u in graph.unresolved if not u.startswith((
        "onnxfold._lazy ", "onnxfold._deferred_imports "))] == [], graph.unresolved


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
    assert found == ["pkg.check.cones reaches pkg.fold.runner: pkg.check stands apart from "
                     "pkg.fold\n    pkg.check.cones -> pkg.fold.runner (line 1)"]


def test_an_import_through_a_module_between_or_by_name_is_reported(tmp_path: Path) -> None:
    """The check imports its floor, which imports the fold's walk; a catalogue loads plugins
    by name: both reach what they import, the way there said."""
    _plant(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/walk.py": "",
        "pkg/plugins/__init__.py": "",
        "pkg/plugins/one.py": "from pkg import walk\n",
        "pkg/catalogue.py": ("import importlib\nimport pkg.plugins as package\n"
                             "def load(name):\n"
                             "    return importlib.import_module(f'{package.__name__}.{name}')\n"),
        "pkg/check/__init__.py": "",
        "pkg/check/floor.py": "from pkg import walk\n",
        "pkg/check/cones.py": "from pkg.check import floor\n",
        "pkg/check/rules.py": "from pkg import catalogue\n",
        "pkg/check/lazy.py": "import importlib\ndef f(x):\n    importlib.import_module(x)\n",
    })
    graph = build_graph(tmp_path, {"pkg": "pkg"})
    found = apart_problems(graph, (("pkg.check", ("pkg.walk",), ()),))
    assert "pkg.check.cones reaches pkg.walk: pkg.check stands apart from pkg.walk\n" \
        "    pkg.check.cones -> pkg.check.floor (line 1)\n" \
        "    pkg.check.floor -> pkg.walk (line 1)" in found
    assert any(f.startswith("pkg.check.rules reaches pkg.walk") and
               "pkg.catalogue -> pkg.plugins.one (line 4)" in f for f in found), found
    assert graph.unresolved == ["pkg.check.lazy (line 3)"]


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
