"""docs/concepts.md's layout names every module of the tree, so a new module is placed in it
when it is added, not found missing by the next contributor."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _layout() -> set[str]:
    text = (ROOT / "docs" / "concepts.md").read_text()
    block = text.split("```\nworkloads/", 1)[1].split("```", 1)[0]
    return set(re.findall(r"[a-z_0-9]+", block))


def test_the_layout_names_every_module():
    named = _layout()
    modules = [p for top in ("orchestrator", "workloads") for p in sorted((ROOT / top).rglob("*.py"))]
    missing = [str(p.relative_to(ROOT)) for p in modules if p.stem != "__init__" and p.stem not in named]
    assert missing == []


def test_the_layout_names_every_package():
    named = _layout()
    packages = [p.name for top in ("orchestrator", "workloads") for p in (ROOT / top).iterdir()
                if (p / "__init__.py").is_file()]
    assert [p for p in packages if p not in named] == []
