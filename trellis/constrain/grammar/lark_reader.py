"""A fast reader of the Lark grammars people usually write, for ``grammar_ir.load_lark``.

Lark's own loader (``lark.load_grammar``) parses grammar text with an LALR parser and a stack of
tree transformers, all in Python: 60-70% of a new grammar's compile (arithmetic.lark: 5.1 ms of
``load_grammar`` + 1.4 ms of ``Grammar.compile`` before any trellis work; sql_select.lark 9.5 +
11.3 ms; each timed alone). ``read`` reads the common subset directly into what
``grammar_ir._build`` consumes:

* statements ``rule: ...`` (modifiers ``?`` ``!``, priority ``.n``, aliases ``-> name``),
  ``TERM[.n]: ...``, ``%ignore ...``, ``%import common.NAME [-> ALIAS]`` and
  ``%import common (A, B)`` (Lark's own ``common.lark``, read by this reader too);
* expansions with ``|`` (also at the start of a continuation line), groups ``( )``, ``[ ]``,
  ``? * +``, ``~ n`` and ``~ n..m``, ``"strings"i``, ``/regexes/flags``, ``"a".."z"`` ranges;
  comments ``//`` and ``#``, ``\\`` line continuations.

Terminals are built as Lark's own pattern code builds them (``plain_patterns``: twins of its
pattern classes, its literal escapes and ``TerminalTreeToPattern``'s joins, without importing
Lark), so their regex text is the text Lark would compile, alternation order included (it matters
for lazy quantifiers). Rules become BNF as Lark's EBNF_to_BNF makes
them: groups and ``?`` distributed into alternatives, ``*`` and ``+`` as left-recursive helper
nonterminals (``_read.expand``). Anything else -- templates,
``%declare`` / ``%override`` / ``%extend``, other or relative imports, a name used but not defined,
a terminal that can match the empty string, anything that does not tokenise -- returns None, and
``load_lark`` hands the text to Lark, whose errors (with locations) then stand.
``tests/constrain/test_lark_reader.py`` checks that both readings give the same masks.
"""

from __future__ import annotations

import importlib.util
import os
import re
from typing import Any

from trellis.constrain.grammar.plain_patterns import PatternRE, alternatives, plain_pattern, repeat, sequence

_TOKEN = re.compile(r"""
  (?P<NL>(?:\r?\n[ \t]*(?:(?://|\#)[^\n]*)?)+(?:\|)?)
| (?P<WS>[ \t]+|\\[ ]*\r?\n|(?://|\#)[^\n]*)
| (?P<STRING>"(?:\\"|\\\\|[^"\n])*?"i?)
| (?P<REGEXP>/(?!/)(?:\\/|\\\\|[^/])*?/[imslux]*)
| (?P<TO>->)
| (?P<DOTDOT>\.\.)
| (?P<DOT>\.)
| (?P<DIRECTIVE>%[a-z]+)
| (?P<NUMBER>[+-]?\d+)
| (?P<RULE>[!?]*_?[a-z][_a-z0-9]*)
| (?P<TERMINAL>_?[A-Z][_A-Z0-9]*)
| (?P<OP>[+*?])
| (?P<PUNCT>[()\[\]{}:,|~])
""", re.X)


class _Bail(Exception):
    """The text is outside the subset: Lark's loader reads it."""


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos, n = 0, len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:
            raise _Bail
        kind = m.lastgroup
        val = m.group()
        pos = m.end()
        if kind == "WS":
            continue
        if kind == "NL":
            kind = "NL_OR" if val.endswith("|") else "NL"
            if out and out[-1][0] == "NL_OR":  # "|" then a line break: an empty alternative
                raise _Bail
            if out and out[-1][0] == "NL":
                out.pop()
        out.append((kind, val))  # type: ignore[arg-type]
    out.append(("NL", "\n"))
    return out


