"""Python regex text -> byte NFA over UTF-8, read with Python's own regex parser.

Grammar terminals and ``Regex`` constraints are Python regexes (Lark hands its terminals to
``re``), so the parse tree is taken from ``re._parser``, the parser ``re.compile`` itself runs:
escapes, ``\\U`` literals, verbose mode (``x``), scoped and global flags (``(?i:...)``, ``(?s)``)
mean here exactly what they mean there. The tree is built into a Thompson NFA (Thompson 1968)
whose edges are byte ranges: every character set becomes the UTF-8 byte-range sequences of its
code points. ``epsilon_free`` removes the empty moves; ``regex.py`` determinises and minimises.

Character sets are exact under every flag, including the ones whose meaning lives inside
``_sre`` rather than the parser:

* ``\\d \\w \\s`` (Unicode unless ``a``): the code points ``re`` itself matches, found once per
  process by running the class over a string of every code point (~20 ms per class).
* ``i`` (ignore case): a character outside ``CASED`` (no case mapping to or from it, no special
  fold) matches under ``i`` exactly when it matches without; for the ~2,900 characters inside,
  the one-character regex is run by ``re`` over them. So Kelvin sign, long s, final sigma and
  dotted I follow ``re`` to the letter, with no case table of our own.
* ``.`` is every code point but ``\\n`` (all of them under ``s``); ``m`` changes only anchors.

Lookarounds raise ``Lookaround`` here; ``guarded_nfa`` keeps them as guarded empty moves for
``lookaround.py``, which compiles the ones that see only the match. Refused by name
(``RegexUnsupported``): anchors and ``\\b``, backreferences, conditional groups, atomic groups,
possessive quantifiers.
Lazy quantifiers are read as greedy: a full-match language does not depend on laziness (grammar
terminals, where ``re.match`` makes it matter, go through ``regex.terminal_dfa`` first).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

try:  # Python >= 3.11
    import re._constants as C  # type: ignore[import-not-found]
    import re._parser as P  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as C  # type: ignore[no-redef]
    import sre_parse as P  # type: ignore[no-redef]
import re

from trellis.constrain.automata.charsets import MAXC, Ranges, cs_diff, cs_neg, cs_union
from trellis.constrain.automata.utf8 import utf8_dawg

# ``dfac``: the C ``epsilon_free`` (``_dfac.c``, built by setup.py), or None: the Python one below. Loaded here,
# not through ``dfa_minimise`` (which imports this module), under the same switch
# (``TRELLIS_DFA_KERNEL=numpy``: the Python/numpy code throughout).
try:
    from trellis.constrain.automata import _dfac as dfac
except ImportError:  # pragma: no cover - depends on the install
    dfac = None
if os.environ.get("TRELLIS_DFA_KERNEL", "").lower() == "numpy":
    dfac = None

# A regex past this is refused rather than compiled for seconds: building, closing and determinising
# an NFA costs ~15-40 us a state in Python (``/(ab){2,50000}c/i``, 150k states: 4.4 s a compile;
# issue 58 bounds a compile at 2 s). The largest terminal NFA of 2,551 maskbench schemas has 12k
# states; ``[a-zA-Z_]\w{0,63}`` (Unicode) 20k; ``\w{0,200}`` 62k (0.95 s).
MAX_NFA_STATES = 100_000

Edges = list[list[tuple[int, int, int]]]  # per NFA state: (first byte, last byte, target)


class RegexUnsupported(Exception):
    """A construct that cannot be compiled exactly, or a regex too large (message says which)."""


class RegexTooLarge(RegexUnsupported):
    """The regex's automaton passes a size bound (message says which): refused, not compiled for
    minutes."""


class Lookaround(RegexUnsupported):
    """The regex has a lookaround: ``lookaround.py`` compiles it (or refuses it, by name)."""


_FLAG_LETTERS = ((C.SRE_FLAG_IGNORECASE, "i"), (C.SRE_FLAG_DOTALL, "s"), (C.SRE_FLAG_ASCII, "a"))
_REFUSED = {
    C.ASSERT: "lookaround", C.ASSERT_NOT: "negative lookaround", C.AT: "anchor",
    C.GROUPREF: "backreference", C.GROUPREF_EXISTS: "conditional group",
}
for _name, _what in (("ATOMIC_GROUP", "atomic group"), ("POSSESSIVE_REPEAT", "possessive quantifier"),
                     ("GROUPREF_IGNORE", "backreference")):
    if hasattr(C, _name):
        _REFUSED[getattr(C, _name)] = _what
_END_ANCHORS = (C.AT_END, C.AT_END_STRING)
_ANCHOR_BODIES = {  # what may not follow each end anchor (the X of its negative lookahead)
    "$": P.parse(r"[^\n]|\n(?s:.)"), "$m": P.parse(r"[^\n]"), "\\Z": P.parse(r"(?s:.)")}
_CATEGORY_TEXT = {C.CATEGORY_DIGIT: r"\d", C.CATEGORY_NOT_DIGIT: r"\D", C.CATEGORY_SPACE: r"\s",
                  C.CATEGORY_NOT_SPACE: r"\S", C.CATEGORY_WORD: r"\w", C.CATEGORY_NOT_WORD: r"\W"}
_SURROGATES = (0xD800, 0xDFFF)


# ----------------------------------------------------------------------------- exact char sets


@lru_cache(maxsize=1)
def _every_char() -> str:
    """Every code point but the surrogates, in order (decoded from UTF-32: ~5 ms)."""
    cps = np.concatenate([np.arange(0, _SURROGATES[0]), np.arange(_SURROGATES[1] + 1, MAXC + 1)])
    return cps.astype("<u4").tobytes().decode("utf-32-le")


def _runs(text: str, rx: str, flags: int, *, consecutive: bool) -> Ranges:
    """The code points of ``text`` matched by the one-character regex ``rx``, as ranges
    (``consecutive``: ``text`` is ``_every_char()``, so a run of matches is one range)."""
    pat = re.compile(f"(?:{rx})+", flags)
    out: list[tuple[int, int]] = []
    for m in pat.finditer(text):
        if not consecutive:
            out.extend((c, c) for c in map(ord, text[m.start():m.end()]))
            continue
        lo, hi = ord(text[m.start()]), ord(text[m.end() - 1])
        if lo < _SURROGATES[0] < hi:  # a run across the gap
            out += [(lo, _SURROGATES[0] - 1), (_SURROGATES[1] + 1, hi)]
        else:
            out.append((lo, hi))
    return cs_union((), tuple(out))


@lru_cache(maxsize=64)
def _category(rx: str, flags: int) -> Ranges:
    """``\\d`` ``\\w`` ``\\s`` (and negations) as ``re`` matches them under ``flags``."""
    return _runs(_every_char(), rx, flags, consecutive=True)


@lru_cache(maxsize=1)
def _cased() -> tuple[Ranges, str]:
    """The characters whose matching can change under ``i``: cased ones, the lower-case forms of
    any character, and ``re``'s extra folds. Case mappings end below U+20000 in every Unicode
    version so far (``tests/constrain/test_regex_compile.py`` checks the whole range)."""
    import _sre

    try:
        from re._casefix import _EXTRA_CASES  # type: ignore[import-not-found]
    except ImportError:  # Python 3.10: the same table under its old name
        from sre_compile import _ignorecase_fixes as _EXTRA_CASES  # type: ignore[attr-defined]

    chars: set[int] = set()
    for c in range(0x20000):
        low = _sre.unicode_tolower(c)
        if low != c or _sre.unicode_iscased(c):
            chars.add(c)
            chars.add(low)
    for k, vs in _EXTRA_CASES.items():
        chars.add(k)
        chars.update(vs)
    chars.discard(-1)
    ranges = cs_union((), tuple((c, c) for c in chars))
    return ranges, "".join(map(chr, sorted(chars)))


def _esc(c: int) -> str:
    return f"\\U{c:08x}"


def _set_text(op: object, av: object) -> str:
    """Regex text of one single-character node (for ``re`` to evaluate under flags)."""
    if op is C.LITERAL:
        return _esc(av)  # type: ignore[arg-type]
    if op is C.NOT_LITERAL:
        return f"[^{_esc(av)}]"  # type: ignore[arg-type]
    if op is C.ANY:
        return "."
    parts = []
    for iop, iav in av:  # type: ignore[attr-defined]
        if iop is C.NEGATE:
            parts.insert(0, "^")
        elif iop is C.LITERAL:
            parts.append(_esc(iav))
        elif iop is C.RANGE:
            parts.append(f"{_esc(iav[0])}-{_esc(iav[1])}")
        elif iop is C.CATEGORY:
            parts.append(_CATEGORY_TEXT[iav])
        else:
            raise RegexUnsupported(f"character class item {iop}")
    return "[" + "".join(parts) + "]"


def _plain_set(op: object, av: object, flags: int) -> Ranges:
    """The node's characters as if ``i`` were off."""
    if op is C.LITERAL:
        return ((av, av),)  # type: ignore[return-value]
    if op is C.NOT_LITERAL:
        return cs_neg(((av, av),))  # type: ignore[arg-type]
    if op is C.ANY:
        return ((0, MAXC),) if flags & C.SRE_FLAG_DOTALL else cs_neg(((10, 10),))
    out: Ranges = ()
    negate = False
    for iop, iav in av:  # type: ignore[attr-defined]
        if iop is C.NEGATE:
            negate = True
        elif iop is C.LITERAL:
            out = cs_union(out, ((iav, iav),))
        elif iop is C.RANGE:
            out = cs_union(out, ((iav[0], iav[1]),))
        elif iop is C.CATEGORY:
            out = cs_union(out, _category(_CATEGORY_TEXT[iav], flags & C.SRE_FLAG_ASCII))
        else:
            raise RegexUnsupported(f"character class item {iop}")
    return cs_neg(out) if negate else out


