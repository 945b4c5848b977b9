"""The living map stays true: ARCHITECTURE.md's module index names every module of the package (and
no module that is gone), README links the map, and no public module grows past ~600 lines."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "trellis"
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
        if n > MAX_LINES:
            long[rel] = n
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_no_private_name_is_imported_across_modules():
    """``from trellis.x import _name``, ``from trellis._x import ...`` or ``import trellis.x._mod``
    anywhere in the package,
    the tests or the benchmarks; the compiled extensions are imported by their one wrapper module
    each (``kernels.py``, ``constrain/vocab/rest_walk.py``, ``constrain/automata/dfa_minimise.py``)."""
    wrappers = {"trellis/kernels.py": "_qlinear", "trellis/constrain/vocab/walks.py": "_walkc",
                "trellis/constrain/automata/dfa_minimise.py": "_dfac", "trellis/constrain/earley/chart_kernel.py": "_statec",
                "trellis/constrain/grammar/analysis.py": "_cfgc",
                "trellis/constrain/automata/byte_dfa.py": "_dfac",
                # (imported by dfa_minimise, so it cannot read dfa_minimise.dfac: epsilon_free)
                "trellis/constrain/automata/regex_compile.py": "_dfac"}
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


# ------------------------------------------------------------------------- constrain/ as a pipeline
# Each unit of constrain/ (a subpackage, or a module of its own at the top) has a rank; an import
# goes to its own unit or to a unit of a lower rank. Units of one rank never import each other:
# the front ends, the grammar IR and the vocabulary walks are independent stages.
CONSTRAIN = PKG / "constrain"
RANKS = {
    "base": 0, "errors": 0, "gc_pause": 0, "disk_cache": 0,  # the floor: no other unit of constrain/
    "automata": 1, "terminal_kinds": 1,
    "frontends": 2, "grammar": 2, "vocab": 2,
    "earley": 3, "lalr": 3,
    "regex_constraint": 3,
    "compile": 4, "finish": 4, "tools": 5, "__init__": 6,
}


def _unit(rel: tuple[str, ...]) -> str:
    """The unit of a module path inside constrain/ (("vocab", "walks") -> "vocab")."""
    return rel[0].removesuffix(".py")


def _constrain_imports() -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(importer, imported) module paths inside constrain/, every import statement counted: at the
    top, inside functions and under ``if TYPE_CHECKING``."""
    import ast

    out = []
    for p in CONSTRAIN.rglob("*.py"):
        src = p.relative_to(CONSTRAIN).with_suffix("").parts
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.level:  # relative: resolved against the importer's package
                    base = ("trellis", "constrain") + src[:len(src) - node.level]
                    mod = ".".join(base + tuple(node.module.split(".")))
                else:
                    mod = node.module
                targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                parts = t.split(".")
                if parts[:2] != ["trellis", "constrain"] or len(parts) < 3:
                    continue
                rel = tuple(parts[2:])
                path = CONSTRAIN.joinpath(*rel)
                # keep the longest prefix that is a module or a package of constrain/
                while rel and not (path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()):
                    rel, path = rel[:-1], path.parent
                if rel:
                    out.append((src, rel))
    return out


def test_constrain_units_are_ranked():
    units = {_unit(p.relative_to(CONSTRAIN).parts) for p in CONSTRAIN.glob("*") if p.suffix == ".py" or
             (p / "__init__.py").is_file()}
    assert units == set(RANKS), f"units without a rank: {sorted(units - set(RANKS))}; gone: {sorted(set(RANKS) - units)}"


def test_constrain_imports_flow_one_way():
    """No import runs up or sideways between units, so no circle between subpackages."""
    bad = sorted({f"{'/'.join(a)} -> {'/'.join(b)}" for a, b in _constrain_imports()
                  if _unit(a) != _unit(b) and RANKS[_unit(b)] >= RANKS[_unit(a)]})
    assert not bad, "imports against the pipeline's flow:\n" + "\n".join(bad)


def test_no_import_circle_inside_a_unit():
    """Modules of one subpackage import each other one way too (two that must see each other are
    one algorithm: one module)."""
    graph: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
    for a, b in _constrain_imports():
        if _unit(a) == _unit(b) and a != b and b != a[:len(b)]:  # not the package importing itself
            graph.setdefault(a, set()).add(b)
    state: dict[tuple[str, ...], int] = {}
    cycles = []

    def visit(n: tuple[str, ...], stack: list[tuple[str, ...]]) -> None:
        state[n] = 1
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                cycles.append(" -> ".join("/".join(x) for x in stack[stack.index(m):] + [m]))
            elif m not in state:
                visit(m, stack + [m])
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])
    assert not cycles, "import circles:\n" + "\n".join(cycles)
