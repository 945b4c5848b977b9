"""A vocabulary walk from a DFA state patched from the walk of a state that walks alike on most
tokens.

Why: a string with a length bound (``minLength: 30``, ``maxLength: 64``) is a chain of DFA states,
one per character left, and a new grammar meets each as a new state: every position inside the
string value is a whole-vocabulary walk (~3-6 ms on Gemma's 262k tokens for a printable class:
a trie walk over most of the vocabulary, and its packing), 25 of them along one 30-character
value (bench_fresh's o10012: ~77 ms of masks for 27 tokens). ``dfa_shapes``' depth classes share
a walk between states alike on every string up to the longest token (48 bytes), so the positions
with fewer than 48 characters left are all different walks. Yet two of them differ only where
the closing quote may come: on the tokens that hold a quote.

What: from a state ``r`` walked before and the new state ``q`` (same DFA, same follow set), walk
the pairs of states the same byte strings reach from ``(q, r)`` (``_walkc.divergence``): a pair
*diverges* on byte ``b`` when one side moves on ``b`` and the other does not, or both do to states
of different finality. A token none of whose bytes is a diverging one walks alike from ``q`` and
``r`` (alive at the same places, accepting at the same places), so it stays inside, and crosses
where, exactly as in ``r``'s walk. The tokens holding a diverging byte (and at least as long as
the first divergence is deep) are walked from ``q`` on their own (``rest_walk.walk``: the ~3k of
Gemma's tokens that hold a ``"``), and ``r``'s walk stands for the rest.

Exact by construction; ``tests/constrain/test_alike_patch.py`` compares patched walks with full
ones on length-bounded and other DFAs. The crossings are listed in (token, split) order, so a
patched walk's leftover set is a function of its crossings alone (its cache key names the
method: ``vocab_walk``'s ``how``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from trellis.constrain.automata.byte_dfa import ByteDFA
from trellis.constrain.vocab.rest_walk import RestSet, Walk, c_bool, c_table, rows, walk, with_crossings
from trellis.constrain.vocab.walks import TokenMatrix, walkc

# Reference walks kept per (DFA, follow set), the latest first, patched ones too: a chain is met
# position after position, so a recent state of the same kind is the likely reference (a string
# of UTF-8 characters has a few kinds of state: between characters, within one).
KEEP = 6
# A patch walks at most this share of the vocabulary (the tokens holding a diverging byte);
# beyond it the full walk costs about as much.
MAX_SHARE = 1 / 6
# The tokens holding a diverging byte are looked for only up to this many bytes; with more (a
# fixed-length string's positions part on every character: one side wants the closing quote
# where the other wants a character), only the depth of the first divergence narrows the walk.
MAX_BYTES = 8
# DFAs holding references at once (each up to KEEP walks per follow set, ~32 KB of packed bits
# and the crossings each): the oldest DFA's are dropped past it, so a server meeting one new
# schema after another holds a bounded number.
MAX_HOLDERS = 64
_HOLDERS: OrderedDict[int, ByteDFA] = OrderedDict()
_LOCK = threading.Lock()
# Walks with more crossings than this are not kept as references (a reference holds its
# leftover set: a state where most tokens can end the terminal early has ~200k).
MAX_REF_CROSSINGS = 50_000


def _follow_key(follow: np.ndarray | None) -> bytes | None:
    return None if follow is None else np.packbits(follow).tobytes()


def _holding(tm: TokenMatrix, parting: bytes) -> np.ndarray:
    """Sorted indices in ``RestSet.vocabulary(tm)`` of the tokens that hold a byte marked in
    ``parting`` ([256] 0/1), by one C pass over the vocabulary's bytes (~2 ms on Gemma's;
    memoised per token matrix and byte set: a chain parts on the same bytes at every position)."""
    table = tm.__dict__.setdefault("_holding", {})
    hit = table.get(parting)
    if hit is None:
        vocab = RestSet.vocabulary(tm)
        hit = np.frombuffer(walkc.holding(rows(tm), tm.mat_t.shape[0], tm.mat_t.shape[1], vocab.base, vocab.length,
                                          parting), dtype=np.int64)
        if len(table) > 256:
            table.clear()
        table[parting] = hit
    return hit


def _at_least(tm: TokenMatrix) -> np.ndarray:
    """[Lmax + 2] int64: how many of the vocabulary's tokens have at least ``n`` bytes, by ``n``."""
    hit = tm.__dict__.get("_at_least")
    if hit is None:
        counts = np.bincount(RestSet.vocabulary(tm).length, minlength=tm.max_len + 2)
        hit = tm.__dict__["_at_least"] = np.cumsum(counts[::-1])[::-1]
    return hit


def forget() -> None:
    """Drop every reference walk (``compile.clear_caches``: what a new process starts from)."""
    with _LOCK:
        for dfa in list(_HOLDERS.values()):
            dfa.__dict__.pop("_alike_refs", None)
        _HOLDERS.clear()


