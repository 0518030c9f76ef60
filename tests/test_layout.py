"""The layout's rules that import-linter cannot express: tools name nothing private, every
public function, class and method has a docstring, every algorithm names its paper's numbers.

``sparsecoll.tools`` imports the library's public API only (the benchmark measures the
phases of a call through the runtime's public methods).
"""

from __future__ import annotations

import ast

import pytest

from .conftest import ROOT

PACKAGE = ROOT / "src" / "sparsecoll"
TOOLS = PACKAGE / "tools"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(path) -> list:
    """Private names a module imports from the library or reads off other objects."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("sparsecoll", ""):
            found += [f"line {node.lineno}: imports {alias.name}" for alias in node.names if _private(alias.name)]
            found += [f"line {node.lineno}: imports from {node.module}" for part in (node.module or "").split(".")
                      if _private(part)]
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: imports {a.name}" for a in node.names
                      if a.name.startswith("sparsecoll") and any(_private(p) for p in a.name.split("."))]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"line {node.lineno}: reads .{node.attr}")
    return found


@pytest.mark.parametrize("path", sorted(TOOLS.rglob("*.py")),
                         ids=lambda p: str(p.relative_to(TOOLS)))
def test_tools_name_nothing_private(path):
    assert private_uses(path) == []


def undocumented(path) -> list:
    """Public definitions of a module (names without a leading underscore, at module level or in a
    public class) that have no docstring; the module's own docstring too."""
    tree = ast.parse(path.read_text())
    missing = [] if ast.get_docstring(tree) else ["module"]

    def visit(body, prefix):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.name.startswith("_"):
                    continue
                if not ast.get_docstring(node):
                    missing.append(f"line {node.lineno}: {prefix}{node.name}")
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body, prefix)
    visit(tree.body, "")
    return missing


@pytest.mark.parametrize("path", sorted(p for p in PACKAGE.rglob("*.py")
                                        if not any(part.startswith("_") and part not in ("__init__.py", "__main__.py")
                                                   for part in p.relative_to(PACKAGE).parts)),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_public_definition_has_a_docstring(path):
    assert undocumented(path) == []


def test_every_algorithm_from_a_paper_names_its_numbers():
    """The registry's ``paper`` of an algorithm says which algorithms, listings, sections or
    figures of its paper it implements (``direct`` and ``native`` come from no paper)."""
    import re

    from sparsecoll.algorithms import REGISTRY
    for name, algorithm in REGISTRY.items():
        if name in ("direct", "native"):
            assert algorithm.paper is None
            continue
        numbered = re.search(r"(Algorithms?|Listing|section|Figs?\.) [0-9IV]", algorithm.paper or "")
        assert numbered, (name, algorithm.paper)