class _Parser:
    """Recursive descent over the token list: statements -> expansion trees
    (``("alts", [seq...])``, ``("seq", [item...])``, ``("rep", item, op, args)``, ``("lit", token)``,
    ``("range", a, b)``, ``("name", NAME)``)."""

    def __init__(self, toks: list[tuple[str, str]]) -> None:
        self.toks, self.i = toks, 0

    def peek(self) -> tuple[str, str]:
        return self.toks[self.i]

    def take(self, kind: str, val: str | None = None) -> str:
        k, v = self.toks[self.i]
        if k != kind or (val is not None and v != val):
            raise _Bail
        self.i += 1
        return v

    def statements(self) -> list[tuple]:
        out = []
        while self.i < len(self.toks):
            k, v = self.peek()
            if k in ("NL", "NL_OR"):
                if k == "NL_OR":
                    raise _Bail
                self.i += 1
                continue
            if k == "DIRECTIVE":
                self.i += 1
                if v == "%ignore":
                    out.append(("ignore", self.expansions()))
                elif v == "%import":
                    out.append(("import", *self.import_args()))
                else:  # %declare %override %extend
                    raise _Bail
            elif k in ("RULE", "TERMINAL"):
                self.i += 1
                name = v.lstrip("!?")
                if k == "TERMINAL" and name != v:
                    raise _Bail
                prio = 0
                if self.peek()[0] == "DOT":
                    self.i += 1
                    prio = int(self.take("NUMBER"))
                self.take("PUNCT", ":")  # a template's "{" lands here too: not read
                out.append(("rule" if k == "RULE" else "term", name, prio, self.expansions()))
            else:
                raise _Bail
            self.take("NL")
        return out

    def import_args(self) -> tuple[list[str], list[tuple[str, str]]]:
        path = [self.name()]
        while self.peek()[0] == "DOT":
            self.i += 1
            path.append(self.name())
        if self.peek() == ("PUNCT", "("):
            self.i += 1
            names = [self.name()]
            while self.peek() == ("PUNCT", ","):
                self.i += 1
                names.append(self.name())
            self.take("PUNCT", ")")
            return path, [(x, x) for x in names]
        if len(path) < 2:
            raise _Bail
        alias = path[-1]
        if self.peek()[0] == "TO":
            self.i += 1
            alias = self.name()
        return path[:-1], [(path[-1], alias)]

    def name(self) -> str:
        k, v = self.peek()
        if k not in ("RULE", "TERMINAL") or v[0] in "!?":
            raise _Bail
        self.i += 1
        return v

    def expansions(self) -> tuple:
        alts = [self.alias()]
        while self.peek()[0] == "NL_OR" or self.peek() == ("PUNCT", "|"):
            self.i += 1
            alts.append(self.alias())
        return ("alts", alts)

    def alias(self) -> tuple:
        seq = []
        while True:
            k, v = self.peek()
            if k in ("STRING", "REGEXP", "TERMINAL") or (k == "RULE" and v[0] not in "!?") or \
                    (k == "PUNCT" and v in "(["):
                seq.append(self.expr())
            else:
                break
        if self.peek()[0] == "TO":  # an alias names a tree node: no meaning in the language
            self.i += 1
            self.name()
            return ("aseq", seq)  # (but Lark refuses it inside a terminal)
        return ("seq", seq)

    def expr(self) -> tuple:
        atom = self.atom()
        k, v = self.peek()
        if k == "OP":
            self.i += 1
            return ("rep", atom, v, ())
        if (k, v) == ("PUNCT", "~"):
            self.i += 1
            lo = int(self.take("NUMBER"))
            if self.peek()[0] == "DOTDOT":
                self.i += 1
                hi = int(self.take("NUMBER"))
                if not 0 <= lo <= hi:
                    raise _Bail
                return ("rep", atom, "~", (lo, hi))
            if lo < 0:
                raise _Bail
            return ("rep", atom, "~", (lo,))
        return atom

    def atom(self) -> tuple:
        k, v = self.peek()
        self.i += 1
        if k == "PUNCT" and v in "([":
            inner = self.expansions()
            self.take("PUNCT", ")" if v == "(" else "]")
            return inner if v == "(" else ("rep", inner, "?", ())
        if k == "STRING" and self.peek()[0] == "DOTDOT":
            self.i += 1
            return ("range", v, self.take("STRING"))
        if k in ("STRING", "REGEXP"):
            return ("lit", k, v)
        if self.peek() == ("PUNCT", "{"):  # a template use
            raise _Bail
        return ("name", v)


