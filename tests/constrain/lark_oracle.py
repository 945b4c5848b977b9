"""Exact brute-force prefix-viability oracle for Lark grammars under the *scannerless* semantics.

Semantics (the language of a grammar)
-------------------------------------
The grammar is loaded by Lark itself (``parser="earley", lexer="dynamic_complete"``, so imports,
templates, ``?rule`` / ``[x]`` / ``x*`` expansion and Lark's own checks, e.g. "no zero-width
terminals", are Lark's). Its language is that of the CFG ``lark.rules`` (start symbol ``start``)
where

* every terminal ``T`` is replaced by its **regular language**
  ``L(T) = {t : regex.fullmatch(T.pattern.to_regexp(), t)}`` (third-party ``regex`` module,
  Lark's ``g_regex_flags``): *any* match length, not the greedy or leftmost-first one, and each
  token is matched **on its own** -- lookarounds, ``\\b``, ``^``/``$`` inside a terminal see the
  token's boundaries as the string's boundaries, never the neighbouring text; except that a
  terminal with a lazy quantifier (``C_COMMENT``, ``ESCAPED_STRING``, ``/".*?"/``) ends at its
  first full match, as Lark's ``re.match`` finds it (its scan stops there);
* a run of ``%ignore`` tokens (each in the regular language of some ignore terminal, any number,
  each of any match length) may stand between any two terminals, at the start and at the end.

A string ``s`` is a *viable prefix* iff some ``w`` makes ``s + w`` a sentence.

Algorithm (``LarkOracle``): an incremental, character-level Earley recogniser on Lark's compiled
rules, written here (not Lark's parser), memoised per prefix.

* Items are ``(rule, dot, origin)``; column ``i`` holds the closed item set for ``s[:i]``;
  nullable nonterminals are handled the Aycock-Horspool way; rules using non-productive symbols
  are removed first, so *every* item in a column can be completed to a sentence.
* A *scan* ``(j, T)`` is started at every column ``j`` for every terminal ``T`` some item there
  expects, and for every ``%ignore`` terminal (if the column is non-empty). On every new character
  the scan is re-checked with ``regex.fullmatch(T, s[j:i], partial=True)``: ``None`` kills it;
  otherwise it stays alive, and if ``regex.fullmatch(T, s[j:i])`` (non-partial) succeeds, the
  items expecting ``T`` in column ``j`` are advanced into column ``i``. For an ignore terminal the
  whole column ``j`` is copied into column ``i`` with origin ``j`` renamed to ``i`` (the text
  ``s[j:i]`` is transparent), so runs of ignores never accumulate items.
* ``s`` (length ``n``) is viable iff column ``n`` is non-empty or some scan ``(j, T)`` with
  ``j < n`` is still alive (its payload is non-empty by construction, and everything left is
  productive); ``accepts(s)`` iff column ``n`` holds the completed augmented start item.
* Memoisation: column ``i`` depends only on ``s[:i]`` (tokens are matched standalone), so every
  prefix ever seen is a node of a character trie (node = columns along the path, shared as one
  list until the path branches, plus the alive scans). A query starts at the point where it
  leaves the previous query's path (binary search on the common prefix) and then walks the trie:
  ``viable(s0 + tok)`` costs at most ``len(tok)`` new columns, whatever was asked before.
  ``steps`` counts the columns computed; ``clear_cache()`` drops everything.

Other helpers: ``lark_accepts`` / ``lark_viable`` (Lark's own parser, below),
``completion_cost`` (a heuristic distance to a sentence), module functions ``random_sentences``,
``find_completion`` (a witness ``w`` with ``accepts(s + w)``, found heuristically) and
``mutations``.

Exactness: exact for the semantics above, given two facts about the ``regex`` module that hold for
ordinary patterns: ``fullmatch`` decides membership (it backtracks through all alternatives, so
lazy quantifiers and ``a|ab`` are fine), and a ``partial=True`` result means the text is a prefix
of some match. The latter is *optimistic* only where a pattern has a dead branch that the partial
text reaches: a lookahead at the very end of the partial text that no continuation can satisfy
(``/a(?=b)/`` is empty standalone, yet ``"a"`` is a partial match), an empty class such as
``[^\\s\\S]``, or an impossible anchor. Terminals are assumed to have non-empty languages (Lark
rejects zero-width ones; ``/a(?=b)/``-style empty terminals are not detected).
Lookarounds *inside* a token work exactly (``/a(?!b)[a-z]*/`` rejects ``ab``; ``/[a-z]+(?<!x)/``
keeps ``ax`` viable because ``axa`` matches); at a partial end ``regex`` reports "partial" when a
lookahead needs more text, which is correct except for the dead-branch case above; a negative
lookahead at the end of a *complete* token sees end-of-token (``/a(?!b)/`` is exactly ``{"a"}``).
Lazy quantifiers are rewritten to greedy ones before compiling (``greedy_pattern``; the language
under ``fullmatch`` is the same) because ``regex``'s ``partial=True`` is wrong for lazy repeats:
``regex.fullmatch(r'a.*?b', 'a\\n', partial=True)`` reports a partial match (regex 2026.5.9);
on all prefixes up to length 4, greedy patterns agreed with an automaton (``interegular``) on 400
random patterns, and rewritten lazy ones on 300 more.

Where Lark's own ``dynamic_complete`` parser differs from this semantics (``lark_accepts``):

1. Terminals: Lark takes ``T.match(text, i)`` (one, leftmost-first match, lookarounds in
   context) and then, with ``complete_lex``, re-matches the *truncations of that lexeme* standalone.
   It never finds a lexeme longer than the first match: ``/".*?"/`` never matches ``"a"b"``
   (regular language: it does), ``/a|ab/`` never matches ``ab``, ``C_COMMENT`` never spans a
   ``*/``. If the in-context match fails (``/a(?!b)/`` before ``b``) no length is tried at all.
2. ``%ignore``: Lark matches an ignore terminal once per position, with the one match ``match``
   returns (greedy for ``/[ ]+/``; no other lengths), and only where a token ended. So the language differs when a
   terminal that may follow can start with a character the ignore run would swallow: with
   ``%ignore /[ ]+/`` and ``B: " b"``, ``"a  b"`` is a sentence here ("a", ignore " ", B " b"),
   but Lark's greedy ignore eats both spaces and rejects it. (Ignore terminals whose greedy run is
   followed only by terminals that cannot start with its characters, e.g. ``WS`` before JSON
   tokens, give the same language.)
3. Lark's parser needs a completed start symbol with a non-``None`` SPPF node, and Lark uses
   ``re``, not ``regex`` (Unicode tables, possessive/atomic syntax may differ; ignored).

``lark_viable`` implements the split-point algorithm on top of Lark's parser (parse ``s[:p]``; it
must be alive at its end, and ``s[p:]`` must partially match a terminal Lark expects at ``p`` or
an ignore terminal) -- exact for Lark's language whenever 1-2 above do not bite and every rule is
productive (it cannot see that an expected terminal leads into a non-productive rule), which makes
it an independent cross-check of ``viable`` (the tests compare them). Note a prefix ending inside a
terminal (``"ab`` in JSON) makes Lark raise ``UnexpectedCharacters`` at the terminal's *start*,
not ``UnexpectedEOF``; that is why a split point is needed at all. A prefix ending exactly at a
terminal boundary parses completely or with ``UnexpectedEOF`` (split ``p = len(s)``); the token
may still grow, which is covered by the split at its start.

UTF-8 (``viable_bytes``): invalid UTF-8 anywhere (including overlong forms and surrogates) is not
viable. A trailing incomplete sequence stands for the contiguous code-point range ``R`` whose
encodings start with it; the answer is "some ``c`` in ``R`` makes ``decoded + c`` viable". Every
test a regex makes on one character is membership in an *atom* (a literal, a class, ``.``'s
``\\n`` test, ``\\w`` for ``\\b``); atoms are read from the terminals' parsed patterns
(``re._parser``) and compiled with ``regex`` under each of ``IGNORECASE`` and ``ASCII`` on and
off. Characters of ``R`` with the same membership in every atom behave identically in every
terminal (no backreferences), so one representative per membership class is tried. If some
pattern has a backreference or cannot be parsed by ``re._parser``, all of ``R`` is tried.
"""

