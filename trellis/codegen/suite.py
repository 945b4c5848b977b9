"""Test suites for generated programs: assert statements split out of test code so that each one
is run and counted on its own, and a deterministic visible / held-out split of them.

Two test formats are understood (see /work/shared/data/{humaneval,mbpp}):

- HumanEval style: module code (``METADATA``, imports, helpers) plus ``def check(candidate):``
  whose body holds the asserts; ``candidate`` is bound to the problem's ``entry_point``.
- Plain asserts (MBPP's ``test_list``): top-level ``assert f(...) == ...`` lines.

Every top-level statement of the check body (or of the module, for plain asserts) that contains an
``assert`` is one ``TestCase``; a compound one (``for x in ...: assert ...``) counts as one case.
The other statements of the body (``import math``, ``rng = random.Random(42)``) are *setup*: each
case carries the setup statements that precede it, so any subset of cases still runs alone.
"""

from __future__ import annotations

import ast
import random
import textwrap
from dataclasses import dataclass, replace
from typing import Sequence

from trellis.errors import UsageError

__all__ = ["TestCase", "TestSuite", "parse_tests", "split_tests"]


@dataclass(frozen=True)
class TestCase:
    """One counted test: ``source`` (an assert, or a compound statement holding asserts) run after
    ``setup`` (the non-assert statements before it in the check body), both dedented to column 0.
    ``line`` is its 1-based line in the original test code (0 when unknown)."""

    __test__ = False  # not a pytest class

    source: str
    setup: str = ""
    line: int = 0


@dataclass(frozen=True)
class TestSuite:
    """Cases plus ``preamble`` (module-level test code run once after the program: imports, helper
    functions, ``METADATA``) and ``entry_point`` (the function ``candidate`` is bound to; ``None``:
    the cases name the function themselves, as MBPP's do)."""

    __test__ = False

    cases: tuple[TestCase, ...]
    preamble: str = ""
    entry_point: str | None = None

    def __len__(self) -> int:
        return len(self.cases)

    def subset(self, indices: Sequence[int]) -> "TestSuite":
        """The suite with only the cases at ``indices`` (in the order given)."""
        return replace(self, cases=tuple(self.cases[i] for i in indices))


def _contains_assert(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Assert) for n in ast.walk(node))


def _source(text: str, node: ast.stmt) -> str:
    seg = ast.get_source_segment(text, node, padded=True)
    if seg is None:  # pragma: no cover - only for nodes without positions
        seg = ast.unparse(node)
    return textwrap.dedent(seg).strip("\n") + "\n"


def _cases(text: str, body: Sequence[ast.stmt], *, module: bool) -> tuple[list[TestCase], list[str]]:
    """Split statements into cases (with their setup) and, for a module, its preamble statements."""
    cases: list[TestCase] = []
    setup: list[str] = []
    preamble: list[str] = []
    for node in body:
        src = _source(text, node)
        if _contains_assert(node) and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            cases.append(TestCase(source=src, setup="".join(setup), line=node.lineno))
        elif module and isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef,
                                          ast.ClassDef)):
            preamble.append(src)  # definitions every case may use, whatever runs before it
        else:
            setup.append(src)
    return cases, preamble


def _is_check_call(node: ast.stmt, name: str) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name) and node.value.func.id == name)


def parse_tests(tests: str | Sequence[str], *, entry_point: str | None = None) -> TestSuite:
    """A ``TestSuite`` from test code (HumanEval ``check(candidate)`` style or plain asserts) or from
    a list of assert strings (one case each). Raises ``SyntaxError`` for test code that does not parse
    and ``ValueError`` when it holds no assert."""
    if not isinstance(tests, str):
        cases = [TestCase(source=textwrap.dedent(t).strip("\n") + "\n", line=0) for t in tests]
        for c in cases:
            ast.parse(c.source)  # a broken test is the caller's bug: say so now, not as a failed case
        if not cases:
            raise UsageError("no tests given")
        return TestSuite(cases=tuple(cases), entry_point=entry_point)
    tree = ast.parse(tests)
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"
                  and len(n.args.args) == 1), None)
    if check is None:
        cases, preamble = _cases(tests, tree.body, module=True)
        pre = "".join(preamble)
    else:
        cases, _ = _cases(tests, check.body, module=False)
        # everything outside check() is preamble, except a trailing `check(f)` driver call
        pre = "".join(_source(tests, n) for n in tree.body
                      if n is not check and not _is_check_call(n, "check"))
        arg = check.args.args[0].arg
        if arg != "candidate":  # bind whatever the parameter is called
            pre += f"{arg} = candidate\n"
    if not cases:
        raise UsageError("the test code holds no assert statement")
    return TestSuite(cases=tuple(cases), preamble=pre, entry_point=entry_point)


def split_tests(suite: TestSuite, *, visible_fraction: float = 0.5, seed: int = 0) -> tuple[TestSuite, TestSuite]:
    """(visible, held_out): ``floor(n * visible_fraction)`` cases (at least 1) chosen by a seeded
    shuffle that also depends on the cases' text, so the split is the same on every run and machine
    but differs between problems. Both halves keep the original case order; held-out is empty only
    for a single-case suite or ``visible_fraction == 1``."""
    if not 0.0 < visible_fraction <= 1.0:
        raise UsageError(f"visible_fraction must be in (0, 1], got {visible_fraction}")
    n = len(suite.cases)
    k = max(1, min(n, int(n * visible_fraction)))
    # str seeds hash with SHA-512 inside random.Random: stable across processes (unlike hash())
    rng = random.Random(f"{seed}|" + "\x00".join(c.source for c in suite.cases))
    visible = sorted(rng.sample(range(n), k))
    held = [i for i in range(n) if i not in set(visible)]
    return suite.subset(visible), suite.subset(held)
