"""The sandbox runner's bundle: ``trellis/codegen/seccomp.py`` + the parts of ``trellis/codegen/runner/``
in ``PARTS`` order, joined into the one script the child receives (``sandbox_child.runner_source``).

The parts are never imported: they are texts that share one namespace in the child. So each must
be valid Python alone, import only the standard library (``python -I -S`` has nothing else), stay
under the size line, and define no top-level name that another part (or ``seccomp.py``) defines
too, since the later definition would silently replace the earlier one in the script.
"""

from __future__ import annotations

import ast
import hashlib
import marshal
import sys
from pathlib import Path

import trellis.codegen.runner as runner_pkg
from trellis.codegen.runner import PARTS
from trellis.codegen.sandbox_child import runner_code, runner_source

RUNNER = Path(runner_pkg.__file__).resolve().parent
SECCOMP = RUNNER.parent / "seccomp.py"
MAX_LINES = 600

# Top-level names bound in more than one text of the bundle on purpose, and why.
SHARED_ON_PURPOSE = {
    "ctypes": "imported by seccomp.py (which is also imported alone) and again by runner/common.py",
    "os": "imported by seccomp.py (which is also imported alone) and again by runner/common.py",
}


def _texts() -> list[tuple[str, str]]:
    """(name, text) of every file of the bundle, in the order the script has them."""
    files = [SECCOMP] + [RUNNER / part for part in PARTS]
    return [(str(p.relative_to(RUNNER.parent)), p.read_text(encoding="utf-8")) for p in files]


def test_the_script_is_seccomp_then_the_parts_in_order_and_compiles():
    assert len(PARTS) == len(set(PARTS)) and PARTS
    on_disk = {p.name for p in RUNNER.glob("*.py")} - {"__init__.py"}
    assert set(PARTS) == on_disk, "a part file missing from PARTS, or PARTS naming a file that is gone"
    expected = "\n".join(text for _, text in _texts())
    assert runner_source() == expected
    code = compile(expected, "<trellis sandbox runner>", "exec", dont_inherit=True)
    assert marshal.loads(runner_code()) == code  # what is sent is this text, compiled


def test_every_part_parses_alone_and_imports_only_the_standard_library():
    stems = {Path(p).stem for p in PARTS}
    bad = []
    for name, text in _texts():
        tree = ast.parse(text, filename=name)  # valid on its own, not only once concatenated
        assert ast.get_docstring(tree), f"{name} has no docstring"
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                mods = [("." * node.level) + (node.module or "")]
            elif isinstance(node, ast.Import):
                mods = [alias.name for alias in node.names]
            else:
                continue
            for mod in mods:
                root = mod.split(".")[0]
                if mod.startswith(".") or root not in sys.stdlib_module_names or root in stems or root == "trellis":
                    bad.append(f"{name}:{node.lineno}: import {mod}")
    assert not bad, "imports outside the standard library (or of another part):\n" + "\n".join(bad)


def test_no_part_is_over_the_line():
    long = {}
    for p in RUNNER.glob("*.py"):
        n = len(p.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES:
            long[p.name] = n
    assert not long, f"runner parts over {MAX_LINES} lines: {long}"


def test_the_bytes_on_the_wire_are_the_files_on_disk():
    """The sha256 of the script equals that of the same concatenation computed here from the raw
    bytes of the files (no decoding, no newline translation), so nothing is added, dropped or
    reordered on the way."""
    recomputed = hashlib.sha256(b"\n".join(p.read_bytes() for p in [SECCOMP, *(RUNNER / part for part in PARTS)]))
    assert hashlib.sha256(runner_source().encode("utf-8")).hexdigest() == recomputed.hexdigest()


def _bindings(tree: ast.Module) -> dict[str, str]:
    """Top-level names a module binds -> how ("def", "class", "=", "import <module>"); statements
    nested in top-level if/try/with/for/while bodies count, function and class bodies do not."""
    out: dict[str, str] = {}

    def stored(node: ast.AST | None, how: str = "=") -> None:
        for sub in ast.walk(node) if node is not None else ():
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                out[sub.id] = how

    def walrus(node: ast.AST | None) -> None:
        for sub in ast.walk(node) if node is not None else ():
            if isinstance(sub, ast.NamedExpr):
                stored(sub.target)

    def visit(stmts: list[ast.stmt]) -> None:
        for s in stmts:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[s.name] = "def"
                continue
            if isinstance(s, ast.ClassDef):
                out[s.name] = "class"
                continue
            if isinstance(s, ast.Import):
                for a in s.names:
                    module = a.name if a.asname else a.name.split(".")[0]
                    out[a.asname or module] = f"import {module}"
            elif isinstance(s, ast.ImportFrom):
                for a in s.names:
                    out[a.asname or a.name] = f"import {'.' * s.level}{s.module or ''}.{a.name}"
            elif isinstance(s, ast.Assign):
                for t in s.targets:
                    stored(t)
                walrus(s.value)
            elif isinstance(s, (ast.AugAssign, ast.AnnAssign)):
                stored(s.target)
                walrus(s.value)
            elif isinstance(s, (ast.For, ast.AsyncFor)):
                stored(s.target)
                walrus(s.iter)
            elif isinstance(s, (ast.With, ast.AsyncWith)):
                for item in s.items:
                    stored(item.optional_vars)
                    walrus(item.context_expr)
            elif isinstance(s, (ast.If, ast.While)):
                walrus(s.test)
            elif isinstance(s, ast.Try):
                for h in s.handlers:
                    if h.name:
                        out[h.name] = "="
                    visit(h.body)
            elif isinstance(s, (ast.Expr, ast.Return)):
                walrus(s.value)
            for field in ("body", "orelse", "finalbody"):
                visit(getattr(s, field, None) or [])

    visit(tree.body)
    return out


def test_no_part_redefines_a_name_of_another():
    where: dict[str, list[tuple[str, str]]] = {}
    for name, text in _texts():
        for binding, how in _bindings(ast.parse(text)).items():
            where.setdefault(binding, []).append((name, how))
    shared = {n: w for n, w in where.items() if len(w) > 1}
    unplanned = {n: [f for f, _ in w] for n, w in shared.items() if n not in SHARED_ON_PURPOSE}
    assert not unplanned, f"top-level names defined by more than one text of the runner's script: {unplanned}"
    for n, w in shared.items():  # the listed ones bind the very same thing each time
        assert len({how for _, how in w}) == 1 and w[0][1].startswith("import "), (n, w)
    assert set(SHARED_ON_PURPOSE) <= set(shared), "SHARED_ON_PURPOSE lists a name no longer shared"