def saved() -> list:
    """The references as they are now, for ``restore`` (a benchmark puts them back between inputs,
    as it does the walk cache: they live on memoised DFAs, which outlast one input)."""
    with _LOCK:
        return [(dfa, {k: (v[0], list(v[1])) for k, v in dfa.__dict__.get("_alike_refs", {}).items()})
                for dfa in _HOLDERS.values()]


def restore(state: list) -> None:
    """Put back the references ``saved`` returned, and only those."""
    forget()
    with _LOCK:
        for dfa, refs in state:
            dfa.__dict__["_alike_refs"] = {k: (v[0], list(v[1])) for k, v in refs.items()}
            _HOLDERS[id(dfa)] = dfa


def remember(dfa: ByteDFA, q: int, tm: TokenMatrix, follow: np.ndarray | None, packed: np.ndarray, w: Walk) -> None:
    """Keep the walk of ``dfa`` from ``q`` over ``RestSet.vocabulary(tm)`` as a reference."""
    if walkc is None or dfa.num_states > 2048 or (w.cross is not None and len(w.src) > MAX_REF_CROSSINGS):
        return
    table = dfa.__dict__.setdefault("_alike_refs", {})
    key = (id(tm), _follow_key(follow))
    held = table.get(key)
    if held is None or held[0] is not tm:  # the matrix is held with them: its id is reused once it is freed
        held = table[key] = (tm, [])
    refs = held[1]
    refs.insert(0, (q, packed, w.cross, w.src, w.inv))
    del refs[KEEP:]
    with _LOCK:  # (masks of one engine run on one thread; two engines may share a DFA)
        _HOLDERS[id(dfa)] = dfa
        _HOLDERS.move_to_end(id(dfa))
        while len(_HOLDERS) > MAX_HOLDERS:
            _HOLDERS.popitem(last=False)[1].__dict__.pop("_alike_refs", None)


def patched(dfa: ByteDFA, q: int, tm: TokenMatrix, follow: np.ndarray | None) -> tuple[np.ndarray, Walk] | None:
    """(packed tokens that stay inside, the walk) of ``dfa`` from ``q`` over the vocabulary, from
    a remembered walk of a state that walks alike on all but at most ``MAX_SHARE`` of the
    tokens; None where there is none."""
    held = dfa.__dict__.get("_alike_refs", {}).get((id(tm), _follow_key(follow)))
    refs = held[1] if held is not None and held[0] is tm else None
    if not refs or walkc is None:
        return None
    vocab = RestSet.vocabulary(tm)
    trans, final = c_table(dfa.trans), c_bool(dfa.final)
    best = None
    for ref in refs:
        if ref[0] == q:
            continue
        got = walkc.divergence(trans, final, int(q), int(ref[0]), int(tm.max_len))
        if got is None:
            return None
        parting, first = got
        # a token shorter than the first divergence walks alike, and so does one without a parting byte
        if parting.count(1) > MAX_BYTES:
            at_least = _at_least(tm)
            index, size = None, int(at_least[min(first, len(at_least) - 1)])  # (listed if chosen)
        else:
            index = _holding(tm, parting)
            index = index[vocab.length[index] >= first]
            size = len(index)
        if size <= MAX_SHARE * len(vocab) and (best is None or size < best[0]):
            best = (size, index, first, ref)
    if best is None:
        return None
    _, index, first, (_, ref_packed, ref_cross, ref_src, ref_inv) = best
    if index is None:
        index = np.flatnonzero(vocab.length >= first)
    sub = vocab.subset(tm, index)
    sw = walk(dfa.trans, dfa.final, q, sub, tm, follow)
    packed = (ref_packed & ~tm.pack_ids(sub.tid)) | tm.pack_ids(sub.tid[sw.inside])
    stride = tm.mat_t.shape[1]
    pairs_i, pairs_j = [], []
    if ref_cross is not None:  # the reference's crossings of the other tokens stand
        keep = ~np.isin(ref_src, index)
        src = ref_src[keep]
        pairs_i.append(src)
        pairs_j.append((ref_cross.base[ref_inv[keep]] - vocab.base[src]) // stride)
    if sw.cross is not None:
        pairs_i.append(index[sw.src])
        pairs_j.append((sw.cross.base[sw.inv] - sub.base[sw.src]) // stride)
    if pairs_i:
        ci, cj = np.concatenate(pairs_i), np.concatenate(pairs_j)
        order = np.argsort(ci * (tm.max_len + 1) + cj, kind="stable")
        w = with_crossings(np.zeros(0, dtype=bool), ci[order], cj[order], vocab, tm)
    else:
        none = np.zeros(0, dtype=np.int64)
        w = Walk(np.zeros(0, dtype=bool), None, none, none)
    remember(dfa, q, tm, follow, packed, w)
    return packed, w
