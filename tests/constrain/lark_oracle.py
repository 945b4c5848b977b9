r"""Exact brute-force prefix-viability oracle for Lark grammars under the *scannerless* semantics.

Semantics (the language of a grammar)
-------------------------------------
The grammar is loaded by Lark itself (``parser="earley", lexer="dynamic_complete"``, so imports,
templates, ``?rule`` / ``[x]`` / ``x*`` expansion and Lark's own checks, e.g. "no zero-width
terminals", are Lark's). Its language is that of the CFG ``lark.rules`` (start symbol ``start``)
where a document ``s`` is cut into tokens and ``%ignore`` runs, and

* a terminal ``T`` (pattern ``p = T.pattern.to_regexp()``, Lark's ``g_regex_flags``) matches a
  token ``s[j:i]`` as follows:

  - **greedy** ``T`` (no lazy quantifier): ``s[j:i]`` is in the *regular language* of ``p``,
    ``regex.fullmatch(p, s[j:i])`` (third-party ``regex`` module, for its partial matching, with
    ``\s \d \w`` and their complements spelled out as the code points stdlib ``re`` gives them,
    ``re_classes``: the two modules disagree on ``\x1c-\x1f`` for ``\s`` and on 17,608 code
    points for ``\w``): *any* match length, not the greedy or leftmost-first one (``/a|ab/``
    matches ``ab``);
  - **lazy** ``T`` (``*?``, ``+?``, ``??``, ``{m,n}?`` anywhere): ``s[j:i]`` is in the
    *first-match language* ``FM(T) = {w : re.match(p, w).end() == len(w)}`` (stdlib ``re``, the
    backtracking leftmost-first match, ``w`` on its own). That is exactly the set of tokens Lark's
    ``dynamic_complete`` finds (it takes ``m = T.match(text, i)`` and re-matches every truncation
    of ``m`` standalone). ``C_COMMENT`` never spans a ``*/``, ``/".*?"/`` never spans a ``"``,
    ESCAPED_STRING ends at its first unescaped ``"``; but lark.lark's
    ``REGEXP: /\/(?!\/)(\\\/|\\\\|[^\/])*?\/[imslux]*/`` takes its greedy flag suffix
    (``/ab/i``) and, by backtracking, ``/a\/`` (a backslash before the closing slash) as well as
    ``/a\/b/``, and lark.lark's ``STRING`` takes ``"ab"i``;
  - **trailing guard**: a lookahead of ``p`` that can see past the end of the match (``OP:
    /[+*]|[?](?![a-z])/``) sees the *document*: ``s[j:i]`` is a token iff ``p`` matches from ``j``
    to exactly ``i`` with every lookahead evaluated against ``s`` itself (the next token's text,
    ignored text, or -- at the end of the document -- the end of string: a negative lookahead
    passes, a positive one fails). So ``?`` is an OP token iff the next character of the document
    is not in ``[a-z]`` or there is none. Lookaheads *inside* the match see the token's own text,
    as before; lookbehinds and ``^``/``\b`` at the start of a token see the token's start as
    the string's start (out of scope);

* a run of ``%ignore`` tokens (each a token of some ignore terminal, by the same rules, any
  number) may stand between any two terminals, at the start and at the end.

A string ``s`` is a *viable prefix* iff some ``w`` (possibly empty) makes ``s + w`` a sentence.

Supported patterns (else ``LarkOracle`` raises ``NotImplementedError`` naming the terminal):
a trailing guard must be a lookahead ``(?=X)`` / ``(?!X)`` whose content ``X`` tests exactly one
character (``(?![a-z])``, ``(?=\s)``, ``(?!\w)``), so that it inspects only the next character
past the match (``trailing_guards``: a lookaround or anchor that may reach two characters past
the end, ``\b``/``$``/``\Z`` at the end, or a lazy terminal with a trailing guard are refused).
A lazy terminal with a backreference is refused too, and so is a guard without an escape (below)
in a grammar with one.

Algorithm (``LarkOracle``): an incremental, character-level Earley recogniser on Lark's compiled
rules, written here (not Lark's parser), memoised per prefix.

* Items are ``(rule, dot, origin)``; column ``i`` holds the closed item set for ``s[:i]``;
  nullable nonterminals are handled the Aycock-Horspool way; rules using non-productive symbols
  are removed first, so *every* item in a column can be completed to a sentence -- with guards
  too, when every guarded terminal has an *escape*: a character ``e`` that starts a token of an
  unguarded ``%ignore`` terminal and passes all its guards (``" "`` of ``WS_INLINE`` for
  lark.lark's OP; ``LarkOracle.escape``): inserting such an ignore token after every guarded
  token of a completion satisfies every guard. Otherwise (``F: /[a-z]+(?=\()/`` with no
  ignore; or ``guard_analysis=True``) completability is decided by ``_GuardAnalysis``, a
  finite-state analysis over character classes (see its docstring; ``/a(?!b)/`` in ``start: A
  "b"`` makes the language empty, and ``viable("")`` is False).
* A *scan* ``(j, T)`` is started at every column ``j`` for every terminal ``T`` some item there
  expects, and for every ``%ignore`` terminal (if the column is non-empty). On every new character
  the scan is re-checked: it stays alive iff ``s[j:i]`` is a prefix of some token of ``T``
  (greedy: ``regex.fullmatch(T, s[j:i], partial=True)``; lazy: the first-match search below); if
  ``s[j:i]`` is a token, the items expecting ``T`` in column ``j`` are advanced into column ``i``.
  For an ignore terminal the whole column ``j`` is copied into column ``i`` with origin ``j``
  renamed to ``i`` (the text ``s[j:i]`` is transparent), so runs of ignores never accumulate items.
* A guarded token ending at ``i`` is *pending*: its items enter column ``i`` only once ``s[i]`` is
  known, iff ``regex.match("(?:T)(?=(?s:.)\Z)", s[j:i] + s[i])`` (the lookahead sees the one
  character it may inspect; exact because it inspects no further), or, for ``accepts``, iff
  ``regex.fullmatch(T, s[j:i])`` (end of document). It is a pending token at all iff it matches
  before the escape character (a guard passes for some next character iff it passes for ``e``,
  since ``e`` passes every one-character guard of ``T``), or, without an escape, before some
  character class or at the end. Column ``i`` is therefore closed when the trie node of
  ``s[:i]`` is extended (cached per set of satisfied pending tokens).
* ``s`` (length ``n``) is viable iff column ``n`` has a kernel item, unconditional or pending, or
  some scan ``(j, T)`` with ``j < n`` is still alive (its payload is non-empty by construction,
  and everything left is completable) -- under ``_GuardAnalysis``: iff one of them can be
  completed from the state its token leaves; ``accepts(s)`` iff column ``n``, closed for the end
  of the document, holds the completed augmented start item.
* Lazy terminals: liveness of ``u`` (some ``v`` with ``u + v`` in ``FM(T)``) is decided by an
  iterative-deepening search for ``v`` of length <= ``max(FM_DEPTH, min width of T)``
  (``FM_DEPTH = 4``) over one character per atom signature of ``T`` (``_term_reps``: characters
  with equal membership in every single-character test of ``T`` are interchangeable for
  ``re.match``), pruned by ``regex`` partial matching of the greedy rewrite (``FM(T)`` is part of
  the regular language, and ``greedy_pattern`` avoids ``regex``'s partial-matching bug for lazy
  repeats). Exact whenever every live prefix has a completion that short. It holds for the corpus
  (checked in the tests against a deeper bound): ``C_COMMENT`` ``/\*(.|\n)*?\*/`` -- a live
  ``/*x`` (no ``*/`` inside) is closed by ``*/`` (the first ``*/`` is then the last two
  characters), ``/`` by ``**/``; ``/".*?"/`` -- ``"x`` is closed by ``"``; ESCAPED_STRING and
  lark.lark's ``STRING`` -- ``"x`` by ``"`` or, after an odd run of backslashes, by ``\"``;
  ``REGEXP`` -- ``/`` by ``a/``, an open ``/x`` by ``/`` (a preceding backslash is then taken
  as ``[^\/]``), a closed one is a token or dead. The witness found for ``u`` is reused for
  ``u + v[0]``.
* Memoisation: column ``i`` depends only on ``s[:i + 1]``, so every prefix ever seen is a node of
  a character trie (node = the final columns along the path, shared as one list until the path
  branches, plus the pending column's kernels and the alive scans). A query starts at the point
  where it leaves the previous query's path (binary search on the common prefix) and then walks
  the trie: ``viable(s0 + tok)`` costs at most ``len(tok)`` new columns, whatever was asked
  before. ``steps`` counts the columns computed; ``clear_cache()`` drops everything.

Other helpers: ``lark_accepts`` / ``lark_viable`` (Lark's own parser, below),
``completion_cost`` (a heuristic distance to a sentence), module functions ``random_sentences``,
``find_completion`` (a witness ``w`` with ``accepts(s + w)``, found heuristically),
``mutations`` and ``trailing_guards``.

Exactness: exact for the semantics above, given two facts about the ``regex`` module that hold for
ordinary patterns: ``fullmatch`` decides membership (it backtracks through all alternatives, so
``a|ab`` is fine), and a ``partial=True`` result means the text is a prefix of some match. The
latter is *optimistic* only where a pattern has a dead branch that the partial text reaches: a
lookahead at the very end of the partial text that no continuation can satisfy (``/a(?=b)c/``),
an empty class such as ``[^\s\S]``, or an impossible anchor. Terminals are assumed to have
non-empty languages (Lark rejects zero-width ones; ``/a(?=b)c/``-style empty terminals are not
detected). Bounded searches (exact where the stated bounds suffice, checked in the tests for
the corpus): first-match liveness (``FM_DEPTH``) and, for guards without an escape, the token
enumeration of ``_GuardAnalysis`` (``GUARD_LEN``, ``GUARD_DEPTH``). Lookarounds *inside* a
token work exactly (``/a(?!b)[a-z]+/`` rejects ``ab``; ``/[a-z]+(?<!x)/`` keeps ``ax`` viable
because ``axa`` matches).
Lazy quantifiers are rewritten to greedy ones for ``regex`` (``greedy_pattern``; same regular
language under ``fullmatch``) because ``regex``'s ``partial=True`` is wrong for lazy repeats:
``regex.fullmatch(r'a.*?b', 'a\n', partial=True)`` reports a partial match (regex 2026.5.9);
on all prefixes up to length 4, greedy patterns agreed with an automaton (``interegular``) on 400
random patterns, and rewritten lazy ones on 300 more.

Where Lark's own ``dynamic_complete`` parser differs from this semantics (``lark_accepts``):

1. Greedy terminals: Lark takes ``T.match(text, i)`` (one, leftmost-first match, lookarounds in
   context) and then, with ``complete_lex``, re-matches the *truncations of that lexeme*
   standalone. It never finds a lexeme longer than the first match: ``/a|ab/`` never matches
   ``ab``. The truncations are matched standalone, so a trailing guard is only checked in context
   for the longest lexeme. (Lazy terminals: Lark's tokens are exactly ``FM(T)``, as here.)
2. ``%ignore``: Lark matches an ignore terminal once per position, with the one match ``match``
   returns (greedy for ``/[ ]+/``; no other lengths), and only where a token ended. So the language differs when a
   terminal that may follow can start with a character the ignore run would swallow: with
   ``%ignore /[ ]+/`` and ``B: " b"``, ``"a  b"`` is a sentence here ("a", ignore " ", B " b"),
   but Lark's greedy ignore eats both spaces and rejects it. (Ignore terminals whose greedy run is
   followed only by terminals that cannot start with its characters, e.g. ``WS`` before JSON
   tokens, give the same language.)
3. Lark's parser needs a completed start symbol with a non-``None`` SPPF node. Lark uses ``re``;
   the class escapes are made ``re``'s (``re_classes``), ``\b`` and case folding under
   IGNORECASE stay ``regex``'s, and possessive/atomic syntax may differ (ignored).

``lark_viable`` implements the split-point algorithm on top of Lark's parser (parse ``s[:p]``; it
must be alive at its end, and ``s[p:]`` must partially match a terminal Lark expects at ``p`` or
an ignore terminal) -- exact for Lark's language whenever 1-2 above do not bite, every rule is
productive (it cannot see that an expected terminal leads into a non-productive rule), no
terminal is lazy with a different regular language (it tests ``s[p:]`` against the regular
language) and none has a trailing guard (it parses ``s[:p]`` as a whole document), which makes
it an independent cross-check of ``viable`` (the tests compare them). Note a prefix ending inside a
terminal (``"ab`` in JSON) makes Lark raise ``UnexpectedCharacters`` at the terminal's *start*,
not ``UnexpectedEOF``; that is why a split point is needed at all. A prefix ending exactly at a
terminal boundary parses completely or with ``UnexpectedEOF`` (split ``p = len(s)``); the token
may still grow, which is covered by the split at its start.

UTF-8 (``viable_bytes``): invalid UTF-8 anywhere (including overlong forms and surrogates) is not
viable. A trailing incomplete sequence stands for the contiguous code-point range ``R`` whose
encodings start with it; the answer is "some ``c`` in ``R`` makes ``decoded + c`` viable". Every
test a regex makes on one character is membership in an *atom* (a literal, a class, ``.``'s
``\n`` test, ``\w`` for ``\b``); atoms are read from the terminals' parsed patterns
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
    from re import _compiler as _sre_compile, _constants as _sre_c, _parser as _sre_parse
except ImportError:  # pragma: no cover
    import sre_compile as _sre_compile
    import sre_constants as _sre_c
    import sre_parse as _sre_parse

_START = "$START"


class _Column:
    __slots__ = ("items", "by_nt", "by_t", "accept", "_ctx", "ok")

    def __init__(self, items: frozenset, by_nt: dict, by_t: dict, accept: bool) -> None:
        self.items = items  # closed Earley items (rule id, dot, origin)
        self.by_nt = by_nt  # nonterminal -> items expecting it
        self.by_t = by_t  # terminal -> items expecting it
        self.accept = accept  # the augmented start item is complete here
        self._ctx: dict = {}  # completion_cost cache
        self.ok: dict | None = None  # guard analysis: nonterminal -> states its context completes from


class _Node:
    __slots__ = ("cols", "n", "base", "guarded", "scans", "viable", "children", "tips")

    def __init__(self, cols: list, n: int, base: frozenset, guarded: tuple, scans: tuple, viable: bool) -> None:
        # cols[i] (i < n) = final Earley column after text[:i] (it depends on text[i] when a guarded
        # token ends at i). The list is shared with the nodes of shorter and longer prefixes along
        # one path (entries from n on belong to a descendant). Column n is pending: it is the
        # closure of `base` plus the kernels of those `guarded` completions (j, terminal, is_ignore,
        # token) whose trailing lookahead accepts the next character (or the end of the document).
        self.cols = cols
        self.n = n
        self.base = base
        self.guarded = guarded
        self.children: dict | None = None  # trie of prefixes: next character -> node
        self.scans = scans  # (start column j < n, terminal name, is_ignore), alive after text
        self.viable = viable
        self.tips: dict = {}  # frozenset of indices of satisfied `guarded` -> closed column n


_DEAD = _Node([], -1, frozenset(), (), (), False)


class LarkOracle:
    def __init__(self, grammar_text: str, *, start: str = "start", import_paths=(),
                 guard_analysis: bool | None = None) -> None:
        """guard_analysis: decide viability with _GuardAnalysis (True), with the %ignore escape
        (False: NotImplementedError if a trailing guard has none), or the latter where possible
        (None)."""
        self.start = start
        self.grammar_text = grammar_text
        self.lark = lark.Lark(grammar_text, parser="earley", lexer="dynamic_complete", start=start,
                              import_paths=list(import_paths))
        flags = self.lark.options.g_regex_flags or 0
        self.flags = flags
        self.terminals = {t.name: t for t in self.lark.terminals}
        self.patterns = {name: t.pattern.to_regexp() for name, t in self.terminals.items()}
        # lazy quantifiers made greedy: same regular language under fullmatch, and it avoids a bug
        # of regex's partial matching (see greedy_pattern); for a lazy terminal it only prunes the
        # first-match search (FM(T) is a subset of the regular language)
        self._pat = {name: regex.compile(re_classes(greedy_pattern(p, flags), flags), flags)
                     for name, p in self.patterns.items()}
        self._lazy = {name for name, p in self.patterns.items() if greedy_pattern(p, flags) != p}
        self.ignore = tuple(self.lark.ignore_tokens)
        self._min_width = {name: max(1, t.pattern.min_width) for name, t in self.terminals.items()}
        # lazy terminals: first-match language FM(T), decided with stdlib re (as Lark matches)
        self._re = {name: re.compile(self.patterns[name], flags) for name in self._lazy}
        self._fm_depth = {name: max(FM_DEPTH, self._min_width[name]) for name in self._lazy}
        self._fm_memo: dict[str, dict] = {name: {} for name in self._lazy}
        self._term_reps_cache: dict[str, list[str]] = {}
        # trailing guards: lookaheads that see past the end of the match
        self._ctx_pat: dict = {}  # guarded terminal -> regex "(?:T)(?=(?s:.)\Z)"
        self.escape: dict[str, str] = {}  # guarded terminal -> a character that satisfies its guard
        guards = {}
        for name, p in self.patterns.items():
            preds = trailing_guards(p, flags, name)
            if not preds:
                continue
            if name in self._lazy:
                raise NotImplementedError(f"terminal {name} ({p!r}): a lazy quantifier together with a "
                                          "lookahead past the end of its match is not modelled")
            guards[name] = preds
            try:
                self._ctx_pat[name] = regex.compile(re_classes("(?:" + p + r")(?=(?s:.)\Z)", flags), flags)
            except regex.error as e:
                raise NotImplementedError(f"terminal {name} ({p!r}): cannot match it in context: {e}") from e
        self._atoms_cache = None
        self._reps_cache: dict[tuple, list[str]] = {}
        self._guards = guards
        if guards:
            cands = self._representatives(_ALL_CHARS) if self._atoms() else list(string.printable)
            starts = [c for c in cands
                      if any(i not in guards and self._live(i, c) for i in self.ignore)]
            for name, preds in guards.items():
                esc = next((c for c in starts if all(pred(c) for pred in preds)), None)
                if esc is not None:
                    self.escape[name] = esc

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

        # guards without an escape: decide completability with a finite-state analysis
        no_escape = sorted(set(guards) - set(self.escape))
        if guard_analysis is False and no_escape:
            raise NotImplementedError(f"terminal {no_escape[0]} ({self.patterns[no_escape[0]]!r}): its trailing "
                                      "lookahead rejects the first character of every %ignore token")
        self._ga = _GuardAnalysis(self) if guards and (guard_analysis or no_escape) else None

        self.steps = 0  # number of columns computed so far (memoisation can be observed)
        base = frozenset({(0, 0, 0)} if rules else ())
        viable = bool(base) and (self._ga is None or self._ga.viable([], 0, base, (), (), ""))
        self._root = _Node([], 0, base, (), (), viable)
        self._memo: dict[str, _Node] = {"": self._root}  # queried strings (bounded)
        self._prev, self._path = "", [self._root]  # last walked string and its nodes, per prefix
        self._lark_memo: dict[str, tuple] = {}

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

    def _kernel(self, cols: list, j: int, name: str, is_ign: bool, i: int):
        """Items that a token of `name` (or an ignore token) over text[j:i] puts into column i."""
        if is_ign:  # the ignored text is transparent: column j again, origin j renamed to i
            return [(r, d, i if o == j else o) for r, d, o in cols[j].items]
        return [(r, d + 1, o) for r, d, o in cols[j].by_t[name]]

    def _tip(self, node: _Node, sat: frozenset) -> _Column:
        """Column node.n closed, given the set of satisfied guarded completions (cached)."""
        col = node.tips.get(sat)
        if col is None:
            kernel = set(node.base)
            for k in sat:
                j, name, is_ign, _ = node.guarded[k]
                kernel.update(self._kernel(node.cols, j, name, is_ign, node.n))
            col = node.tips[sat] = self._close(kernel, node.n, node.cols)
        return col

    def _eos_tip(self, node: _Node) -> _Column:
        """Column node.n at the end of the document (a trailing lookahead sees end of string)."""
        return self._tip(node, frozenset(k for k, (_, name, _, u) in enumerate(node.guarded)
                                         if self._pat[name].fullmatch(u) is not None))

    def _full_tip(self, node: _Node) -> _Column:
        """Column node.n with every guarded completion (each one satisfiable; see escape)."""
        return self._tip(node, frozenset(range(len(node.guarded))))

    def _extend(self, node: _Node, text: str, n1: int) -> _Node:
        """The node of text[:n1]; `node` is the node of text[:n1 - 1]."""
        if not node.viable:
            return _DEAD
        n, c = n1 - 1, text[n1 - 1]
        # 1. column n is final now that its next character c is known
        col = self._tip(node, frozenset(k for k, (_, name, _, u) in enumerate(node.guarded)
                                        if self._ctx_pat[name].match(u + c) is not None))
        cols = node.cols
        if len(cols) == n:  # node is the tip of its column list: share it
            cols.append(col)
        elif cols[n] is not col:  # another continuation already extended the list: branch off
            cols = cols[:n] + [col]
        scans = list(node.scans)
        if col.items:
            scans += [(n, name, False) for name in col.by_t]
            scans += [(n, name, True) for name in self.ignore]
        # 2. every scan reads c
        base: set = set()
        guarded = []
        alive = []
        for scan in scans:
            j, name, is_ign = scan
            u = text[j:n1]
            if not self._live(name, u):
                continue
            alive.append(scan)
            if name in self._ctx_pat:  # a guarded token: valid iff its lookahead accepts what follows
                if self._pending(name, u):
                    guarded.append((j, name, is_ign, u))
            elif self._member(name, u):
                base.update(self._kernel(cols, j, name, is_ign, n1))
        viable = bool(base) or bool(guarded) or bool(alive)
        if viable and self._ga is not None:
            viable = self._ga.viable(cols, n1, base, guarded, alive, text)
        return _Node(cols, n1, frozenset(base), tuple(guarded), tuple(alive), viable) if viable else _DEAD

    # ------------------------------------------------------------------ terminals
    def _pending(self, name: str, u: str) -> bool:
        """u is a token of the guarded terminal before some next character or the end."""
        esc = self.escape.get(name)
        if esc is not None:
            return self._ctx_pat[name].match(u + esc) is not None
        return bool(self._ga.follow(name, u))

    def _member(self, name: str, u: str) -> bool:
        """u is a token of the (unguarded) terminal: its regular language, or FM(T) if lazy."""
        if name in self._lazy:
            m = self._re[name].match(u)
            return m is not None and m.end() == len(u)
        return self._pat[name].fullmatch(u) is not None

    def _live(self, name: str, u: str) -> bool:
        """u is a prefix of some token of the terminal (u itself included)."""
        if self._pat[name].fullmatch(u, partial=True) is None:
            return False
        if name not in self._lazy:
            return True
        return self._fm_witness(name, u) is not None

    def _fm_witness(self, name: str, u: str) -> str | None:
        """Some v with u + v in FM(name), |v| <= the search depth, or None (see FM_DEPTH)."""
        memo = self._fm_memo[name]
        if u in memo:
            return memo[u]
        par = memo.get(u[:-1]) if u else None
        if par and par[0] == u[-1]:  # the parent's witness still works
            v = par[1:]
        else:
            v = self._fm_search(name, u, self._fm_depth[name])
        if len(memo) > 200_000:
            memo.clear()
        memo[u] = v
        return v

    def _fm_search(self, name: str, u: str, depth: int) -> str | None:
        """Iterative deepening over one character per atom signature of the terminal, pruned by
        the regular language's prefixes (FM(T) is part of it)."""
        pat, fm = self._pat[name], self._re[name]
        reps = self._term_reps(name)

        def rec(x: str, d: int) -> str | None:
            if d == 0:
                m = fm.match(x)
                return "" if m is not None and m.end() == len(x) else None
            for ch in reps:
                y = x + ch
                if pat.fullmatch(y, partial=True) is not None:
                    r = rec(y, d - 1)
                    if r is not None:
                        return ch + r
            return None

        for d in range(depth + 1):
            r = rec(u, d)
            if r is not None:
                return r
        return None

    def _term_reps(self, name: str) -> list[str]:
        """One character per atom-membership signature of this terminal's pattern (all code points)."""
        reps = self._term_reps_cache.get(name)
        if reps is None:
            atoms = _compile_atoms([self.patterns[name]], self.flags, ())
            if atoms is False:
                raise NotImplementedError(f"terminal {name} ({self.patterns[name]!r}): a lazy quantifier "
                                          "with a backreference is not modelled")
            reps = self._term_reps_cache[name] = _representatives(_ALL_CHARS, atoms)
        return reps

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
        del self._root.cols[:]
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
        return node.viable and self._eos_tip(node).accept

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
            self._atoms_cache = _compile_atoms(self.patterns.values(), self.flags)
        return self._atoms_cache

    def _representatives(self, ranges: list[tuple[int, int]]) -> list[str]:
        key = tuple(ranges)
        reps = self._reps_cache.get(key)
        if reps is None:
            reps = self._reps_cache[key] = _representatives(ranges, self._atoms())
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
        n = len(s)
        cols = node.cols[:n] + [self._full_tip(node)]
        best = self._col_cost(cols, n)
        for j, name, is_ign in node.scans:
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


