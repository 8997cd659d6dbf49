"""The package's import graph, built from the sources (docs/design.md §2): no module imports, directly or through
others, a module that imports it back. Imports inside functions count as much as those at the top of a file (a
local import hides a cycle, it does not remove it), and ``from package import name`` depends on the package's
``__init__`` as Python runs it. The data flow is one way too: the input pipeline reaches no module that imports
the dataset builders (``tfds_builders/``).
"""

from __future__ import annotations

import ast
import os
import re

from conftest import ROOT

PACKAGE = "openvivqa_jax"


def _modules() -> dict[str, str]:
    """Dotted module name -> file, for every ``.py`` file of the package (a package is its ``__init__``)."""
    out = {}
    for folder, _, files in os.walk(os.path.join(ROOT, PACKAGE)):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                out[name.removesuffix(".__init__")] = path
    return out


def _targets(module: str, node: ast.AST, modules: dict[str, str]) -> set[str]:
    """The package's modules that the import statement ``node`` of ``module`` runs: each name imported and, for
    ``from X import y``, ``X`` itself (resolved to the nearest enclosing module of the package)."""
    names = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".")
            package = parts if modules[module].endswith("__init__.py") else parts[:-1]
            base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
        names = [base] + [f"{base}.{a.name}" for a in node.names]
    out = set()
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.add(name)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its file (module level and inside functions)."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        graph[name] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[name] |= _targets(name, node, modules)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: the import cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        v = todo.pop()
        if v not in seen:
            seen.add(v)
            todo.extend(graph[v])
    return seen


def test_the_graph_is_the_packages():
    """The graph holds every module of the package and sees the imports inside functions; every folder of the
    package is a package (an ``__init__.py``: the installer's ``find_packages`` skips a folder without one)."""
    for folder, _, files in os.walk(os.path.join(ROOT, PACKAGE)):
        if any(f.endswith(".py") for f in files):
            assert "__init__.py" in files, folder
    graph = import_graph()
    assert {"openvivqa_jax.main", "openvivqa_jax.vqa.train", "openvivqa_jax.evaluation.evaluator"} <= set(graph)
    # main imports the task packages by name; the evaluation imports the relevance encoder inside a function.
    assert "openvivqa_jax.relevance.model" in graph["openvivqa_jax.evaluation.relevance"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_package_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles (each a set of modules that import each other): " + "; ".join(
        " <-> ".join(c) for c in found)


def test_the_trainers_sit_above_their_evaluations():
    """A task's loop calls down into its evaluation; no evaluation, and nothing the metrics use, imports a loop."""
    graph = import_graph()
    trainers = {f"openvivqa_jax.{t}.train" for t in ("vqa", "reading", "relevance")}
    for module in ("openvivqa_jax.vqa.evals", "openvivqa_jax.reading.evals", "openvivqa_jax.relevance.evals",
                   "openvivqa_jax.evaluation", "openvivqa_jax.config_check"):
        assert not _reachable(graph, module) & trainers, module


def _imports_builders(path: str) -> bool:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "tfds_builders" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tfds_builders":
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                re.fullmatch(r"tfds_builders(\.\w+)*", node.value):
            return True  # importlib.import_module("tfds_builders...")
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant) and \
                str(node.values[0].value).startswith("tfds_builders."):
            return True
    return False


def test_the_input_pipeline_reads_and_imports_no_builder():
    """Builders write the datasets, the pipeline reads them: only the module that opens (and builds) a dataset,
    ``data/datasets.py``, imports the builders, and the input pipeline does not reach it."""
    modules = _modules()
    graph = import_graph()
    assert _imports_builders(modules["openvivqa_jax.data.datasets"])
    for module in ("openvivqa_jax.data.pipeline", "openvivqa_jax.data.records", "openvivqa_jax.data.model_ready"):
        reached = _reachable(graph, module)
        assert "openvivqa_jax.data.datasets" not in reached, module
        assert not [m for m in reached if _imports_builders(modules[m])], module
