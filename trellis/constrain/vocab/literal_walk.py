"""Walks of a literal (a DFA state with one path left) by prefix lookup instead of byte steps.

From a DFA state whose reachable sub-automaton is a chain (every state has at most one outgoing
byte: the rest of a keyword, of a JSON key such as ``"name"``, of punctuation), the walk
``rest_walk.walk`` computes is decided by prefixes alone: a rest stays inside iff it is a prefix of
the chain's text ``s``; it crosses after ``j`` bytes iff the state after ``s[:j]`` is final, the
rest starts with ``s[:j]``, is longer than ``j`` and its byte ``j`` may follow the terminal.

Over the whole vocabulary the tokens with a given prefix are one run of the lexicographically
sorted token list, found by two binary searches (``SortedVocab.prefix_bounds``: ``memcmp`` over
the sorted tokens in C, each prefix searched within the previous one's run; ``bisect`` on Python
``bytes`` without the kernel), so a literal costs O(len(s) log V) comparisons instead of a numpy
walk of every token that starts with ``s[0]`` (thousands for ``"``). On maskbench schemas the
numpy walks of literals were 0.55 s of 3.1 s of fresh masks over 39 schemas (one per key,
enum value and punctuation run; profile in the commit message). Small rest sets (the leftovers
of tokens split at a terminal's end) are checked with ``bytes.startswith`` in Python.

A state whose sub-automaton is a finite language of a few paths (a JSON Schema string ``enum``
after its opening quote: ``"(?:low|average|high)"``) is walked the same way, path by path
(``words_at``, ``words_vocabulary_ids``): a token stays inside iff it is a prefix of some path.

Both return exactly what ``rest_walk.walk`` returns (the same ``inside`` flags and the same
crossings; the leftover ``RestSet`` may list them in another order), which
``tests/constrain/test_literal_walk.py`` checks against it.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

from trellis.constrain.automata.byte_dfa import MAX_LITERAL, ByteDFA, Literal, chain_tables
from trellis.constrain.vocab.rest_walk import RestSet, Walk, member, with_crossings
from trellis.constrain.vocab.walks import TokenMatrix, walkc

# A rest set whose bucket for the literal's first byte holds more rests than this is walked by
# numpy (``rest_walk.walk``): a Python check costs ~1-2 us a rest, a numpy walk ~0.2-0.4 ms.
MAX_PY_RESTS = 192


@dataclass(eq=False)
class SortedVocab:
    """The valid tokens in lexicographic order (``keys``), each one's rest index in
    ``RestSet.vocabulary(tm)`` (``rest``), and the keys as one byte string (``blob``, key ``i`` at
    ``offs[i]:offs[i + 1]``) for the C searches (``prefix_bounds``)."""

    keys: list[bytes]
    rest: np.ndarray  # [N] int64
    blob: bytes
    offs: np.ndarray  # [N + 1] int64

    @classmethod
    def of(cls, tm: TokenMatrix) -> "SortedVocab":
        hit = tm.__dict__.get("_sorted_vocab")
        if hit is None:
            order = tm.order.tolist()
            keys = [tm.tokens[t] for t in order]
            rest = np.array(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.int64)
            keys = [keys[r] for r in rest.tolist()]
            offs = np.zeros(len(keys) + 1, dtype=np.int64)
            np.cumsum(np.fromiter(map(len, keys), dtype=np.int64, count=len(keys)), out=offs[1:])
            hit = tm.__dict__["_sorted_vocab"] = cls(keys, rest, b"".join(keys), offs)
        return hit

    def prefix_bounds(self, text: bytes) -> list[list[int]]:
        """For ``k = 1, 2, ...`` while some key starts with ``p = text[:k]``: ``(lo, eq, hi)``, the
        keys ``[lo, eq)`` equal to ``p`` and ``[lo, hi)`` starting with it (fewer triples than
        ``len(text)``: no key starts with the next prefix). In C where ``_walkc`` is built: the
        two ``bisect_left`` per prefix on Python bytes were ~5% of a fresh document's mask time
        (a sampling profile over bench_fresh's middle 40 schemas)."""
        if walkc is not None:
            return np.frombuffer(walkc.prefix_bounds(self.blob, self.offs, text), dtype=np.int64).reshape(-1, 3).tolist()
        return self.prefix_bounds_py(text)

    def prefix_bounds_py(self, text: bytes) -> list[list[int]]:
        """``prefix_bounds`` by ``bisect`` (the form without ``_walkc``, and its reference)."""
        keys, n = self.keys, len(self.keys)
        out = []
        lo = 0
        for k in range(1, len(text) + 1):
            p = text[:k]
            lo = bisect_left(keys, p, lo)
            if lo == n or not keys[lo].startswith(p):
                break
            eq = lo
            while eq < n and keys[eq] == p:
                eq += 1
            succ = prefix_successor(p)
            out.append([lo, eq, n if succ is None else bisect_left(keys, succ, eq)])
        return out


def prefix_successor(p: bytes) -> bytes | None:
    """The least byte string greater than every string that starts with ``p`` (None: none)."""
    p = p.rstrip(b"\xff")
    return p[:-1] + bytes([p[-1] + 1]) if p else None


def literal_vocabulary_ids(lit: Literal, rs: RestSet, tm: TokenMatrix,
                           follow: np.ndarray | None = None) -> tuple[np.ndarray, Walk]:
    """``rest_walk.walk`` of the literal's first state over ``rs = RestSet.vocabulary(tm)``, as
    (the sorted indices in ``rs`` of the tokens that stay inside, the walk with an empty
    ``inside``): a literal keeps a handful of tokens, and a vocabulary-wide bool array, written and
    then gathered into token ids, was ~2/3 of a key's walk (~40 us of which ~30 on Gemma's 262k
    tokens, line_profiler)."""
    return words_vocabulary_ids((lit,), rs, tm, follow)


def words_vocabulary_ids(lits: tuple[Literal, ...], rs: RestSet, tm: TokenMatrix,
                         follow: np.ndarray | None = None) -> tuple[np.ndarray, Walk]:
    """``literal_vocabulary_ids`` of a DFA state whose sub-automaton is a finite language, given
    as the literals of its paths (``words_at``): a token stays inside iff it is a prefix of some
    path, and crosses after ``j`` bytes iff ``j`` ends a path's word that it starts with (and
    is not all of it). A token inside stays only inside (``drop_inside``)."""
    sv = SortedVocab.of(tm)
    runs: list[np.ndarray] = []
    ci: list[np.ndarray] = []
    cj: list[np.ndarray] = []
    # Paths share prefixes (``[ \t]{0,5}`` is 32 paths of 5 bytes over 62 prefixes): each prefix
    # is looked up once, so the tokens it keeps or splits are listed once (they were listed once
    # per path and deduplicated by np.unique: 15 of a 16 ms mask after a run of tabs in
    # llama.cpp's json.gbnf, bench_fresh).
    alive: dict[bytes, bool] | None = {} if len(lits) > 1 else None  # (one literal: no prefix repeats)
    for lit in lits:
        s, ends = lit.text, set(lit.ends)
        bounds = sv.prefix_bounds(s)
        for k in range(1, len(s) + 1):
            if alive is not None:
                p = s[:k]
                seen = alive.get(p)
                if seen is not None:
                    if not seen:
                        break
                    continue
                alive[p] = k <= len(bounds)
            if k > len(bounds):
                break  # no token starts with s[:k], so none with a longer prefix of s either
            lo, eq, hi = bounds[k - 1]
            if eq > lo:
                runs.append(sv.rest[lo:eq])  # tokens equal to s[:k]: a prefix of s
            if k in ends and hi > eq:  # tokens longer than s[:k] that start with it: the terminal can end after k
                r = sv.rest[eq:hi]
                if follow is not None:
                    r = r[follow[tm.mat_t[k, rs.base[r]]]]
                if len(r):
                    ci.append(r)
                    cj.append(np.full(len(r), k, dtype=np.int64))
    none = np.zeros(0, dtype=np.int64)
    ids = np.sort(np.concatenate(runs)) if runs else none  # (tokens equal to distinct prefixes: distinct)
    i, j = (np.concatenate(ci), np.concatenate(cj)) if ci else (none, none)
    if len(lits) > 1 and len(i):  # the pairs are distinct (one prefix of each length); ordered by (token, split)
        code = np.sort(i * (tm.max_len + 1) + j)
        i, j = code // (tm.max_len + 1), code % (tm.max_len + 1)
    if len(ids) and len(i):  # drop_inside on indices: a token that stays inside is allowed anyway
        keep = ~member(i, ids)  # (ids: sorted)
        i, j = i[keep], j[keep]
    return ids, with_crossings(np.zeros(0, dtype=bool), i, j, rs, tm)


# A finite sub-automaton (a string enum: '"(?:low|average|high)"' after its quote) with at most
# this many paths is walked path by path (``words_at``): ~8 us a path against ~0.5 ms for its
# canonical shape, digest and a numpy walk of the tokens starting with the values' first bytes.
MAX_WORDS = 32


def words_at(dfa: ByteDFA, q: int) -> tuple[Literal, ...] | None:
    """The paths from state ``q`` to the dead ends of an acyclic sub-automaton, each a
    ``Literal`` (its text and the lengths after which it is final), sorted by text; None when a
    state reachable from ``q`` loops, or past ``MAX_WORDS`` paths or ``MAX_LITERAL`` bytes
    (memoised per DFA and state, with ``literal_at``'s per-DFA tables)."""
    trans, deg, byte, memo = chain_tables(dfa)
    key = ("words", q)
    if key in memo:
        return memo[key]
    final = dfa.final
    out: list[Literal] = []
    stack = [(q, b"", (), frozenset([q]))]  # (state, text, ends so far, states on the path)
    res: tuple[Literal, ...] | None = None
    steps = 0
    while stack:
        s, text, ends, on_path = stack.pop()
        d = int(deg[s])
        if d == 0:
            out.append(Literal(text, ends))
            continue
        steps += 1
        if steps > MAX_WORDS * MAX_LITERAL // 8 or len(text) >= MAX_LITERAL or len(out) + len(stack) + d > MAX_WORDS:
            break
        nxt = [int(byte[s])] if d == 1 else np.flatnonzero(trans[s] >= 0).tolist()
        for b in nxt:
            t = int(trans[s, b])
            if t in on_path:
                break  # a loop: an infinite language
            stack.append((t, text + bytes((b,)), ends + ((len(text) + 1,) if final[t] else ()), on_path | {t}))
        else:
            continue
        break
    else:
        res = tuple(sorted(out, key=lambda x: x.text)) if out and all(x.text for x in out) else None
    memo[key] = res
    return res


def literal_rests_fit(lit: Literal, rs: RestSet) -> bool:
    """Whether ``walk_literal_rests`` walks ``rs`` (at most ``MAX_PY_RESTS`` rests start with the
    literal's first byte) rather than declining."""
    b = lit.text[0]
    return int(rs.lo[b + 1]) - int(rs.lo[b]) <= MAX_PY_RESTS


def walk_literal_rests(lit: Literal, rs: RestSet, tm: TokenMatrix, follow: np.ndarray | None = None) -> Walk | None:
    """``rest_walk.walk`` of the literal's first state over a small rest set, or None when the
    rests starting with the literal's first byte are over ``MAX_PY_RESTS`` (walk those by numpy)."""
    if not literal_rests_fit(lit, rs):
        return None
    s = lit.text
    lo, hi = int(rs.lo[s[0]]), int(rs.lo[s[0] + 1])
    inside = np.zeros(len(rs), dtype=bool)
    toks = tm.tokens
    ci: list[int] = []
    cj: list[int] = []
    ends = lit.ends
    for i, t, ln in zip(range(lo, hi), rs.tid[lo:hi].tolist(), rs.length[lo:hi].tolist()):
        tok = toks[t]
        r = tok[len(tok) - ln:]
        if s.startswith(r):
            inside[i] = True
            continue
        for j in ends:  # ascending: once r leaves s, no longer prefix of s matches either
            if j >= ln or not r.startswith(s[:j]):
                break
            if follow is None or follow[r[j]]:
                ci.append(i)
                cj.append(j)
    # (a rest that stays inside was never split above)
    return with_crossings(inside, np.array(ci, dtype=np.int64), np.array(cj, dtype=np.int64), rs, tm)

