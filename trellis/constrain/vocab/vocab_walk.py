"""One terminal-DFA state walked over the whole vocabulary, by the cheapest exact method.

Four walks give the same tokens inside and the same crossings (token, offset): bisection over the
sorted vocabulary for a literal (``literal_walk``), the complement of a token slice the state keeps
whole (``slices``), the token trie (``trie_walk``), each starting token on its own (``rest_walk``).
They differ in the ORDER of the leftovers they return (``Walk.cross``), and walks over leftovers
are cached, in memory and on disk, by the leftover set's ``key`` with their results as indices in
that order. So the key names the method too (``walk``'s ``how``): a leftover set is never looked
up under a key that another method's order made. The choice is a function of the DFA state and
the vocabulary, but a threshold changed at run time (an A/B in one process) must not make two
orders meet under one key.
"""

from __future__ import annotations

from typing import Hashable

import numpy as np

from trellis.constrain.automata.byte_dfa import ByteDFA
from trellis.constrain.automata.byte_dfa import literal_at
from trellis.constrain.vocab import alike_patch
from trellis.constrain.vocab.dfa_shapes import digest_of
from trellis.constrain.vocab.literal_walk import words_at, words_vocabulary_ids
from trellis.constrain.vocab.rest_walk import RestSet, Walk, concat_ranges, walk as flat_walk
from trellis.constrain.vocab.slices import cover_for, trie_cut_for, walk_sliced
from trellis.constrain.vocab.trie_walk import walk_vocabulary
from trellis.constrain.vocab.walk_cache import key_digest
from trellis.constrain.vocab.walks import TokenMatrix

# A walk from a state where at least this share of the vocabulary starts takes the token trie
# (shared prefixes stepped once, dead subtrees skipped), below it the flat walk (each starting
# token on its own). Gemma's vocabulary, corpus grammars: an identifier's interior (137k of 256k
# tokens start, 54%) 1.3-1.8 ms flat vs 0.26-0.29 ms trie on llama.cpp/c.gbnf, 3.3 vs 2.4 ms on
# composition_csv.lark; at ~55k (21%) the flat walk wins or ties (composition_csv's words: 0.7-0.9
# vs 3.6-4.3 ms; json.gbnf: 0.59 vs 0.54). In-process A/B over 8 corpus grammars, 3 documents
# each, fresh (a), this vs the old 60%: per-input median 0.877x, c.gbnf's documents up to 0.75x,
# json.gbnf's 0.60x, nothing beyond 1.09x (noise). (1,024 starting tokens instead: composition_csv
# 1.21-1.38x slower.)
TRIE_MIN_SHARE = 3 / 8
# A broad state (the trie's) that walks alike with one walked before on all but a few tokens is
# patched from that walk (``alike_patch``: a length-bounded string's positions); False: every such
# state walked in full.
PATCH = True


def walk(dfa: ByteDFA, q: int, tm: TokenMatrix, follow: np.ndarray | None, key: Hashable) -> tuple[np.ndarray, Walk]:
    """(packed bitset of the tokens that stay inside, the walk without its ``inside`` array) of
    ``dfa`` from ``q`` over ``RestSet.vocabulary(tm)``; the leftovers' key is ``key`` (the walk's
    cache key) with the method that ordered them."""
    rs = RestSet.vocabulary(tm)
    # A state keyed by ``narrow_key`` (a canonical shape's first item is bytes or another tagged
    # tuple) is walked flat: few tokens start there, so no other method is looked for.
    narrow_state = key[0][0] == "narrow"
    words = sl = None
    if not narrow_state:
        lit = literal_at(dfa, q)
        words = (lit,) if lit is not None else words_at(dfa, q)
        sl = None if words is not None else cover_for(tm, dfa, q)
    if words is not None:  # a keyword, key, punctuation or string enum: two bisects per prefix
        ids, w = words_vocabulary_ids(words, rs, tm, follow)
        packed, how = tm.pack_ids(rs.tid[ids]), "literal"
    elif sl is not None:  # most tokens surely stay inside: walk the others
        (packed, w), how = walk_sliced(sl, dfa.trans, dfa.final, q, tm, follow), "slice " + sl.pattern
    else:
        broad = not narrow_state and starting(dfa, q, tm) >= TRIE_MIN_SHARE * len(rs)
        hit = alike_patch.patched(dfa, q, tm, follow) if broad and PATCH else None
        if hit is not None:  # alike to a state walked before but for a few tokens: those walked only
            (packed, w), how = hit, "patch"
        else:
            if broad:
                # (a cut changes which nodes are visited, not the walk: the method's name stays "trie")
                how, w = "trie", walk_vocabulary(dfa.trans, dfa.final, q, rs, tm, follow, trie_cut_for(tm, dfa, q))
            else:
                how, w = "flat", flat_walk(dfa.trans, dfa.final, q, rs, tm, follow)
            packed = _pack_started(dfa, q, rs, tm, w) if not broad else tm.pack_where(rs.tid, w.inside)
            if broad and PATCH:
                alike_patch.remember(dfa, q, tm, follow, packed, w)
    w.inside = np.zeros(0, dtype=bool)  # only the packed form is used at this level
    if w.cross is not None:
        w.cross.key = key_digest((key, how))
    return packed, w