_MAX_ALTS = 64  # alternatives a rule may distribute into before a group stays a nonterminal


def _common() -> str:
    """Lark's own ``common.lark``, found without importing Lark (its import is ~20-45 ms)."""
    spec = importlib.util.find_spec("lark")
    if spec is None or not spec.submodule_search_locations:
        raise _Bail
    with open(os.path.join(list(spec.submodule_search_locations)[0], "grammars", "common.lark"), encoding="utf-8") as f:
        return f.read()


_COMMON: dict[str, Any] = {}  # common.lark's terminal definitions


def read(text: str, *, start: str = "start") -> tuple[list, list, list[str]] | None:
    """``(terms, rules, ignore)`` as ``grammar_ir._build`` takes them, or None (module docstring)."""
    try:
        return _read(text, start)
    except Exception:  # _Bail, or anything Lark's own reading reports better (a bad escape...)
        return None


def _statements(text: str) -> list[tuple]:
    return _Parser(_tokens(text)).statements()


def _term_defs(stmts: list[tuple], imports: bool) -> dict[str, tuple[int, tuple]]:
    defs: dict[str, tuple[int, tuple]] = {}
    for st in stmts:
        if st[0] == "term":
            if st[1] in defs:
                raise _Bail
            defs[st[1]] = (st[2], st[3])
        elif st[0] == "import" and not imports:
            raise _Bail
    return defs


def _pattern(tree: tuple, defs: dict[str, tuple[int, tuple]], busy: frozenset = frozenset()) -> Any:
    """The pattern of a terminal's expansion tree, as Lark's ``TerminalTreeToPattern`` makes it."""
    kind = tree[0]
    if kind == "pat":  # an imported terminal, already a pattern
        return tree[1]
    if kind == "aseq":
        raise _Bail
    if kind == "alts":
        return alternatives([_pattern(a, defs, busy) for a in tree[1]])
    if kind == "seq":
        return sequence([_pattern(x, defs, busy) for x in tree[1]])
    if kind == "rep":
        return repeat([_pattern(tree[1], defs, busy), tree[2], *tree[3]])
    if kind == "lit":
        return plain_pattern(tree[2])
    if kind == "range":
        a, b = tree[1][1:-1], tree[2][1:-1]
        if tree[1].endswith("i") or tree[2].endswith("i") or len(a) != 1 or len(b) != 1 or a in "\\]^-" or b in "\\]^-":
            raise _Bail
        return PatternRE("[%s-%s]" % (a, b))
    name = tree[1]
    if name not in defs or name in busy:  # a rule inside a terminal, an undefined name, a cycle
        raise _Bail
    return _pattern(defs[name][1], defs, busy | {name})