class _GuardAnalysis:
    """Exact completability under trailing guards that no %ignore token can satisfy (the general
    path; see the module doc). Characters are abstracted to the grammar's atom classes ``K`` (one
    representative each) plus ``EOS``; a *state* is the set of classes the next character may be in
    (``ALL``: no requirement). A token of terminal ``T`` over ``u`` can follow state ``q`` iff the
    class of ``u[0]`` is in ``q``, and leads to state ``follow(T, u)`` (the classes ``c`` with
    ``u`` a token before ``c``, plus ``EOS`` if it is one at the end; ``ALL`` for unguarded ``T``).
    ``iface[T]`` = the (first class, state) pairs of ``T``'s tokens; ``ign`` those of the %ignore
    terminals (any number may stand before every token and at the end); ``R[N][q]`` = the states
    after a derivation of ``N`` from state ``q`` (least fixpoint over the rules). An Earley item
    ``(A -> a . b, o)`` reached in state ``q`` is completable iff some state after ``b`` is in
    ``ok(o, A)``: the states from which the context of ``A`` predicted in column ``o`` completes
    (a fixpoint per column over its items expecting ``A``; ``EOS`` reachable through ignores for
    the start symbol). Tokens are enumerated up to GUARD_LEN characters (``iface``) and
    extensions of an alive scan up to GUARD_DEPTH characters: exact when every (first class,
    state) pair is realised that short."""

    def __init__(self, o: "LarkOracle") -> None:
        self.o = o
        atoms = o._atoms()
        if atoms is False:
            raise NotImplementedError("trailing guards with a backreference in the grammar are not modelled")
        self.K = o._representatives(_ALL_CHARS)
        self.atoms = atoms
        self.cls = {self._sig(c): k for k, c in enumerate(self.K)}
        self.EOS = len(self.K)
        self.ALL = frozenset(range(len(self.K) + 1))
        self._follow: dict = {}
        self._ext: dict = {}
        self.iface = {name: self._iface(name) for name in o._pat}
        self.ign = set().union(*(self.iface[i] for i in o.ignore)) if o.ignore else set()
        self.states = {self.ALL} | {v for pairs in self.iface.values() for _, v in pairs}
        self._ic: dict = {}
        self.fin = frozenset(q for q in self.states if any(self.EOS in x for x in self.ic(q)))
        self._step: dict = {}
        self.R: dict = {nt: {q: set() for q in self.states} for nt in o._by_origin}
        self._seq: dict | None = None
        changed = True
        while changed:
            changed = False
            for rid, nt in enumerate(o._origin):
                for q in self.states:
                    out = self.seq(o._next[rid][:-1], q)
                    if not out <= self.R[nt][q]:
                        self.R[nt][q] |= out
                        changed = True
        self._seq = {}

    def _sig(self, c: str) -> tuple:
        return tuple(a.fullmatch(c) is not None for a in self.atoms)

    def follow(self, name: str, u: str) -> frozenset:
        """The state after a token u of the terminal (empty: u is no token in any context)."""
        o = self.o
        ctx = o._ctx_pat.get(name)
        if ctx is None:
            return self.ALL if o._member(name, u) else frozenset()
        key = (name, u)
        v = self._follow.get(key)
        if v is None:
            v = {k for k, c in enumerate(self.K) if ctx.match(u + c) is not None}
            if o._pat[name].fullmatch(u) is not None:
                v.add(self.EOS)
            if len(self._follow) > 200_000:
                self._follow.clear()
            v = self._follow[key] = frozenset(v)
        return v

    def _iface(self, name: str) -> set:
        o = self.o
        firsts = [c for c in self.K if o._live(name, c)]
        if name not in o._ctx_pat:
            return {(self.cls[self._sig(c)], self.ALL) for c in firsts}
        reps = _representatives(_ALL_CHARS, _compile_atoms([o.patterns[name]], o.flags, ()))
        out = set()
        frontier = firsts
        for _ in range(GUARD_LEN):
            for u in frontier:
                v = self.follow(name, u)
                if v:
                    out.add((self.cls[self._sig(u[0])], v))
            frontier = [u + r for u in frontier for r in reps if o._live(name, u + r)]
        return out

    def ic(self, q: frozenset) -> frozenset:
        """States reachable from q through %ignore tokens (q included)."""
        r = self._ic.get(q)
        if r is None:
            seen = {q}
            todo = [q]
            while todo:
                x = todo.pop()
                for a, v in self.ign:
                    if a in x and v not in seen:
                        seen.add(v)
                        todo.append(v)
            r = self._ic[q] = frozenset(seen)
        return r

    def step(self, sym: str, q: frozenset) -> set:
        if sym not in self.iface:
            return self.R[sym][q]
        key = (sym, q)
        r = self._step.get(key)
        if r is None:
            pairs = self.iface[sym]
            r = self._step[key] = {v for x in self.ic(q) for a, v in pairs if a in x}
        return r

    def seq(self, syms: tuple, q: frozenset) -> set:
        memo = self._seq
        key = (syms, q)
        if memo is not None and key in memo:
            return memo[key]
        cur = {q}
        for sym in syms:
            cur = set().union(*(self.step(sym, x) for x in cur)) if cur else cur
            if not cur:
                break
        if memo is not None:
            memo[key] = cur
        return cur

    def ok(self, col: _Column, o: int, cols: list) -> dict:
        """nonterminal -> states from which its context in column o (= col) completes."""
        if col.ok is not None:
            return col.ok
        org, nxt = self.o._origin, self.o._next
        est = {a: set() for a in col.by_nt}
        changed = True
        while changed:
            changed = False
            for a, parents in col.by_nt.items():
                cur = est[a]
                for pr, pd, po in parents:
                    p = org[pr]
                    if p == _START:
                        target = self.fin
                    elif po < o:
                        target = self.ok(cols[po], po, cols).get(p, ())
                    else:
                        target = est.get(p, ())
                    if not target:
                        continue
                    rest = nxt[pr][pd + 1:-1]
                    for q in self.states:
                        if q not in cur and not self.seq(rest, q).isdisjoint(target):
                            cur.add(q)
                            changed = True
        col.ok = {a: frozenset(v) for a, v in est.items()}
        return col.ok

    def _completable(self, items, q: frozenset, cols: list, n: int, tip) -> bool:
        org, nxt = self.o._origin, self.o._next
        for r, d, o in items:
            a = org[r]
            if a == _START:
                target = self.fin
            elif o < n:
                target = self.ok(cols[o], o, cols).get(a, ())
            else:
                target = self.ok(tip(), n, cols).get(a, ())
            if target and not self.seq(nxt[r][d:-1], q).isdisjoint(target):
                return True
        return False

    def extensions(self, name: str, u: str) -> set:
        """States after the tokens u + v of a guarded terminal, 1 <= len(v) <= GUARD_DEPTH."""
        key = (name, u)
        r = self._ext.get(key)
        if r is None:
            o = self.o
            reps = _representatives(_ALL_CHARS, _compile_atoms([o.patterns[name]], o.flags, ()))
            r = set()
            frontier = [u]
            for _ in range(GUARD_DEPTH):
                frontier = [x + c for x in frontier for c in reps if o._live(name, x + c)]
                r |= {self.follow(name, x) for x in frontier} - {frozenset()}
            if len(self._ext) > 100_000:
                self._ext.clear()
            self._ext[key] = r
        return r

    def viable(self, cols: list, n: int, base, guarded, alive, text: str) -> bool:
        """Some kernel item of column n (in its state), or some alive scan, can be completed."""
        groups: dict = {}
        if base:
            groups[self.ALL] = list(base)
        for j, name, is_ign, u in guarded:
            groups.setdefault(self.follow(name, u), []).extend(self.o._kernel(cols, j, name, is_ign, n))
        for q, kernel in groups.items():
            closed = []

            def tip(kernel=kernel, closed=closed):
                if not closed:
                    closed.append(self.o._close(set(kernel), n, cols))
                return closed[0]

            if self._completable(kernel, q, cols, n, tip):
                return True
        for j, name, is_ign in alive:
            if is_ign:
                payload = cols[j].items
            else:
                payload = [(r, d + 1, o) for r, d, o in cols[j].by_t[name]]
            states = self.extensions(name, text[j:n]) if name in self.o._ctx_pat else {self.ALL}
            for q in states:
                if self._completable(payload, q, cols, n, None):
                    return True
        return False


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