def char_set(op: object, av: object, flags: int) -> Ranges:
    """Exactly the code points (no surrogates) one single-character node matches under ``flags``.
    Memoised per node and flags: a repeat copies its body's nodes (``/(ab){2,50000}c/i`` asks for
    the same two case-folded sets 100,000 times; 7.4 -> 1.9 s a compile with the memo)."""
    # (a class's items are (opcode, int | (lo, hi) | None) tuples: its list as a tuple hashes
    # without the recursive copy, which was ~half of the Thompson construction's time over the
    # 1,614 terminal regexes of bench_fresh's schemas, cProfile)
    key = (op, tuple(av) if type(av) is list else av, flags)
    try:
        got = _CHAR_SETS.get(key)
    except TypeError:  # an unhashable item: copied all the way down
        key = (op, _hashable(av), flags)
        got = _CHAR_SETS.get(key)
    if got is None:
        if len(_CHAR_SETS) >= 4096:
            _CHAR_SETS.clear()
        got = _CHAR_SETS[key] = _char_set(op, av, flags)
    return got


_CHAR_SETS: dict[tuple, Ranges] = {}


def _hashable(av: object) -> object:
    return tuple(_hashable(x) for x in av) if isinstance(av, (list, tuple)) else av


def _char_set(op: object, av: object, flags: int) -> Ranges:
    plain = _plain_set(op, av, flags)
    if flags & C.SRE_FLAG_IGNORECASE:
        rx_flags = flags & (C.SRE_FLAG_IGNORECASE | C.SRE_FLAG_DOTALL | C.SRE_FLAG_ASCII)
        plain = cs_union(cs_diff(plain, _cased()[0]), _folded(_set_text(op, av), rx_flags))
    return cs_diff(plain, (_SURROGATES,))


