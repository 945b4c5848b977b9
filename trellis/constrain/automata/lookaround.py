r"""Regexes with lookaround -> byte DFA, exactly, when every lookaround stays inside the match.

A terminal's lookaround is regular as long as what it inspects lies inside the terminal's own
text: ``/\\/\\*(\\*(?!\\/)|[^*])*\\*\\//`` (a block comment; after a ``*`` the next character, still
inside the comment, is not ``/``) or ``"...(?<!\\\\)"``. Then the language is the same whether the
regex runs on the token alone or in the document (as Lark's lexer runs it), and it is compiled
here by a subset construction over configurations of the guarded Thompson NFA
(``regex_compile.guarded_nfa``), in the manner of Boolean automata for lookahead (Morihata 2012,
"Translation of regular expression with lookahead into finite state automaton"):

* a *thread* is an NFA state and the lookaheads it still owes: passing ``(?=X)`` / ``(?!X)``
  starts a checker, X's DFA from its start; each byte steps it; a positive checker is paid when X
  accepts and kills its thread when X's DFA dies, a negative one the other way round;
* lookbehinds depend on the text only, so a configuration carries, per lookbehind ``(?<=X)``, the
  state of the DFA of ``(?s:.)*X`` over the bytes so far, and the number of characters so far
  (capped at the widest lookbehind); the guarded move is allowed when that DFA accepts (or, for
  ``(?<!X)``, does not);
* a configuration accepts when a thread stands on the final state owing nothing.

A lookahead that reaches past the end of the match sees the text that follows the terminal in the
document (as Lark's ``re.match(text, pos)`` does): a thread that reaches the end still owing
checkers of ONE character (``/[?](?![a-z])/``, ``/\w+(?=\()/``) makes its state final under a
*follow guard* (``FollowGuard``: the characters that may come next, and whether the end of the
document may), which the grammar engine applies to whatever starts after the terminal
(``earley.py``). End anchors are negative lookaheads (``regex_compile``): ``$`` under ``m`` and
``\Z`` owe one character; Python's ``$`` (the end, or a newline that ends the text) owes two, and is
the one such case modelled: its guard lets a newline follow as the document's last character
(``FollowGuard.last``). Any other lookahead owing more than one character past the end ("lookahead that can see
more than one character past the end of the match"), or a lookbehind evaluated before it has as
many characters behind it as it is wide ("lookbehind that can see before the start of the
match", e.g. ``/(?<!\\)"/``), is refused by name, only when some text actually reaches it.

``ordered=True``: the *first-match* language ``{w : re.match(R, w) matches all of w}`` instead of
the set language, for regexes with lazy quantifiers (Lark's REGEXP,
``/\/(?!\/)(\\\/|\\\\|[^\/])*?\/[imslux]*/``). Lark's ``dynamic_complete`` matcher produces exactly
these tokens: it takes the match ``re.match`` returns and re-matches its truncations, and for a
regex without lookarounds past the match ``re.match(R, x) = w`` implies ``re.match(R, w) = w``.
Threads are then kept in backtracking priority order (the Thompson NFA lists its empty moves in
that order: ``regex_compile._NFA.build``), and a thread that matches cuts every thread after it,
as in the leftmost-first simulation of Pike's VM (Cox, "Regular Expression Matching: the Virtual
Machine Approach", 2009; RE2): ``w`` is in the language iff a thread matches at its end. A
configuration is the ordered tuple of threads, so the construction is still a finite subset
construction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trellis.constrain.automata.charsets import MAXC, Ranges, cs_diff, cs_inter, cs_union
from trellis.constrain.automata.regex_compile import (Guard, RegexTooLarge, RegexUnsupported, guarded_nfa, items_nfa,
                                             one_char_set)

MAX_CONFIGS = 20_000  # configurations past which the regex is refused (a few hundred in practice)
_ANY: Ranges = ((0, 0xD7FF), (0xE000, MAXC))
_NEWLINE: Ranges = ((0x0A, 0x0A),)


@dataclass(frozen=True)
class FollowGuard:
    """Where a terminal may end only if what follows passes its trailing lookahead: ``allowed``,
    the characters the document may continue with right after it; ``at_end``, whether the
    document may end there (a negative lookahead passes at the end of the text, a positive one
    fails); ``last``: those of ``allowed`` that must be the document's last character (Python's
    ``$``: the end of the text, or before a newline that ends it)."""

    allowed: Ranges
    at_end: bool
    last: Ranges = ()

    def __or__(self, other: "FollowGuard") -> "FollowGuard":
        # a character is "last" only where every guard that allows it says so
        last = cs_union(cs_union(cs_inter(self.last, other.last), cs_diff(self.last, other.allowed)),
                        cs_diff(other.last, self.allowed))
        return FollowGuard(cs_union(self.allowed, other.allowed), self.at_end or other.at_end, last)


END_OF_TEXT = FollowGuard((), True)  # nothing may follow: the document ends here


def _dfa(edges: list, finals: set[int]) -> tuple[np.ndarray, np.ndarray]:
    """Trimmed DFA (a dead end is -1: no continuation can match); X matching nothing gives one
    non-final state with no moves."""
    from trellis.constrain.errors import GrammarError
    from trellis.constrain.automata.byte_dfa import trim
    from trellis.constrain.automata.dfa_minimise import subset_construction

    trans, final = subset_construction(edges, finals, 0)
    try:
        d = trim(trans, final, name="lookaround", pattern="")
    except GrammarError:
        return np.full((1, 256), -1, dtype=np.int32), np.zeros(1, dtype=bool)
    return d.trans, d.final


def automaton(pattern: str, *, ordered: bool = False) -> tuple[np.ndarray, np.ndarray, list[FollowGuard | None]]:
    """(trans [S, 256], final [S], guards [S]) of ``pattern``'s full-match language (not minimal):
    ``guards[s]`` is the ``FollowGuard`` under which a non-final state ``s`` ends a match (None:
    it does not). ``ordered``: the first-match language (module docstring).

    Raises ``RegexUnsupported`` naming the lookaround that can see outside the match."""
    nfa, start, end = guarded_nfa(pattern)
    if ordered and nfa.empty_loop:
        raise RegexUnsupported("lazy quantifier beside a repeat whose body can match the empty string")
    guards: list[Guard] = nfa.guards or []
    ahead: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    one_char: dict[int, Ranges | None] = {}
    behind: list[int] = []  # guard indices of the lookbehinds, in tracker order
    tracker: list[tuple[np.ndarray, np.ndarray]] = []
    for gi, g in enumerate(guards):
        if g.ahead:
            ahead[gi] = _dfa(*items_nfa(list(g.items), g.flags))
            one_char[gi] = one_char_set(list(g.items), g.flags)
        else:
            behind.append(gi)
            tracker.append(_dfa(*items_nfa(list(g.items), g.flags, any_prefix=True)))
    slot = {gi: k for k, gi in enumerate(behind)}
    cap = max((guards[gi].width for gi in behind), default=0)

    def closure(threads: list, looks: tuple, nchars: int) -> tuple | frozenset:
        """Threads after every empty and guarded move allowed here; ``ordered``: a tuple in
        priority order (depth first along the moves in their listed order, first visit kept)
        of the threads that read a byte or stand on the end, cut after the first one that matches
        owing nothing."""
        seen: set = set()
        out: list = []
        stack = list(reversed(threads))
        while stack:
            th = stack.pop()
            if th in seen:
                continue
            seen.add(th)
            q, owed = th
            if not ordered or q == end or nfa.edges[q]:
                out.append(th)
                if ordered and q == end and not owed:
                    break  # a match: every lower-priority thread is cut (leftmost-first)
            nxt = [(t, owed) for t in nfa.eps[q]]
            for gi, t in nfa.geps[q]:
                g = guards[gi]
                if g.ahead:
                    if ahead[gi][1][0]:  # X matches the empty text: settled here
                        if not g.negative:
                            nxt.append((t, owed))
                    else:
                        nxt.append((t, owed | {(gi, 0)}))
                else:
                    if nchars < g.width:
                        raise RegexUnsupported(f"{g.what} that can see before the start of the match")
                    s = looks[slot[gi]]
                    matched = s >= 0 and bool(tracker[slot[gi]][1][s])
                    if matched != g.negative:
                        nxt.append((t, owed))
            stack.extend(reversed(nxt))  # the first listed move is explored first
        return tuple(out) if ordered else frozenset(out)

    def accepting(threads: tuple | frozenset) -> tuple[bool, FollowGuard | None]:
        """(final, guard): final when a thread stands on the end owing nothing; otherwise the
        union, over the threads on the end, of what their one-character lookaheads let follow."""
        on_end = [owed for q, owed in threads if q == end]
        if ordered and any(on_end):
            gi = next(iter(next(o for o in on_end if o)))[0]
            raise RegexUnsupported(f"{guards[gi].what} past the end of a match with a lazy quantifier")
        if any(not owed for owed in on_end):
            return True, None
        guard: FollowGuard | None = None
        for owed in on_end:
            allowed, at_end, last = _ANY, True, ()  # every check the thread owes must pass
            for gi, c in owed:
                g = guards[gi]
                if g.anchor == "$":  # the end, or a newline that ends the text
                    # owed fresh: a newline may follow, as the document's last character; owed
                    # after a newline the match itself read: nothing may follow
                    allowed = cs_inter(allowed, _NEWLINE) if c == 0 else ()
                    last = _NEWLINE
                    continue
                chars = one_char[gi]
                if c != 0 or chars is None:
                    raise RegexUnsupported(f"{g.what} that can see more than one character past the end of the match")
                allowed = cs_diff(allowed, chars) if g.negative else cs_inter(allowed, chars)
                at_end = at_end and g.negative
            one = FollowGuard(allowed, at_end, cs_inter(last, allowed))
            guard = one if guard is None else guard | one
        return False, guard

    def step(threads: tuple | frozenset, b: int) -> list:
        out = []
        for q, owed in threads:
            for lo, hi, t in nfa.edges[q]:
                if lo <= b <= hi:
                    new_owed = set()
                    alive = True
                    for gi, c in owed:
                        trans, final = ahead[gi]
                        c2 = int(trans[c, b])
                        neg = guards[gi].negative
                        if c2 < 0:  # X can no longer match: a positive lookahead fails
                            alive = neg
                        elif final[c2]:  # X matched: a negative lookahead fails
                            alive = not neg
                        else:
                            new_owed.add((gi, c2))
                            continue
                        if not alive:
                            break
                    if alive:
                        out.append((t, frozenset(new_owed)))
        return out

    empty: frozenset = frozenset()
    looks0 = tuple(0 for _ in behind)
    c0 = (closure([(start, empty)], looks0, 0), looks0, 0)
    ids = {c0: 0}
    order = [c0]
    rows: list[np.ndarray] = []
    finals: list[bool] = []
    follow: list[FollowGuard | None] = []
    i = 0
    while i < len(order):
        threads, looks, nchars = order[i]
        i += 1
        fin, guard = accepting(threads)
        finals.append(fin)
        follow.append(guard)
        row = np.full(256, -1, dtype=np.int32)
        # Bytes every edge, checker and tracker treats alike form runs: one step per run (a
        # Unicode class is hundreds of edges, but a configuration sees a few dozen runs).
        cuts = {0, 0x80, 0xC0, 256}
        for q, owed in threads:
            for lo, hi, _ in nfa.edges[q]:
                cuts.update((lo, hi + 1))
            for gi, c in owed:
                cuts.update((np.flatnonzero(np.diff(ahead[gi][0][c])) + 1).tolist())
        for k, st in enumerate(looks):
            if st >= 0:
                cuts.update((np.flatnonzero(np.diff(tracker[k][0][st])) + 1).tolist())
        bounds = sorted(cuts)
        for b, b_end in zip(bounds, bounds[1:]):
            moved = step(threads, b)
            if not moved:
                continue
            nlooks = tuple(int(tracker[k][0][s, b]) if s >= 0 else -1 for k, s in enumerate(looks))
            n2 = min(cap, nchars + (not 0x80 <= b <= 0xBF))  # a UTF-8 lead byte starts a character
            cfg = (closure(moved, nlooks, n2), nlooks, n2)
            if not cfg[0]:
                continue
            j = ids.get(cfg)
            if j is None:
                if len(order) >= MAX_CONFIGS:
                    raise RegexTooLarge(f"its lookaround automaton passes {MAX_CONFIGS:,} states")
                j = ids[cfg] = len(order)
                order.append(cfg)
            row[b:b_end] = j
        rows.append(row)
    return np.stack(rows), np.array(finals, dtype=bool), follow