_RE_CLASS_TEST = {"s": str.isspace, "d": str.isdecimal, "w": lambda c: c.isalnum() or c == "_"}
_RE_CLASS_RANGES: dict[str, list[tuple[int, int]]] = {}


def _re_class_ranges(letter: str) -> list[tuple[int, int]]:
    """The code points stdlib ``re`` matches with ``\\s`` / ``\\d`` / ``\\w`` (``D``, ``S``, ``W``:
    the complement) in a str pattern without ASCII: ``_sre``'s SRE_UNI_IS_SPACE / IS_DECIMAL /
    IS_ALNUM-or-underscore, which are ``str.isspace`` / ``isdecimal`` / ``isalnum`` (checked
    against ``re`` itself in test_lark_oracle.py)."""
    got = _RE_CLASS_RANGES.get(letter)
    if got is None:
        test, neg = _RE_CLASS_TEST[letter.lower()], letter.isupper()
        got, lo = [], None
        for cp in range(0x110000 + 1):
            inside = cp <= 0x10FFFF and test(chr(cp)) != neg
            if inside and lo is None:
                lo = cp
            elif not inside and lo is not None:
                got.append((lo, cp - 1))
                lo = None
        _RE_CLASS_RANGES[letter] = got
    return got


def _class_body(ranges: list[tuple[int, int]]) -> str:
    def esc(cp: int) -> str:
        return f"\\U{cp:08x}"
    return "".join(esc(a) if a == b else esc(a) + "-" + esc(b) for a, b in ranges)