from __future__ import annotations

import codecs
import random
import re
import string

import lark
import regex
from lark.exceptions import UnexpectedCharacters

try:  # Python >= 3.11
    from re import _constants as _sre_c, _parser as _sre_parse
except ImportError:  # pragma: no cover
    import sre_constants as _sre_c
    import sre_parse as _sre_parse

_START = "$START"


class _Column:
    __slots__ = ("items", "by_nt", "by_t", "accept", "_ctx")

    def __init__(self, items: frozenset, by_nt: dict, by_t: dict, accept: bool) -> None:
        self.items = items  # closed Earley items (rule id, dot, origin)
        self.by_nt = by_nt  # nonterminal -> items expecting it
        self.by_t = by_t  # terminal -> items expecting it
        self.accept = accept  # the augmented start item is complete here
        self._ctx: dict = {}  # completion_cost cache


class _Node:
    __slots__ = ("cols", "n", "scans", "viable", "children")

    def __init__(self, cols: list, n: int, scans: tuple, viable: bool) -> None:
        # cols[i] (i <= n) = Earley column after text[:i]. The list is shared with the nodes of
        # shorter and longer prefixes along one path (entries past n belong to a descendant).
        self.cols = cols
        self.n = n
        self.children: dict | None = None  # trie of prefixes: next character -> node
        self.scans = scans  # (start column, terminal name, is_ignore), alive after text
        self.viable = viable