@lru_cache(maxsize=4096)
def _folded(set_text: str, flags: int) -> Ranges:
    """The cased characters a class (as regex text) matches under ``i``: one ``re`` run over the
    ~2,800 cased characters (~0.15 ms), the same for every grammar that spells the class alike
    (sql_select.lark's 26 ``"..."i`` keywords: 6.5 ms of its 14 ms terminal build, cProfile)."""
    return _runs(_cased()[1], set_text, flags, consecutive=False)


# ----------------------------------------------------------------------------- Thompson NFA


@dataclass(frozen=True)
class Guard:
    """A lookaround ``(?=X)`` ``(?!X)`` ``(?<=X)`` ``(?<!X)``: an empty move allowed only when the
    text after (``ahead``) or before the point matches ``X`` (``negative``: does not). ``items`` and
    ``flags`` are X's parse tree and flags; ``width`` its width in characters (fixed for a
    lookbehind, as ``re`` requires). ``anchor``: the anchor this guard stands for ("$", "$m" or
    "\\Z"; "" for a written lookaround), so an error or a follow guard can say which."""

    ahead: bool
    negative: bool
    items: tuple
    flags: int
    width: int
    anchor: str = ""

    @property
    def what(self) -> str:
        if self.anchor:
            return "anchor " + ("$ (multiline)" if self.anchor == "$m" else self.anchor)
        return ("negative " if self.negative else "") + ("lookahead" if self.ahead else "lookbehind")