def re_classes(pattern: str, flags: int = 0) -> str:  # flags: stdlib re's (re.ASCII is 256, regex.ASCII 128)
    """``pattern`` with every ``\\s \\S \\d \\D \\w \\W`` spelled as the explicit code-point ranges
    stdlib ``re`` gives it, so that the third-party ``regex`` module (used for its partial
    matching) judges terminals as Lark does: the two disagree on 17,608 code points for ``\\w``
    (combining marks, superscripts), 110 for ``\\d`` and four for ``\\s`` (\\x1c-\\x1f, which
    ``re`` counts as whitespace; regex 2026.5.9). Unchanged under ASCII (both then mean the ASCII
    classes) or where ``re`` cannot parse the pattern. ``\\b`` (a word boundary) is left as it is."""
    try:
        if _sre_parse.parse(pattern, flags).state.flags & re.ASCII:
            return pattern
    except Exception:
        return pattern
    out, i, n, in_class = [], 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            e = pattern[i + 1]
            if e in "sSdDwW":
                body = _class_body(_re_class_ranges(e))
                out.append(body if in_class else "[" + body + "]")
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            if j < n and pattern[j] == "]":  # a leading ']' is a literal
                j += 1
            out.append(pattern[i:j])
            i = j
            continue
        if c == "]" and in_class:
            in_class = False
        out.append(c)
        i += 1
    return "".join(out)


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


