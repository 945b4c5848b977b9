"""Regexes with lookaround -> byte DFA, exactly, when every lookaround stays inside the match.

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

Where a lookaround can see outside the match, the text around the terminal decides, and the
regex is refused by name, with the place it happens: a thread that reaches the end while still
owing a lookahead ("lookahead that can see past the end of the match", e.g. ``/a(?!b)/``), or a
lookbehind evaluated before it has as many characters behind it as it is wide ("lookbehind that
can see before the start of the match", e.g. ``/(?<!\\\\)"/``). Both are refused only when some
text actually reaches them.
"""

from __future__ import annotations

import numpy as np

from trellis.constrain.regex_compile import Guard, RegexTooLarge, RegexUnsupported, guarded_nfa, items_nfa

MAX_CONFIGS = 20_000  # configurations past which the regex is refused (a few hundred in practice)


def _dfa(edges: list, finals: set[int]) -> tuple[np.ndarray, np.ndarray]:
    """Trimmed DFA (a dead end is -1: no continuation can match); X matching nothing gives one
    non-final state with no moves."""
    from trellis.constrain.errors import GrammarError
    from trellis.constrain.regex import _subsets, trim

    trans, final = _subsets(edges, finals, 0)
    try:
        d = trim(trans, final, name="lookaround", pattern="")
    except GrammarError:
        return np.full((1, 256), -1, dtype=np.int32), np.zeros(1, dtype=bool)
    return d.trans, d.final


def lookaround_dfa(pattern: str) -> tuple[np.ndarray, np.ndarray]:
    """(trans [S, 256], final [S]) of ``pattern``'s full-match language (not minimal).

    Raises ``RegexUnsupported`` naming the lookaround that can see outside the match."""
    nfa, start, end = guarded_nfa(pattern)
    guards: list[Guard] = nfa.guards or []
    ahead: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    behind: list[int] = []  # guard indices of the lookbehinds, in tracker order
    tracker: list[tuple[np.ndarray, np.ndarray]] = []
    for gi, g in enumerate(guards):
        if g.ahead:
            ahead[gi] = _dfa(*items_nfa(list(g.items), g.flags))
        else:
            behind.append(gi)
            tracker.append(_dfa(*items_nfa(list(g.items), g.flags, any_prefix=True)))
    slot = {gi: k for k, gi in enumerate(behind)}
    cap = max((guards[gi].width for gi in behind), default=0)

    def closure(threads: frozenset, looks: tuple, nchars: int) -> frozenset:
        """Threads after every empty and guarded move allowed here."""
        seen = set(threads)
        stack = list(threads)
        while stack:
            q, owed = stack.pop()
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
            for th in nxt:
                if th not in seen:
                    seen.add(th)
                    stack.append(th)
        return frozenset(seen)

    def accepting(threads: frozenset) -> bool:
        ok = False
        for q, owed in threads:
            if q == end:
                if owed:
                    gi = next(iter(owed))[0]
                    raise RegexUnsupported(f"{guards[gi].what} that can see past the end of the match")
                ok = True
        return ok

    def step(threads: frozenset, b: int) -> frozenset:
        out = set()
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
                        out.add((t, frozenset(new_owed)))
        return frozenset(out)

    empty: frozenset = frozenset()
    looks0 = tuple(0 for _ in behind)
    c0 = (closure(frozenset([(start, empty)]), looks0, 0), looks0, 0)
    ids = {c0: 0}
    order = [c0]
    rows: list[np.ndarray] = []
    finals: list[bool] = []
    i = 0
    while i < len(order):
        threads, looks, nchars = order[i]
        i += 1
        finals.append(accepting(threads))
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
    return np.stack(rows), np.array(finals, dtype=bool)
