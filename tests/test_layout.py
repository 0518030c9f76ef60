"""The layout's rules that import-linter cannot express: tools name nothing private.

``sparsecoll.tools`` imports the library's public API only (the benchmark measures the
phases of a call through the runtime's public methods).
"""

from __future__ import annotations

import ast

import pytest

from .conftest import ROOT

TOOLS = ROOT / "src" / "sparsecoll" / "tools"


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