_DEAD = _Node([], -1, (), False)


class LarkOracle:
    def __init__(self, grammar_text: str, *, start: str = "start", import_paths=()) -> None:
        self.start = start
        self.grammar_text = grammar_text
        self.lark = lark.Lark(grammar_text, parser="earley", lexer="dynamic_complete", start=start,
                              import_paths=list(import_paths))
        flags = self.lark.options.g_regex_flags or 0
        self.terminals = {t.name: t for t in self.lark.terminals}
        self.patterns = {name: t.pattern.to_regexp() for name, t in self.terminals.items()}
        # lazy quantifiers made greedy: same language under fullmatch, and it avoids a bug of
        # regex's partial matching (see greedy_pattern)
        self._pat = {name: regex.compile(greedy_pattern(p, flags), flags) for name, p in self.patterns.items()}
        self._lazy = {name for name, p in self.patterns.items() if greedy_pattern(p, flags) != p}
        self.ignore = tuple(self.lark.ignore_tokens)
        self._min_width = {name: max(1, t.pattern.min_width) for name, t in self.terminals.items()}

        # -- the grammar: productive rules only, augmented with $START -> start
        raw = [(r.origin.name, tuple((s.name, s.is_term) for s in r.expansion)) for r in self.lark.rules]
        productive = set(self._pat)
        changed = True
        while changed:
            changed = False
            for origin, syms in raw:
                if origin not in productive and all(name in productive for name, _ in syms):
                    productive.add(origin)
                    changed = True
        rules = [(_START, ((start, False),))] if start in productive else []
        rules += [(o, syms) for o, syms in raw if o in productive and all(n in productive for n, _ in syms)]
        self._origin = [o for o, _ in rules]
        self._next = [tuple(n for n, _ in syms) + (None,) for _, syms in rules]
        self._isterm = [tuple(t for _, t in syms) + (False,) for _, syms in rules]
        self._by_origin: dict[str, list[int]] = {}
        for rid, o in enumerate(self._origin):
            self._by_origin.setdefault(o, []).append(rid)
        self.nullable: set[str] = set()
        changed = True
        while changed:
            changed = False
            for o, syms in rules:
                if o not in self.nullable and all(not t and n in self.nullable for n, t in syms):
                    self.nullable.add(o)
                    changed = True
        # minimal lengths (for the completion heuristic of random_sentences only)
        self._minlen: dict[str, int] = dict(self._min_width)
        changed = True
        while changed:
            changed = False
            for o, syms in rules:
                if all(n in self._minlen for n, _ in syms):
                    v = sum(self._minlen[n] for n, _ in syms)
                    if v < self._minlen.get(o, 1 << 60):
                        self._minlen[o] = v
                        changed = True
        self._rest = [[sum(self._minlen[n] for n in nxt[d:-1]) for d in range(len(nxt))] for nxt in self._next]

        self.steps = 0  # number of columns computed so far (memoisation can be observed)
        col0 = self._close({(0, 0, 0)} if rules else set(), 0, [])
        self._root = self._make_node([col0], 0, ())
        self._memo: dict[str, _Node] = {"": self._root}  # queried strings (bounded)
        self._prev, self._path = "", [self._root]  # last walked string and its nodes, per prefix
        self._lark_memo: dict[str, tuple] = {}
        self._atoms_cache = None
        self._reps_cache: dict[tuple, list[str]] = {}

    # ------------------------------------------------------------------ Earley core
    def _close(self, kernel, i: int, cols: list) -> _Column:
        items: set = set()
        by_nt: dict = {}
        by_t: dict = {}
        accept = False
        nxt, isterm, origin = self._next, self._isterm, self._origin
        by_origin, nullable = self._by_origin, self.nullable
        agenda = list(kernel)
        while agenda:
            it = agenda.pop()
            if it in items:
                continue
            items.add(it)
            rid, dot, org = it
            sym = nxt[rid][dot]
            if sym is None:
                a = origin[rid]
                if a == _START:
                    accept = True
                    continue
                parents = by_nt.get(a, ()) if org == i else cols[org].by_nt.get(a, ())
                for pr, pd, po in parents:
                    agenda.append((pr, pd + 1, po))
            elif isterm[rid][dot]:
                by_t.setdefault(sym, []).append(it)
            else:
                lst = by_nt.get(sym)
                if lst is None:
                    by_nt[sym] = lst = []
                    agenda.extend((r, 0, i) for r in by_origin.get(sym, ()))
                lst.append(it)
                if sym in nullable:
                    agenda.append((rid, dot + 1, org))
        self.steps += 1
        return _Column(frozenset(items), by_nt, by_t, accept)

    def _make_node(self, cols: list, i: int, alive_scans: tuple) -> _Node:
        col = cols[i]
        scans = list(alive_scans)
        if col.items:
            scans += [(i, name, False) for name in col.by_t]
            scans += [(i, name, True) for name in self.ignore]
        viable = bool(col.items) or any(j < i for j, _, _ in alive_scans)
        return _Node(cols, i, tuple(scans), viable) if viable else _DEAD

    def _extend(self, node: _Node, text: str, n1: int) -> _Node:
        """The node of text[:n1]; `node` is the node of text[:n1 - 1]."""
        if not node.viable:
            return _DEAD
        cols = node.cols
        kernel: set = set()
        alive = []
        for scan in node.scans:
            j, name, is_ign = scan
            u = text[j:n1]
            pat = self._pat[name]
            m = pat.fullmatch(u, partial=True)
            if m is None:
                continue
            full = not m.partial or pat.fullmatch(u) is not None
            if not (full and name in self._lazy):
                # A lazy terminal (C_COMMENT, ESCAPED_STRING) is matched by Lark with re.match:
                # the first end found, so after its first full match the scan stops.
                alive.append(scan)
            if full:
                if is_ign:
                    kernel.update((r, d, n1 if o == j else o) for r, d, o in cols[j].items)
                else:
                    kernel.update((r, d + 1, o) for r, d, o in cols[j].by_t[name])
        col = self._close(kernel, n1, cols)
        if len(cols) == n1:  # node is the tip of its column list: share it
            cols.append(col)
        else:  # another continuation of text[:-1] already extended the list: branch off
            cols = cols[:n1] + [col]
        return self._make_node(cols, n1, tuple(alive))

    def _node(self, s: str) -> _Node:
        memo = self._memo
        node = memo.get(s)
        if node is not None:
            return node
        # Start where s leaves the previous query's path (s0 + token queries share s0), then walk
        # the trie; only characters never seen after this prefix cost new Earley columns.
        prev, path = self._prev, self._path
        lo, hi = 0, min(len(s), len(prev), len(path) - 1)
        while lo < hi:  # longest common prefix of s and prev
            mid = (lo + hi + 1) // 2
            if prev.startswith(s[:mid]):
                lo = mid
            else:
                hi = mid - 1
        path = path[:lo + 1]
        node = path[-1]
        for i in range(lo, len(s)):
            if not node.viable:
                node = _DEAD
                break
            children = node.children
            if children is None:
                node.children = children = {}
            child = children.get(s[i])
            if child is None:
                child = children[s[i]] = self._extend(node, s, i + 1)
            node = child
            path.append(node)
        if len(memo) > 100_000:
            memo.clear()
            memo[""] = self._root
        memo[s] = node
        self._prev, self._path = s, path
        return node

    def clear_cache(self) -> None:
        """Forget every computed column (the trie) and Lark parse."""
        self._root.children = None
        del self._root.cols[1:]
        self._memo = {"": self._root}
        self._prev, self._path = "", [self._root]
        self._lark_memo.clear()

    # ------------------------------------------------------------------ public API
    def viable(self, s: str) -> bool:
        """s is a prefix of some sentence."""
        return self._node(s).viable

    def accepts(self, s: str) -> bool:
        """s is a sentence (of the scannerless semantics; see the module doc for Lark's quirks)."""
        node = self._node(s)
        return node.viable and node.cols[node.n].accept

    def viable_bytes(self, b: bytes) -> bool:
        """UTF-8 bytes: viable iff valid UTF-8 whose trailing incomplete character (if any) can be
        completed to some code point c with decoded + c viable."""
        dec = codecs.getincrementaldecoder("utf-8")()
        try:
            text = dec.decode(bytes(b), final=False)
        except UnicodeDecodeError:
            return False
        tail = dec.getstate()[0]
        if not tail:
            return self.viable(text)
        ranges = _utf8_ranges(tail)
        if not ranges or not self.viable(text):
            return False
        return any(self.viable(text + c) for c in self._representatives(ranges))

    # ------------------------------------------------------------------ UTF-8 representatives
    def _atoms(self):
        if self._atoms_cache is None:
            srcs: set[str] = {r"\w", r"\d", r"\s", r"\n"}
            ok = True
            for p in self.patterns.values():
                try:
                    tree = _sre_parse.parse(p, self.lark.options.g_regex_flags or 0)
                except Exception:
                    ok = False
                    break
                if not _collect_atoms(tree, srcs):
                    ok = False
                    break
            if ok:
                comp = []
                for src in sorted(srcs):
                    for fl in (0, regex.IGNORECASE, regex.ASCII, regex.IGNORECASE | regex.ASCII):
                        try:
                            comp.append(regex.compile("(?:" + src + ")+", fl))
                        except regex.error:
                            ok = False
                self._atoms_cache = comp if ok else False
            else:
                self._atoms_cache = False
        return self._atoms_cache

    def _representatives(self, ranges: list[tuple[int, int]]) -> list[str]:
        key = tuple(ranges)
        reps = self._reps_cache.get(key)
        if reps is not None:
            return reps
        atoms = self._atoms()
        reps = []
        seen: set = set()
        for lo, hi in ranges:
            text = "".join(map(chr, range(lo, hi + 1)))
            if atoms is False:  # backreference / unparsable pattern: try every code point
                reps.extend(text)
                continue
            runs = [[(m.start(), m.end()) for m in a.finditer(text)] for a in atoms]
            cuts = sorted({0, len(text)} | {x for rs in runs for r in rs for x in r})
            index = {c: k for k, c in enumerate(cuts)}
            sig = [0] * (len(cuts) - 1)
            for bit, rs in enumerate(runs):
                for a, b in rs:
                    for k in range(index[a], index[b]):
                        sig[k] |= 1 << bit
            for k, v in enumerate(sig):
                if v not in seen:
                    seen.add(v)
                    reps.append(text[cuts[k]])
        self._reps_cache[key] = reps
        return reps

    # ------------------------------------------------------------------ Lark's own parser
    def lark_accepts(self, s: str) -> bool:
        """Lark(..., parser="earley", lexer="dynamic_complete").parse(s) succeeds."""
        return self._lark_state(s)[0] == "accept"

    def _lark_state(self, s: str) -> tuple:
        """('dead' | 'eof' | 'accept', expected terminal names) after Lark's Earley parse of s."""
        st = self._lark_memo.get(s)
        if st is None:
            from lark.grammar import NonTerminal
            from lark.parsers.earley_common import Item

            p = self.lark.parser.parser
            start_symbol = NonTerminal(self.start)
            columns = [p.Set()]
            to_scan = p.Set()
            for rule in p.predictions[start_symbol]:
                item = Item(rule, 0, 0)
                (to_scan if item.expect in p.TERMINALS else columns[0]).add(item)
            try:
                to_scan = p._parse(s, columns, to_scan, start_symbol)
            except UnexpectedCharacters:
                st = ("dead", frozenset())
            else:
                done = any(n.is_complete and n.node is not None and n.s == start_symbol and n.start == 0
                           for n in columns[-1])
                st = ("accept" if done else "eof", frozenset(t.expect.name for t in to_scan))
            self._lark_memo[s] = st
        return st

    def lark_viable(self, s: str) -> bool:
        """The split-point algorithm on Lark's parser (see the module doc); Lark's language."""
        for p in range(len(s) + 1):
            status, expected = self._lark_state(s[:p])
            if status == "dead":
                continue
            if p == len(s):
                return True
            tail = s[p:]
            for name in set(expected) | set(self.ignore):
                if self._pat[name].fullmatch(tail, partial=True) is not None:
                    return True
        return False

    # ------------------------------------------------------------------ completion heuristic
    def _ctx(self, cols: list, j: int, a: str, depth: int = 0) -> float:
        """Min. length of text completing the context of nonterminal `a` recognised from column j."""
        col = cols[j]
        cache = col._ctx
        if a in cache:
            return cache[a]
        cache[a] = float("inf")  # cycle guard
        best = float("inf")
        for pr, pd, po in col.by_nt.get(a, ()):
            o = self._origin[pr]
            rest = self._rest[pr][pd + 1]
            best = min(best, rest if o == _START else rest + self._ctx(cols, po, o, depth + 1))
        cache[a] = best
        return best

    def _item_cost(self, cols, rid, dot, org) -> float:
        o = self._origin[rid]
        rest = self._rest[rid][dot]
        return rest if o == _START else rest + self._ctx(cols, org, o)

    def _col_cost(self, cols, j) -> float:
        col = cols[j]
        if col.accept:
            return 0
        return min((self._item_cost(cols, r, d, o) for r, d, o in col.items), default=float("inf"))

    def completion_cost(self, s: str) -> float:
        """Heuristic (not exact) estimate of the length of the shortest completion of s."""
        node = self._node(s)
        if not node.viable:
            return float("inf")
        cols, n = node.cols, len(s)
        best = self._col_cost(cols, n)
        for j, name, is_ign in node.scans:
            if j == n:
                continue
            u = s[j:]
            pat = self._pat[name]
            rem = 0 if pat.fullmatch(u) else max(1, self._min_width[name] - len(u))
            if is_ign:
                best = min(best, rem + self._col_cost(cols, j))
            else:
                for r, d, o in cols[j].by_t[name]:
                    best = min(best, rem + self._item_cost(cols, r, d + 1, o))
        return best

    def alphabet(self) -> str:
        """Candidate characters for random walks: printable ASCII, the grammar's literal
        characters and the characters of its patterns, and a few non-ASCII characters."""
        chars = set(string.printable) | set("éØöø÷ÿ€中😀\u00a0")
        for t in self.terminals.values():
            chars |= set(t.pattern.value)
        chars |= {c for c in self.grammar_text if not c.isascii()}
        return "".join(sorted(c for c in chars if c.isprintable() or c in "\t\n\r\f\v"))

    def pattern_chars(self) -> str:
        return "".join(sorted({c for t in self.terminals.values() for c in t.pattern.value}))