def _read(text: str, start: str) -> tuple[list, list, list[str]]:
    stmts = _statements(text)
    defs = _term_defs(stmts, imports=True)
    rules_src: dict[str, tuple] = {}
    for st in stmts:
        if st[0] == "rule":
            if st[1] in rules_src:
                raise _Bail
            rules_src[st[1]] = st[3]
        elif st[0] == "import":
            path, names = st[1], st[2]
            if path != ["common"]:
                raise _Bail
            if "defs" not in _COMMON:
                _COMMON["defs"] = _term_defs(_statements(_common()), imports=False)
            cdefs = _COMMON["defs"]
            for name, alias in names:
                if name not in cdefs or alias in defs or not alias.lstrip("_")[:1].isupper():
                    raise _Bail
                prio, tree = cdefs[name]
                defs[alias] = (prio, ("pat", _pattern(tree, cdefs)))
    if start not in rules_src:
        raise _Bail

    terms = []
    for name, (prio, tree) in defs.items():
        p = _pattern(tree, defs)
        if _empty(p):  # Lark refuses empty terminals: let it say so
            raise _Bail
        terms.append(TermDef(name, p, prio))
    by_pattern = {t.pattern: t.name for t in terms}
    anon = 0

    def literal(tree: tuple) -> str:
        nonlocal anon
        p = _pattern(tree, {})
        name = by_pattern.get(p)
        if name is None:
            if _empty(p):
                raise _Bail
            name = by_pattern[p] = f"__ANON_{anon}"
            anon += 1
            terms.append(TermDef(name, p, 0))
        return name

    rules: list = []
    helpers = 0

    def helper(alts: list[tuple]) -> tuple[str, bool]:
        nonlocal helpers
        helpers += 1
        h = f"__h{helpers}"
        rules.extend((h, a) for a in alts)
        return (h, False)

    def plus(inner: tuple) -> tuple[str, bool]:
        """A nonterminal for ``inner+`` (left-recursive, as Lark's ``__x_plus``)."""
        nonlocal helpers
        helpers += 1
        h = f"__h{helpers}"
        for a in expand(inner):
            rules.extend([(h, a), (h, ((h, False),) + a)])
        return (h, False)

    def expand(tree: tuple) -> list[tuple]:
        """The alternatives (symbol tuples) of an expansion tree, groups and ``?`` distributed into
        alternatives and repetitions made nonterminals, as Lark's EBNF_to_BNF does (fewer
        nullable helpers than one nonterminal per group: a cheaper Earley closure); a product past
        ``_MAX_ALTS`` alternatives keeps a helper nonterminal instead."""
        kind = tree[0]
        if kind in ("lit", "range"):
            return [((literal(tree), True),)]
        if kind == "name":
            name = tree[1]
            if name in defs:
                return [((name, True),)]
            if name.lstrip("_")[:1].isupper() or name not in rules_src:
                raise _Bail
            return [((name, False),)]
        if kind in ("seq", "aseq"):
            out: list[tuple] = [()]
            for x in tree[1]:
                alts = expand(x)
                if len(out) * len(alts) > _MAX_ALTS:
                    alts = [(helper(alts),)]
                out = [a + b for a in out for b in alts]
            return out
        if kind == "alts":
            return [a for x in tree[1] for a in expand(x)]
        inner, op, args = tree[1], tree[2], tree[3]
        if op == "?":
            return [()] + expand(inner)
        if op == "*":
            return [(), (plus(inner),)]
        if op == "+":
            return [(plus(inner),)]
        lo, hi = (args[0], args[0]) if len(args) == 1 else args
        body = expand(inner)
        if len(body) > 1:
            body = [(helper(body),)]
        return [body[0] * k for k in range(lo, hi + 1)]

    for name, tree in rules_src.items():
        rules.extend((name, a) for a in expand(tree))
    ignore: list[str] = []
    for st in stmts:
        if st[0] == "ignore":
            alts = st[1][1]
            if len(alts) == 1 and len(alts[0][1]) == 1 and alts[0][1][0][0] == "name" and alts[0][1][0][1] in defs:
                ignore.append(alts[0][1][0][1])
            else:
                p = _pattern(st[1], defs)
                if _empty(p):
                    raise _Bail
                name = f"__IGNORE_{len(ignore)}"
                terms.append(TermDef(name, p, 0))
                ignore.append(name)
    return terms, rules, ignore


def _empty(p: object) -> bool:
    """Lark's ``p.min_width == 0``, with the regex parsed once for this test and the terminal's NFA
    (``regex_compile.min_width``); Lark's width rule (``plain_patterns.regexp_width``) where ``re``
    cannot parse it."""
    from trellis.constrain.automata.regex_compile import min_width

    if p.type == "str":  # type: ignore[attr-defined]
        return not p.value  # type: ignore[attr-defined]
    try:
        return min_width(p.to_regexp()) == 0  # type: ignore[attr-defined]
    except Exception:  # e.g. \p{..} classes, which Lark reads with the regex module
        return p.min_width == 0  # type: ignore[attr-defined]


__all__ = ["read"]


# ----------------------------------------------------------------------------- literals and terminal definitions


class TermDef:
    __slots__ = ("name", "pattern", "priority")

    def __init__(self, name: str, pattern: object, priority: int) -> None:
        self.name, self.pattern, self.priority = name, pattern, priority