_ALL_CHARS = [(0, 0xD7FF), (0xE000, 0x10FFFF)]  # every code point a document can hold

# Search depth of the first-match liveness of a lazy terminal (at least its minimal width): exact
# whenever every live prefix has a completion of at most that many characters (module doc).
FM_DEPTH = 4
# Enumeration bounds of the guard analysis (_GuardAnalysis): token length, extension length.
GUARD_LEN = 4
GUARD_DEPTH = 3

_ATOM_CACHE: dict = {}
_REPS_CACHE: dict = {}


def _compile_atoms(patterns, flags: int, extra=(r"\w", r"\d", r"\s", r"\n")):
    """The single-character tests of the patterns (see _collect_atoms) and `extra`, compiled under
    IGNORECASE and ASCII on and off; False if some pattern has a backreference or cannot be parsed."""
    srcs: set[str] = set(extra)
    for p in patterns:
        try:
            tree = _sre_parse.parse(p, flags)
        except Exception:
            return False
        if not _collect_atoms(tree, srcs):
            return False
    key = tuple(sorted(srcs))
    comp = _ATOM_CACHE.get(key)
    if comp is None:
        comp = []
        for src in key:
            for fl in (0, regex.IGNORECASE, regex.ASCII, regex.IGNORECASE | regex.ASCII):
                try:
                    re_fl = (re.IGNORECASE if fl & regex.IGNORECASE else 0) | (re.ASCII if fl & regex.ASCII else 0)
                    comp.append(regex.compile(re_classes("(?:" + src + ")+", re_fl), fl))
                except regex.error:
                    comp = False
                    break
            if comp is False:
                break
        _ATOM_CACHE[key] = comp
    return comp