# ---------------------------------------------------------------------- helpers
def _utf8_ranges(tail: bytes) -> list[tuple[int, int]]:
    """Code points whose UTF-8 encoding starts with the incomplete sequence `tail`."""
    lead = tail[0]
    if 0xC2 <= lead <= 0xDF:
        k, v, lo_ok, hi_ok = 2, lead & 0x1F, 0x80, 0x7FF
    elif 0xE0 <= lead <= 0xEF:
        k, v, lo_ok, hi_ok = 3, lead & 0x0F, 0x800, 0xFFFF
    elif 0xF0 <= lead <= 0xF4:
        k, v, lo_ok, hi_ok = 4, lead & 0x07, 0x10000, 0x10FFFF
    else:
        return []
    if len(tail) >= k or any(not 0x80 <= c <= 0xBF for c in tail[1:]):
        return []
    for c in tail[1:]:
        v = (v << 6) | (c & 0x3F)
    r = 6 * (k - len(tail))
    lo, hi = max(v << r, lo_ok), min((v << r) | ((1 << r) - 1), hi_ok)
    out = []
    for a, b in ((lo, min(hi, 0xD7FF)), (max(lo, 0xE000), hi)):
        if a <= b:
            out.append((a, b))
    return out


_QUANT_BRACE = re.compile(r"\{(?:\d+(?:,\d*)?|,\d+)\}")