class _NFA:
    """States with byte-range edges and empty moves, appended as the tree is walked. With
    ``guards`` on, lookarounds become guarded empty moves (``geps``: (guard index, target))."""

    def __init__(self, *, guards: bool = False) -> None:
        self.edges: Edges = []
        self.eps: list[list[int]] = []
        self.geps: list[list[tuple[int, int]]] = []
        self.guards: list[Guard] | None = [] if guards else None
        # Whether a repeat of two or more iterations has a body that can match the empty string:
        # there ``re`` leaves the loop after an empty iteration (sre's MAX_UNTIL), a priority
        # rule the ordered construction (``lookaround.automaton``) does not model.
        self.empty_loop = False

    def new(self) -> int:
        n = len(self.edges)
        if n >= MAX_NFA_STATES:
            raise RegexTooLarge(f"over {MAX_NFA_STATES:,} automaton states")
        self.edges.append([])
        self.eps.append([])
        self.geps.append([])
        return n

    def new_many(self, k: int) -> range:
        """``k`` new states at once (``new`` per state was a tenth of the construction's time)."""
        n = len(self.edges)
        if n + k > MAX_NFA_STATES:
            raise RegexTooLarge(f"over {MAX_NFA_STATES:,} automaton states")
        self.edges += [[] for _ in range(k)]
        self.eps += [[] for _ in range(k)]
        self.geps += [[] for _ in range(k)]
        return range(n, n + k)

    def chars(self, s: int, e: int, ranges: Ranges) -> None:
        """Edges s -> e over the UTF-8 encodings of ``ranges``: a copy of the set's byte automaton
        (``utf8_dawg``), deterministic, so the subset construction pairs at most one of its
        states with each state of the other sets met along the same bytes."""
        nodes = utf8_dawg(ranges)
        if len(nodes) == 1:  # one byte (an ASCII class): its ranges, to the end
            self.edges[s] += [(lo, hi, e) for lo, hi, _ in nodes[0]]
            return
        ids = [s, *self.new_many(len(nodes) - 1)]
        for i, row in enumerate(nodes):
            out = self.edges[ids[i]]
            for lo, hi, t in row:
                out.append((lo, hi, e if t < 0 else ids[t]))

    def build(self, items: list, flags: int, s: int) -> int:
        """Add the sequence ``items`` starting at state ``s``; return its end state."""
        for op, av in items:
            if op is C.LITERAL and av < 0x80 and not flags & C.SRE_FLAG_IGNORECASE:
                # one byte, the general path's edge without the set algebra: enum values and
                # keys are mostly ASCII literals (a 392-value enum, o13020's: 27 -> 18 ms a compile)
                e = self.new()
                self.edges[s].append((av, av, e))
                s = e
            elif op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN):
                e = self.new()
                self.chars(s, e, char_set(op, av, flags))
                s = e
            elif op is C.SUBPATTERN:
                _, add, drop, sub = av
                s = self.build(list(sub), (flags | add) & ~drop, s)
            elif op is C.BRANCH:
                e = self.new()
                for alt in av[1]:
                    a = self.new()
                    self.eps[s].append(a)
                    self.eps[self.build(list(alt), flags, a)].append(e)
                s = e
            elif op in (C.MAX_REPEAT, C.MIN_REPEAT):
                # Empty moves are listed in backtracking priority (``lookaround.automaton`` with
                # ``ordered``): a greedy repeat tries one more iteration before leaving, a lazy one
                # leaves first. Set-based constructions ignore the order.
                lo, hi, sub = av
                self.empty_loop |= hi > 1 and sub.getwidth()[0] == 0
                sub = list(sub)
                lazy = op is C.MIN_REPEAT
                try:
                    for _ in range(lo):
                        s = self.build(sub, flags, s)
                except RegexTooLarge as e:
                    raise _in_repeat(e, lo, hi) from None
                if hi == C.MAXREPEAT:
                    a = self.new()
                    e = self.new()
                    b = self.build(sub, flags, a)
                    self.eps[s].extend((e, a) if lazy else (a, e))
                    self.eps[b].extend((e, a) if lazy else (a, e))
                    s = e
                elif hi > lo:
                    e = self.new()
                    try:
                        for _ in range(hi - lo):
                            a = self.new()
                            self.eps[s].extend((e, a) if lazy else (a, e))
                            s = self.build(sub, flags, a)
                    except RegexTooLarge as err:
                        raise _in_repeat(err, lo, hi) from None
                    self.eps[s].append(e)
                    s = e
            elif op is C.AT and av in _END_ANCHORS:
                # Anchors at the end of the text are lookaheads (re's own definitions): ``$`` is
                # ``(?![^\n]|\n(?s:.))`` (the end, or before a newline that ends the text), ``$``
                # under MULTILINE ``(?![^\n])``, ``\Z`` ``(?!(?s:.))``. Inside a terminal they judge
                # the terminal's own next characters; at its end, the document's (``lookaround.py``).
                anchor = "\\Z" if av is C.AT_END_STRING else "$m" if flags & C.SRE_FLAG_MULTILINE else "$"
                body = _ANCHOR_BODIES[anchor]
                g = Guard(True, True, tuple(body), body.state.flags, 1, anchor)  # type: ignore[attr-defined]
                if self.guards is None:
                    raise Lookaround(g.what)
                e = self.new()
                self.geps[s].append((len(self.guards), e))
                self.guards.append(g)
                s = e
            elif (op is C.ASSERT or op is C.ASSERT_NOT) and self.guards is not None:
                direction, sub = av
                lo, hi = sub.getwidth()
                g = Guard(direction > 0, op is C.ASSERT_NOT, tuple(sub), flags, lo)
                if not g.ahead and lo != hi:  # pragma: no cover - re refuses these itself
                    raise RegexUnsupported(f"{g.what} of variable width")
                e = self.new()
                self.geps[s].append((len(self.guards), e))
                self.guards.append(g)
                s = e
            elif op in _REFUSED:
                what = _REFUSED[op]
                if op is C.ASSERT or op is C.ASSERT_NOT:
                    what = ("lookbehind" if av[0] < 0 else "lookahead") if op is C.ASSERT else \
                        ("negative lookbehind" if av[0] < 0 else "negative lookahead")
                    raise Lookaround(what)
                elif op is C.AT:
                    what = {C.AT_BEGINNING: "anchor ^", C.AT_BEGINNING_STRING: "anchor \\A",
                            C.AT_END: "anchor $", C.AT_END_STRING: "anchor \\Z",
                            C.AT_BOUNDARY: "word boundary \\b", C.AT_NON_BOUNDARY: "anchor \\B"}.get(av, "anchor")
                raise RegexUnsupported(what)
            else:
                raise RegexUnsupported(f"regex construct {op}")
        return s