def _representatives(ranges, atoms) -> list[str]:
    """One character of `ranges` per distinct membership signature in `atoms` (every character if
    atoms is False)."""
    key = (tuple(ranges), tuple(a.pattern for a in atoms) if atoms else atoms)
    reps = _REPS_CACHE.get(key)
    if reps is not None:
        return reps
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
    _REPS_CACHE[key] = reps
    return reps


_AT_REACH = {  # how many characters at and after its position an anchor inspects
    _sre_c.AT_BOUNDARY: 1, _sre_c.AT_NON_BOUNDARY: 1, _sre_c.AT_UNI_BOUNDARY: 1,
    _sre_c.AT_UNI_NON_BOUNDARY: 1, _sre_c.AT_LOC_BOUNDARY: 1, _sre_c.AT_LOC_NON_BOUNDARY: 1,
    _sre_c.AT_END: 2, _sre_c.AT_END_LINE: 1, _sre_c.AT_END_STRING: 1,
}
_REPEATS = (_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT) + ((_sre_c.POSSESSIVE_REPEAT,)
                                                     if hasattr(_sre_c, "POSSESSIVE_REPEAT") else ())


def _width(state, items) -> tuple[int, int]:
    return _sre_parse.SubPattern(state, list(items)).getwidth()


def _reach(seq) -> int:
    """How far past its start matching `seq` may inspect the text (its max. width, plus what
    lookaheads and anchors see beyond)."""
    best = pos = 0
    for item in seq:
        op, av = item
        if op is _sre_c.ASSERT or op is _sre_c.ASSERT_NOT:
            direction, sub = av
            e = _reach(sub) if direction == 1 else max(0, _reach(sub) - sub.getwidth()[1])
        elif op is _sre_c.AT:
            e = _AT_REACH.get(av, 0)
        elif op is _sre_c.SUBPATTERN:
            e = _reach(av[-1])
        elif op is _sre_c.BRANCH:
            e = max(_reach(b) for b in av[1])
        elif op in _REPEATS:
            body = av[2]
            extra = _reach(body) - body.getwidth()[1]
            e = _width(seq.state, [item])[1] + max(0, extra)
        elif op is getattr(_sre_c, "ATOMIC_GROUP", None):
            e = _reach(av)
        elif op is _sre_c.GROUPREF_EXISTS:
            e = max(_reach(av[1]), _reach(av[2]) if av[2] is not None else 0)
        else:
            e = _width(seq.state, [item])[1]
        best = max(best, pos + e)
        pos += _width(seq.state, [item])[1]
    return max(best, pos)