# A state from which at most this share of the vocabulary starts (a digit, a date's next field, a
# number's exponent, a string's opening quote: 2 to 205 of Gemma's 262k tokens) is walked flat,
# keyed by its DFA's digest (``narrow``, ``narrow_key``), with no canonical shape: the walk itself is ~10-20 us,
# while the shape (~50 us for a date-time format's 64-state DFA), its cache key and the packing
# of a [V] flag array took ~150 us a state the first time (o10527's date-time positions: ~270 us
# a mask). 1/128: 2,048 tokens on Gemma. ``benchmarks/ab_masks.py --switch narrow``.
NARROW_SHARE = 1 / 128


def starting(dfa: ByteDFA, q: int, tm: TokenMatrix) -> int:
    """How many vocabulary tokens start with a byte ``dfa`` takes from ``q`` (counted per state on
    first use, kept on the DFA with the first-byte offsets it counted: the regex memos share a DFA
    across grammars: a state's count is ~4 us of numpy once, then a read). Per state, not for
    every state at once: a length-bounded string's DFA (sp_120's ``maxLength: 256``) took
    1.7 ms to count whole at its first mask, of which one or two states were asked."""
    memo = dfa.__dict__.get("_starting")
    if memo is None or memo[0] is not tm.first_lo:  # (not kept on tm: its __dict__ is its disk tables)
        memo = dfa.__dict__["_starting"] = (tm.first_lo, np.diff(tm.first_lo), {})
    hit = memo[2].get(q)
    if hit is None:
        hit = memo[2][q] = int(memo[1][dfa.trans[q] >= 0].sum())
    return hit


def narrow(dfa: ByteDFA, q: int, tm: TokenMatrix) -> bool:
    """Whether ``q`` is not in a literal and at most ``NARROW_SHARE`` of the vocabulary starts
    from it: then its walks are keyed by ``narrow_key``, and ``walk`` makes them flat."""
    return literal_at(dfa, q) is None and starting(dfa, q, tm) <= NARROW_SHARE * tm.size


def narrow_key(dfa: ByteDFA, q: int) -> Hashable:
    """A narrow state's walk key without the followers: its DFA's tables (by content digest, kept
    on the DFA) and the state; no canonical shape, whose making cost more than the walk."""
    return ("narrow", digest_of(dfa), q)


def ends_dead(dfa: ByteDFA) -> bool:
    """Whether no accepting state of ``dfa`` has a way on (a JSON string ends at its closing
    quote): then a walk crosses at most once per token and may be made without the followers
    and filtered by them after (``scannerless._by_follow``), shared by every context (kept on
    the DFA)."""
    hit = dfa.__dict__.get("_ends_dead")
    if hit is None:
        hit = dfa.__dict__["_ends_dead"] = not bool((dfa.final & (dfa.trans >= 0).any(axis=1)).any())
    return hit


def _pack_started(dfa: ByteDFA, q: int, rs: RestSet, tm: TokenMatrix, w: Walk) -> np.ndarray:
    """The packed ids of the rests that stay inside, read only among those starting with a byte
    ``dfa`` takes from ``q`` (no other rest can): O(started), not a pass over the [V] flags."""
    live = dfa.trans[q] >= 0
    idx = concat_ranges(rs.lo[:-1][live], rs.lo[1:][live])
    return tm.pack_ids(rs.tid[idx[w.inside[idx]]])