def _sre_canon(tree, lazy_as_greedy: bool):
    """A parsed pattern as nested tuples (MIN_REPEAT read as MAX_REPEAT if lazy_as_greedy)."""
    def conv(x):
        if isinstance(x, _sre_parse.SubPattern):
            return tuple(conv(y) for y in x.data)
        if isinstance(x, (list, tuple)):
            return tuple(conv(y) for y in x)
        if lazy_as_greedy and x is _sre_c.MIN_REPEAT:
            return _sre_c.MAX_REPEAT
        return x
    return conv(tree), tree.state.flags


def greedy_pattern(pattern: str, flags: int = 0) -> str:
    """`pattern` with every lazy quantifier (``*?``, ``+?``, ``??``, ``{m,n}?``) made greedy.

    Under ``fullmatch`` both match the same strings, but ``regex``'s ``partial=True`` matching is
    wrong for lazy repeats of single-character items: ``regex.fullmatch(r'a.*?b', 'a\\n',
    partial=True)`` is a partial match although no extension matches (regex 2026.5.9). The
    rewrite is verified by comparing ``re._parser`` trees; if that fails the pattern is returned
    unchanged."""
    out = []
    i, n = 0, len(pattern)
    prev_quant = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            prev_quant = False
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            out.append(pattern[i:j + 1])
            i = j + 1
            prev_quant = False
        elif c == "(":
            if pattern.startswith("(?#", i):
                j = pattern.find(")", i)
                j = n if j < 0 else j
                out.append(pattern[i:j + 1])
                i = j + 1
            else:
                k = 2 if pattern.startswith("(?", i) else 1
                out.append(pattern[i:i + k])
                i += k
            prev_quant = False
        elif c in "*+?":
            if prev_quant:
                if c != "?":
                    out.append(c)  # possessive (or a syntax error): kept
                prev_quant = False
            else:
                out.append(c)
                prev_quant = True
            i += 1
        elif c == "{" and not prev_quant and _QUANT_BRACE.match(pattern, i):
            m = _QUANT_BRACE.match(pattern, i)
            out.append(m.group())
            i = m.end()
            prev_quant = True
        else:
            out.append(c)
            i += 1
            prev_quant = False
    new = "".join(out)
    if new == pattern:
        return pattern
    try:
        if _sre_canon(_sre_parse.parse(new, flags), False) == _sre_canon(_sre_parse.parse(pattern, flags), True):
            return new
    except Exception:
        pass
    return pattern