def _guard_walk(seq, rem: int, add: int, dele: int, out: list) -> None:
    """Collect (item, overshoot, add, del flags) for every assertion or anchor of `seq` that may
    inspect text past the end of the whole match; rem = min. width matched after seq."""
    items = list(seq)
    rems = [0] * len(items)
    suffix = rem
    for k in range(len(items) - 1, -1, -1):
        rems[k] = suffix
        suffix += _width(seq.state, [items[k]])[0]
    for k, item in enumerate(items):
        op, av = item
        r = rems[k]
        if op in (_sre_c.ASSERT, _sre_c.ASSERT_NOT, _sre_c.AT):
            over = _reach(_sre_parse.SubPattern(seq.state, [item])) - r
            if over > 0:
                out.append((item, over, add, dele))
        elif op is _sre_c.SUBPATTERN:
            _, a, d, sub = av
            _guard_walk(sub, r, (add & ~d) | a, (dele & ~a) | d, out)
        elif op is _sre_c.BRANCH:
            for b in av[1]:
                _guard_walk(b, r, add, dele, out)
        elif op in _REPEATS:
            _guard_walk(av[2], r, add, dele, out)
        elif op is getattr(_sre_c, "ATOMIC_GROUP", None):
            _guard_walk(av, r, add, dele, out)
        elif op is _sre_c.GROUPREF_EXISTS:
            _guard_walk(av[1], r, add, dele, out)
            if av[2] is not None:
                _guard_walk(av[2], r, add, dele, out)


