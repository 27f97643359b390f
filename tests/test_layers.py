"""The dependency arrows docs/concepts.md states, read from every module's imports (the
function-level ones included): the control plane flows one way."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# package -> packages it must never import
NEVER = {
    "orchestrator/engines": ("orchestrator.analysis", "orchestrator.spec", "orchestrator.search",
                             "orchestrator.sweep", "orchestrator.bench", "orchestrator.commands"),
    "orchestrator/analysis": ("orchestrator.spec", "orchestrator.search", "orchestrator.sweep",
                              "orchestrator.bench", "orchestrator.commands"),
    "orchestrator/spec": ("orchestrator.search", "orchestrator.sweep", "orchestrator.bench",
                          "orchestrator.commands"),
    "orchestrator/search": ("orchestrator.sweep", "orchestrator.bench", "orchestrator.commands"),
    "orchestrator/sweep": ("orchestrator.bench", "orchestrator.commands"),
    "workloads": ("orchestrator", "threading"),  # a batch decodes as tensors, never a thread a row
    "workloads/decoding": ("workloads.models",),
}


def imported(path: Path) -> set[str]:
    """Every module `path` imports, at its top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("package", sorted(NEVER))
def test_a_package_imports_nothing_above_it(package):
    wrong = [f"{path.relative_to(ROOT)} imports {name}"
             for path in sorted((ROOT / package).rglob("*.py"))
             for name in sorted(imported(path))
             if any(name == banned or name.startswith(banned + ".") for banned in NEVER[package])]
    assert wrong == []