def one_char_set(items: list, flags: int) -> Ranges | None:
    """The characters a (sub)pattern of exactly one character matches, or None when it is not
    one (a class, a literal, ``.``, groups and alternations of those)."""
    if len(items) != 1:
        return None
    op, av = items[0]
    if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN):
        return char_set(op, av, flags)
    if op is C.SUBPATTERN:
        _, add, drop, sub = av
        return one_char_set(list(sub), (flags | add) & ~drop)
    if op is C.BRANCH:
        out: Ranges = ()
        for alt in av[1]:
            r = one_char_set(list(alt), flags)
            if r is None:
                return None
            out = cs_union(out, r)
        return out
    return None


def _in_repeat(e: RegexTooLarge, lo: int, hi: int) -> RegexTooLarge:
    """``e`` naming the outermost bounded repeat whose copies blew the NFA bound."""
    if str(e).startswith("bounded repeat"):
        return e
    return RegexTooLarge(f"bounded repeat {{{lo},{'' if hi == C.MAXREPEAT else hi}}} expands to {e}")


def epsilon_free(nfa: _NFA, start: int, end: int) -> tuple[Edges, set[int]]:
    """The NFA without empty moves, states renumbered from ``start`` = 0: a state's edges are the
    byte edges of its closure; it is final when its closure holds ``end``. Only the start and
    targets of byte edges are kept (the others are only ever passed through). In C where
    ``_dfac`` is built (its states may be numbered otherwise: the DFA built from either is the
    same, table for table, ``test_dfa_kernel``; this step over bench_fresh's 1,614 schema regexes,
    collector off: 360-473 -> 95-122 ms; regex_nfa with the collector on 3.1 -> 2.5 s)."""
    if dfac is not None:
        return dfac.epsilon_free(nfa.edges, nfa.eps, start, end)
    return epsilon_free_py(nfa, start, end)