def _single_char(sub) -> bool:
    """`sub` tests exactly one character (no anchors, lookarounds or backreferences)."""
    if sub.getwidth() != (1, 1):
        return False
    for op, av in sub:
        if op in (_sre_c.LITERAL, _sre_c.NOT_LITERAL, _sre_c.IN, _sre_c.ANY):
            continue
        if op is _sre_c.SUBPATTERN and _single_char(av[-1]):
            continue
        if op is _sre_c.BRANCH and all(_single_char(b) for b in av[1]):
            continue
        return False
    return True


def trailing_guards(pattern: str, flags: int = 0, name: str = "?") -> list:
    """The trailing guards of a terminal's pattern: one predicate on the next character per
    lookahead that can see past the end of the match (empty list: the match is self-contained).

    Supported: lookaheads ``(?=X)`` / ``(?!X)`` whose content X tests exactly one character and
    which may stand at the end of the match (like ``[?](?![a-z])``); each one then inspects the
    next character of the document or its end. Anything else that can see past the end (a
    lookahead reaching two characters, ``\\b``, ``$``, ``\\Z`` at the end) raises
    NotImplementedError naming the terminal."""
    try:
        tree = _sre_parse.parse(pattern, flags)
    except Exception:
        if re.search(r"\(\?[=!]|\\[bBZ]|\$", pattern):
            raise NotImplementedError(f"terminal {name} ({pattern!r}): cannot parse its lookarounds")
        return []
    found: list = []
    _guard_walk(tree, 0, 0, 0, found)
    preds = []
    for (op, av), over, add, dele in found:
        if over > 1:
            raise NotImplementedError(f"terminal {name} ({pattern!r}): a lookaround or anchor may inspect "
                                      f"{over} characters past the end of the match (only one is modelled)")
        if op is _sre_c.AT or av[0] != 1 or not _single_char(av[1]):
            raise NotImplementedError(f"terminal {name} ({pattern!r}): only one-character lookaheads may "
                                      "look past the end of the match (not anchors, \\b or longer lookarounds)")
        sub = av[1]
        wrapped = _sre_parse.SubPattern(sub.state, [(_sre_c.SUBPATTERN, (None, add, dele, sub))])
        test = _sre_compile.compile(wrapped, flags)
        positive = op is _sre_c.ASSERT
        preds.append(lambda c, test=test, positive=positive: (test.match(c) is not None) == positive)
    return preds


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


__all__ = ["LarkOracle", "random_sentences", "find_completion", "mutations", "trailing_guards"]