def _class_src(items) -> str:
    parts = []
    for op, av in items:
        if op is _sre_c.NEGATE:
            parts.insert(0, "^")
        elif op is _sre_c.LITERAL:
            parts.append("\\U%08x" % av)
        elif op is _sre_c.RANGE:
            parts.append("\\U%08x-\\U%08x" % av)
        elif op is _sre_c.CATEGORY:
            parts.append({
                _sre_c.CATEGORY_DIGIT: r"\d", _sre_c.CATEGORY_NOT_DIGIT: r"\D",
                _sre_c.CATEGORY_SPACE: r"\s", _sre_c.CATEGORY_NOT_SPACE: r"\S",
                _sre_c.CATEGORY_WORD: r"\w", _sre_c.CATEGORY_NOT_WORD: r"\W",
            }[av])
        else:
            raise ValueError(op)
    return "[" + "".join(parts) + "]"


def _collect_atoms(tree, out: set) -> bool:
    """Add the single-character tests of a parsed pattern to `out`; False on backreferences."""
    for op, av in tree:
        if op in (_sre_c.LITERAL, _sre_c.NOT_LITERAL):
            out.add("\\U%08x" % av)
        elif op is _sre_c.ANY:
            out.add(r"\n")
        elif op is _sre_c.IN:
            try:
                out.add(_class_src(av))
            except (ValueError, KeyError):
                return False
        elif op is _sre_c.AT:
            out.add(r"\w")
            out.add(r"\n")
        elif op is _sre_c.SUBPATTERN:
            if not _collect_atoms(av[-1], out):
                return False
        elif op is _sre_c.BRANCH:
            if not all(_collect_atoms(b, out) for b in av[1]):
                return False
        elif op in (_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT, getattr(_sre_c, "POSSESSIVE_REPEAT", None)):
            if not _collect_atoms(av[2], out):
                return False
        elif op is getattr(_sre_c, "ATOMIC_GROUP", None):
            if not _collect_atoms(av, out):
                return False
        elif op in (_sre_c.ASSERT, _sre_c.ASSERT_NOT):
            if not _collect_atoms(av[1], out):
                return False
        else:  # GROUPREF, GROUPREF_EXISTS, anything unknown
            return False
    return True