def epsilon_free_py(nfa: _NFA, start: int, end: int) -> tuple[Edges, set[int]]:
    """``epsilon_free`` in Python (installs without ``_dfac``; the reference of the C one)."""
    closures: dict[int, list[int]] = {}

    def closure(q: int) -> list[int]:
        hit = closures.get(q)
        if hit is None:
            seen = {q}
            stack = [q]
            while stack:
                for t in nfa.eps[stack.pop()]:
                    if t not in seen:
                        seen.add(t)
                        stack.append(t)
            hit = closures[q] = list(seen)
        return hit

    num = {start: 0}
    order = [start]
    edges: Edges = []
    finals: set[int] = set()
    for q in order:  # grows while read
        cl = closure(q)
        row = []
        for p in cl:
            for lo, hi, t in nfa.edges[p]:
                j = num.get(t)
                if j is None:
                    j = num[t] = len(order)
                    order.append(t)
                row.append((lo, hi, j))
        if end in cl:
            finals.add(num[q])
        edges.append(row)
    return edges, finals


# pattern -> sre parse tree, read-only once made. A Lark terminal's regex is parsed twice in one
# compile: for its width (``min_width``: the reader refuses empty terminals as Lark does) and for
# its NFA; Lark's own width test (``Pattern.min_width``) was a third of the reading time of
# json.lark and llama.cpp's json.gbnf (cProfile, bench_fresh's grammar inputs).
PARSED: dict[str, object] = {}


def _tree(pattern: str) -> object:
    tree = PARSED.get(pattern)
    if tree is None:
        tree = P.parse(pattern, 0)
        if len(PARSED) >= 4096:
            PARSED.clear()
        PARSED[pattern] = tree
    return tree


def min_width(pattern: str) -> int:
    """The fewest characters a match of ``pattern`` has (``re``'s own bound, as Lark computes it)."""
    return _tree(pattern).getwidth()[0]  # type: ignore[attr-defined]


def parse_items(pattern: str) -> tuple[list, int]:
    """(the items of ``re``'s parse tree of ``pattern``, its global flags as ``re.compile`` sets
    them): what ``build`` reads."""
    tree = _tree(pattern)
    flags = tree.state.flags  # type: ignore[attr-defined]
    if not flags & C.SRE_FLAG_ASCII:
        flags |= C.SRE_FLAG_UNICODE  # what re.compile does for every str pattern
    return list(tree), flags  # type: ignore[call-overload]


def regex_nfa(pattern: str) -> tuple[Edges, set[int]]:
    """Epsilon-free byte NFA (start state 0) of a Python regex's full-match language.

    Raises ``re.error`` for text ``re`` rejects, ``Lookaround`` for a lookaround (see
    ``guarded_nfa``) and ``RegexUnsupported`` for the other constructs above."""
    items, flags = parse_items(pattern)
    nfa = _NFA()
    s = nfa.new()
    e = nfa.build(items, flags, s)
    return epsilon_free(nfa, s, e)


def guarded_nfa(pattern: str) -> tuple[_NFA, int, int]:
    """The Thompson NFA of ``pattern`` with its lookarounds as guarded empty moves (``nfa.guards``),
    empty moves kept: (nfa, start, end)."""
    items, flags = parse_items(pattern)
    nfa = _NFA(guards=True)
    s = nfa.new()
    return nfa, s, nfa.build(items, flags, s)


def items_nfa(items: list, flags: int, *, any_prefix: bool = False) -> tuple[Edges, set[int]]:
    """Epsilon-free byte NFA of a parsed (sub)pattern; ``any_prefix``: of ``(?s:.)*`` + it, the
    texts that END with a match (a lookbehind's tracker). Lookarounds inside are refused."""
    return items_nfa_sized(items, flags, any_prefix=any_prefix)[:2]


def items_nfa_sized(items: list, flags: int, *, any_prefix: bool = False) -> tuple[Edges, set[int], int]:
    """``items_nfa``, and the states of the Thompson NFA it was made from: what ``MAX_NFA_STATES``
    bounds (a repeat's body counts once per iteration; ``counted_repeat`` declines what the
    general path would refuse by it)."""
    nfa = _NFA()
    s = nfa.new()
    a = s
    if any_prefix:
        a = nfa.new()
        nfa.eps[s].append(a)
        nfa.chars(a, a, ((0, _SURROGATES[0] - 1), (_SURROGATES[1] + 1, MAXC)))
    try:
        e = nfa.build(items, flags, a)
    except Lookaround as err:
        raise RegexUnsupported(f"{err} inside a lookaround") from None
    states = len(nfa.edges)
    return (*epsilon_free(nfa, s, e), states)


__all__ = ["Guard", "Lookaround", "RegexTooLarge", "RegexUnsupported", "char_set", "guarded_nfa", "items_nfa",
           "items_nfa_sized", "one_char_set", "regex_nfa"]
