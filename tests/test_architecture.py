"""The living map stays true: ARCHITECTURE.md's module index names every module of the package (and
no module that is gone), README links the map, and no public module grows past ~600 lines."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "trellis"
# Over the line on purpose: the sandbox's child-side script, a stdlib-only text compiled and sent
# to the child whole (ARCHITECTURE.md, codegen/); not a module anything imports.
LONG_ON_PURPOSE = {"codegen/_runner.py"}
MAX_LINES = 600


def modules() -> set[str]:
    return {str(p.relative_to(ROOT)) for p in PKG.rglob("*") if p.suffix in (".py", ".c") and "__pycache__" not in p.parts}


def indexed() -> list[str]:
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("\n## Module index\n", 1)
    assert len(section) == 2, "ARCHITECTURE.md has no '## Module index' section"
    body = section[1].split("\n## ", 1)[0]
    return re.findall(r"^- `(trellis/[^`]+)`", body, flags=re.M)


def test_the_module_index_names_every_module_once():
    listed = indexed()
    assert len(listed) == len(set(listed)), "listed twice: " + ", ".join(p for p in set(listed) if listed.count(p) > 1)
    missing, stale = modules() - set(listed), set(listed) - modules()
    assert not missing, f"modules missing from ARCHITECTURE.md's index: {sorted(missing)}"
    assert not stale, f"ARCHITECTURE.md's index names modules that do not exist: {sorted(stale)}"


def test_readme_links_the_map():
    assert "ARCHITECTURE.md" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_no_public_module_over_the_line():
    long = {}
    for p in PKG.rglob("*.py"):
        rel = str(p.relative_to(PKG))
        n = len(p.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES and rel not in LONG_ON_PURPOSE:
            long[rel] = n
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_no_private_name_is_imported_across_modules():
    """``from trellis.x import _name``, ``from trellis._x import ...`` or ``import trellis.x._mod``
    anywhere in the package,
    the tests or the benchmarks; the compiled extensions are imported by their one wrapper module
    each (``kernels.py``, ``constrain/rest_walk.py``, ``constrain/dfa_minimise.py``)."""
    wrappers = {"trellis/kernels.py": "_qlinear", "trellis/constrain/rest_walk.py": "_walkc",
                "trellis/constrain/dfa_minimise.py": "_dfac"}
    bad = []
    for base in ("trellis", "tests", "benchmarks", "examples"):
        for p in (ROOT / base).rglob("*.py"):
            rel = str(p.relative_to(ROOT))
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
                m = re.match(r"\s*from (trellis[\w.]*) import (.*)", line)
                names = re.findall(r"\b(_\w+)", m.group(2).split("#")[0]) if m else []
                names += re.findall(r"\.(_[a-z]\w*)", m.group(1)) if m else []  # a private module
                names += re.findall(r"^\s*import trellis\.[\w.]*\.(_\w+)", line)
                names = [x for x in names if not (x.startswith("__") or wrappers.get(rel) == x)]
                if names:
                    bad.append(f"{rel}:{n}: {', '.join(names)}")
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)