def random_sentences(oracle: LarkOracle, n: int, rng: random.Random, max_len: int = 30, *,
                     p_stop: float = 0.25, max_attempts: int | None = None) -> list[str]:
    """Up to n random sentences (each one oracle.accepts) by a random walk over characters.

    Every step picks a random character of oracle.alphabet() (printable ASCII, the characters of
    the grammar's patterns and literals, a few non-ASCII ones) that keeps the text viable -- with
    probability 1/2 among the viable characters that occur in some terminal's pattern/literal, so
    that punctuation is not drowned by letters and digits, and mostly not whitespace when
    something else is viable. At an accepted text the walk stops with probability p_stop. From
    max_len // 2 characters on, the walk turns greedy: it picks among the viable characters one
    minimising oracle.completion_cost (a heuristic), so that most walks close before max_len;
    walks that reach max_len unaccepted are dropped. Deterministic for a given rng state."""
    alpha = oracle.alphabet()
    closing = oracle.pattern_chars() or alpha
    out: list[str] = []
    attempts = 0
    max_attempts = max_attempts if max_attempts is not None else 20 * n + 20
    while len(out) < n and attempts < max_attempts:
        attempts += 1
        s = ""
        if not oracle.viable(s):
            break
        while True:
            if oracle.accepts(s) and (rng.random() < p_stop or len(s) >= max_len):
                out.append(s)
                break
            if len(s) >= max_len:
                break
            if len(s) < max_len // 2:
                cands = [c for c in alpha if oracle.viable(s + c)]
                if cands and rng.random() < 0.5:
                    cands = [c for c in cands if c in closing] or cands
                solid = [c for c in cands if not c.isspace()]
                if solid and rng.random() < 0.85:
                    cands = solid
                elif not solid and oracle.accepts(s) and rng.random() < 0.7:
                    out.append(s)
                    break
            else:
                cands = _closing_candidates(oracle, s, closing, alpha, rng)
            if not cands:
                break
            s += rng.choice(cands)
    return out


