"""The DFA of a bounded repeat between literals, ``p U{m,n} s``, built by counting units instead
of by a subset construction over n copies of U's NFA.

Why: a length-bounded JSON string is such a regex, ``(?:[^"\\\\\\x00-\\x1f]|\\\\(...)){0,128}"``,
and ``regex_nfa`` + ``epsilon_free`` + ``determinised`` expanded it into ~2,000 NFA states each
time a schema brought a new bound: ~6 ms per terminal on a 2-core VM (parse 0.02, NFA 1.7,
empty moves 0.8, subsets 2.0, minimal 0.8 ms), the largest single item of the fresh schemas'
terminal builds, and in a new process a schema with several such strings waited on them before its
first mask (sp_217: 36.5 of 41.6 ms, benchmarks/README). Counted: 1.1-1.5 ms with the minimisation;
every terminal automaton of bench_fresh's 100 schemas, compiled in turn in one process, 75 -> 44 ms
(wall-clock timers around ``regex._automaton`` and ``minimal``, forty-eighth session).

The construction: D is the DFA of the unit U (its subset construction: 16 states for the JSON
character). When U is prefix-free (no final state of D has an outgoing edge) and does not match the
empty string, every string of U{m,n} splits into units in exactly one way, so the DFA only needs to know
how many units are complete and where the current one is: the state (i, q), i complete units and
D in state q, with (i, final) merged into (i + 1, start). The prefix literal leads to (0, start),
and the suffix literal leaves from every (i, start) with m <= i <= n; that stays deterministic
when the suffix's first byte cannot begin a unit (a JSON string's closing quote cannot). Anything
else (a lookaround, a unit that is not prefix-free, a clash at the suffix, sizes near the limits
the general path enforces) returns None and the general path decides, so the two paths accept and
refuse the same regexes (``tests/constrain/test_counted_repeat.py`` compares their minimal DFAs).
"""

from __future__ import annotations

import numpy as np

from trellis.constrain.automata.dfa_minimise import determinised
from trellis.constrain.automata.regex_compile import (MAX_NFA_STATES, C, RegexTooLarge, RegexUnsupported,
                                                      items_nfa_sized, parse_items)

# Below this many NFA states in all (hi times the unit's, without empty moves) the general path
# takes ~0.1 ms, less than this one's fixed costs (/tmp timings: x{5} 0.02 vs 0.13 ms; a 128-unit
# JSON string 4.9-6.0 vs 1.1-1.5 ms, forty-eighth session).
MIN_NFA_STATES = 256
# Above this many DFA states the general path's subset construction nears its own limits
# (MAX_DFA_STATES, the compile work bound), whose refusal must stand: such repeats take that path.
# (Its NFA bound, MAX_NFA_STATES, is checked exactly: ``_unit_dfa``.)
MAX_STATES = 20_000


def counted_repeat(pattern: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(trans [S, 256], final [S]) of ``pattern`` (not minimal) when it is literal text, one
    greedy or lazy bounded repeat of a prefix-free unit, literal text; else None."""
    try:
        items, flags = parse_items(pattern)
    except Exception:  # noqa: BLE001 - whatever re refuses, the general path reports
        return None
    if flags & C.SRE_FLAG_IGNORECASE:
        return None
    reps = [k for k, (op, _) in enumerate(items) if op in (C.MAX_REPEAT, C.MIN_REPEAT)]
    if len(reps) != 1:
        return None
    k = reps[0]
    pre, post = _literal_bytes(items[:k]), _literal_bytes(items[k + 1:])
    lo, hi, body = items[k][1]
    if pre is None or post is None or hi == C.MAXREPEAT or hi < 2:
        return None
    unit = _unit_dfa(list(body), flags, hi, len(pre) + len(post))
    if unit is None:
        return None
    trans_u, final_u = unit
    inner = np.flatnonzero(~final_u)  # the unit's states other than its ends (start = 0 among them)
    width = len(inner)
    if hi * width + len(pre) + len(post) + 2 > MAX_STATES:
        return None
    if post and (trans_u[0, post[0]] >= 0):
        return None  # the suffix's first byte could also begin a unit: not deterministic here
    return _build(trans_u, final_u, inner, lo, hi, pre, post)


def _literal_bytes(items: list) -> bytes | None:
    """The UTF-8 bytes of a run of literal characters, or None."""
    out = []
    for op, av in items:
        if op is not C.LITERAL or 0xD800 <= av <= 0xDFFF:
            return None
        out.append(chr(av))
    return "".join(out).encode("utf-8", "surrogatepass")


def _unit_dfa(body: list, flags: int, hi: int, literals: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(trans, final) of the unit (start 0) when it is prefix-free, does not match the empty
    string, ``hi`` copies of its NFA would be worth skipping (``MIN_NFA_STATES``) and the general
    path's Thompson NFA of the repeat between ``literals`` bytes stays within ``MAX_NFA_STATES``."""
    try:
        edges, finals, thompson = items_nfa_sized(body, flags)
    except (RegexUnsupported, RegexTooLarge):  # a lookaround, an anchor...: the general path says so
        return None
    if len(edges) > 4_000 or hi * len(edges) < MIN_NFA_STATES:
        return None
    if hi * (thompson + 1) + literals + 4 > MAX_NFA_STATES:
        return None  # the general path refuses it (RegexTooLarge, naming the repeat): so must this one
    trans, final = determinised(edges, finals, 0)
    if final[0] or (trans[final] >= 0).any():
        return None  # matches the empty string, or a unit may go on past an end
    return np.asarray(trans), np.asarray(final)


def _build(trans_u: np.ndarray, final_u: np.ndarray, inner: np.ndarray, lo: int, hi: int, pre: bytes,
           post: bytes) -> tuple[np.ndarray, np.ndarray]:
    """States: the prefix's (before the count), then block i = 0..hi-1 of the unit's inner states
    (i units complete), then the boundary after hi units, then the suffix's; the start is 0."""
    width = len(inner)
    local = np.full(len(final_u), -1, dtype=np.int64)
    local[inner] = np.arange(width)
    p0 = len(pre)
    top = p0 + hi * width  # the boundary after hi units: no unit begins there
    n = top + 1 + len(post)
    trans = np.full((n, 256), -1, dtype=np.int32)
    final = np.zeros(n, dtype=bool)
    for j, b in enumerate(pre):
        trans[j, b] = j + 1
    # one block's rows as offsets from the block's first state: the target's inner index, or
    # ``width`` when the unit ends there (the next block's boundary state, (i + 1, start)); written
    # in place, int32 (int64 temporaries over all blocks were 3.4 MB of page faults, ~3 ms)
    tgt = trans_u[inner]  # [width, 256]
    dead = tgt < 0
    ends = ~dead & final_u[np.where(dead, 0, tgt)]
    block = np.where(ends, width, local[np.where(dead, 0, tgt)]).astype(np.int32)
    blocks = trans[p0:top].reshape(hi, width, 256)
    np.add(block[None], (p0 + np.arange(hi, dtype=np.int32) * width)[:, None, None], out=blocks)
    np.copyto(blocks, -1, where=dead[None])  # (the last block's ends land on top: p0 + hi * width)
    bounds = [p0 + i * width for i in range(lo, hi)] + [top]  # (i, start) for lo <= i <= hi
    first = top + 1
    for s in bounds:
        if post:
            trans[s, post[0]] = first
        else:
            final[s] = True
    for j, b in enumerate(post[1:]):
        trans[first + j, b] = first + j + 1
    if post:
        final[n - 1] = True
    return trans, final