def _closing_candidates(oracle: LarkOracle, s: str, closing: str, alpha: str, rng: random.Random) -> list[str]:
    best, cands = float("inf"), []
    for pool in (closing, alpha):
        for c in pool:
            if oracle.viable(s + c):
                v = oracle.completion_cost(s + c)
                if v < best:
                    best, cands = v, [c]
                elif v == best:
                    cands.append(c)
        if cands and best < oracle.completion_cost(s):
            break
    return cands


def find_completion(oracle: LarkOracle, s: str, rng: random.Random, max_extra: int = 40,
                    tries: int = 20) -> str | None:
    """Some w (found by greedy/random descent on completion_cost) with oracle.accepts(s + w), or None.
    A None is no proof of anything."""
    if not oracle.viable(s):
        return None
    alpha = oracle.alphabet()
    closing = oracle.pattern_chars() or alpha
    for _ in range(tries):
        w = ""
        while len(w) <= max_extra:
            if oracle.accepts(s + w):
                return w
            cands = _closing_candidates(oracle, s + w, closing, alpha, rng)
            if not cands:
                break
            w += rng.choice(cands)
    return None


def mutations(s: str, rng: random.Random, alphabet: str, k: int) -> list[str]:
    """k random one-character edits (insert / delete / replace) of s, plus junk appended."""
    out = []
    for _ in range(k):
        op = rng.randrange(4)
        i = rng.randrange(len(s) + 1)
        c = rng.choice(alphabet)
        if op == 0:
            out.append(s[:i] + c + s[i:])
        elif op == 1 and s:
            i = min(i, len(s) - 1)
            out.append(s[:i] + s[i + 1:])
        elif op == 2 and s:
            i = min(i, len(s) - 1)
            out.append(s[:i] + c + s[i + 1:])
        else:
            out.append(s[:i] + c)
    return out


__all__ = ["LarkOracle", "random_sentences", "find_completion", "mutations"]
