"""Token slices: whole-vocabulary walks that skip the tokens a terminal state surely keeps.

A terminal state inside a string, a comment or free text keeps almost every token alive: on Gemma
3's vocabulary 254,342 of 255,895 tokens survive a JSON string's interior, and walking them all
(``trie_walk.walk_vocabulary``) costs ~3 ms each time a new grammar meets such a state. This is
llguidance's *slicer* (guidance-ai/llguidance, ``docs/optimizations.md``, "Slicer optimization"):
per vocabulary, a few regular *slices* ``D`` (a character class repeated) and the tokens whose
bytes stay alive in ``D``'s DFA; when a DFA state ``q`` keeps alive every byte string that ``D``
keeps alive, all those tokens stay inside from ``q`` with no walk, and only the rest of the
vocabulary (the *complement*: tokens with a quote, a backslash, a control byte) is walked.

Exactness. ``contains(slice, trans, q)`` walks the product of the slice DFA and ``trans`` from
``(0, q)``: it holds iff for every byte on which the slice DFA has a transition the terminal DFA
has one too, in every reachable pair. Slice DFAs are trimmed, so every byte path of the slice DFA
is a prefix of one of its words, and the check is exactly "every string the slice keeps alive
stays alive from ``q``". Then the members stay inside, and a token that stays inside never
contributes a crossing (``rest_walk.drop_inside``): walking only the complement gives the very
``Walk`` of the whole vocabulary (``tests/constrain/test_slices.py`` compares them). The product
walk gives up (answers False, so the state is walked in full) past ``PAIR_CAP`` pairs: a string
with a length bound (``maxLength: 1000``) has a long chain of states and never contains an
unbounded slice anyway.

Unlike llguidance the slices here are not a partition: each has its own complement, and the
largest slice that the state contains is used (a comment's ``[^\\n]*`` contains printable text,
a JSON string's interior only the text without ``"`` and ``\\``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trellis.constrain.automata.byte_dfa import ByteDFA
from trellis.constrain.automata.regex import regex_to_byte_dfa
from trellis.constrain.vocab.rest_walk import RestSet, Walk, walk
from trellis.constrain.vocab.trie_walk import walk_vocabulary
from trellis.constrain.vocab.walks import TokenMatrix

# Largest first: the first one a state contains is used. Control bytes and DEL are out of all of
# them (a JSON string must escape them; most comment and text terminals stop at a newline).
SLICES = (
    r"[^\x00-\x1f\x7f]+",  # printable text: a line comment's or a free-text terminal's interior
    r'[^"\\\x00-\x1f\x7f]+',  # a JSON string's body (llguidance's JSON slice, unbounded)
    r"[^'\\\x00-\x1f\x7f]+",  # a single-quoted string's body (SQL, Python, Lark literals)
)
# Product pairs ``contains`` visits before it gives up (a full walk then, never a wrong answer):
# a JSON string's interior against either slice visits ~20.
PAIR_CAP = 256


@dataclass(eq=False)
class Slice:
    """One slice over one vocabulary: its DFA, the packed bitset of its members (tokens whose
    bytes stay alive in the DFA from its start), and the other valid tokens as a ``RestSet``
    (``rest``) with each one's index in ``RestSet.vocabulary(tm)`` (``index``)."""

    pattern: str
    dfa: ByteDFA
    inside: np.ndarray  # [N] bool over RestSet.vocabulary(tm): the members
    packed: np.ndarray  # [W] int32: the members' bitset
    rest: RestSet
    index: np.ndarray  # [len(rest)] int64
    moves: list[tuple[np.ndarray, np.ndarray]]  # per slice DFA state: (bytes with a move, targets)
    loop: int  # a byte b with b, bb, bbb, ... all kept alive by the slice DFA (``contains``' witness)


def slices(tm: TokenMatrix) -> tuple[Slice, ...]:
    """The slices of ``tm``'s vocabulary (built once per token matrix: ~20 ms a slice on Gemma's
    vocabulary, with the token matrix's other per-vocabulary tables)."""
    hit = tm.__dict__.get("_slices")
    if hit is None:
        hit = tm.__dict__["_slices"] = tuple(_build(tm, p) for p in SLICES)
    return hit


def _build(tm: TokenMatrix, pattern: str) -> Slice:
    dfa = regex_to_byte_dfa(pattern, name="slice")
    vocab = RestSet.vocabulary(tm)
    inside = walk_vocabulary(dfa.trans, dfa.final, 0, vocab, tm).inside
    index = np.flatnonzero(~inside)
    first = tm.mat_t.reshape(-1)[vocab.base[index]]  # still sorted: a subset of a sorted set
    rest = RestSet(vocab.tid[index], vocab.base[index], vocab.length[index],
                   np.searchsorted(first, np.arange(257)).astype(np.int64), True)
    moves = []
    for s in range(dfa.num_states):
        b = np.flatnonzero(dfa.trans[s] >= 0)
        moves.append((b, dfa.trans[s, b].astype(np.int64)))
    inside.setflags(write=False)
    return Slice(pattern, dfa, inside, tm.pack_ids(vocab.tid[inside]), rest, index, moves, _loop_byte(dfa))


def _loop_byte(dfa: ByteDFA) -> int:
    """A byte whose repetitions the slice DFA keeps alive forever (every slice is a character
    class repeated: any ASCII member byte loops)."""
    for b in b"a0 ":
        s1 = int(dfa.trans[0, b])
        if s1 >= 0 and int(dfa.trans[s1, b]) == s1:
            return b
    raise ValueError(f"slice DFA with no looping ASCII byte: {dfa}")


def contains(sl: Slice, trans: np.ndarray, q: int) -> bool:
    """Whether every byte string that stays alive in ``sl``'s DFA stays alive in ``trans`` from
    ``q`` (module docstring); False also past ``PAIR_CAP`` product pairs."""
    # Witness first: the slice keeps ``loop`` repeated alive forever, so if ``trans`` lets it die
    # from q the answer is no. That is every state of a length-bounded string (a chain of states
    # per character: the product walk below visits hundreds of pairs before the chain ends, 1.7 ms
    # per vocabulary walk of a 16-character chunk's states on Gemma's vocabulary, ~30% of it).
    b, p, seen_p = sl.loop, q, set()
    while p not in seen_p:
        seen_p.add(p)
        p = int(trans[p, b])
        if p < 0:
            return False
    n = trans.shape[0]
    seen = {q}  # pair (s, p) as s * n + p; the start pair is (0, q)
    todo = [(0, q)]
    while todo:
        s, p = todo.pop()
        b, ts = sl.moves[s]
        tp = trans[p, b]
        if (tp < 0).any():
            return False
        for key in np.unique(ts * n + tp).tolist():
            if key not in seen:
                if len(seen) >= PAIR_CAP:
                    return False
                seen.add(key)
                todo.append(divmod(key, n))
    return True


def slice_for(tm: TokenMatrix, trans: np.ndarray, q: int) -> Slice | None:
    """The largest slice whose members all stay inside from state ``q`` of ``trans``, or None."""
    for sl in slices(tm):
        if contains(sl, trans, q):
            return sl
    return None


def walk_sliced(sl: Slice, trans: np.ndarray, final: np.ndarray, q: int, tm: TokenMatrix,
                follow: np.ndarray | None = None) -> tuple[np.ndarray, Walk]:
    """``rest_walk.walk`` over ``RestSet.vocabulary(tm)`` from a state that contains ``sl``
    (``slice_for``), and the packed bitset of its ``inside``: only the complement is walked."""
    w = walk(trans, final, q, sl.rest, tm, follow)
    inside = sl.inside.copy()
    inside[sl.index] = w.inside
    return sl.packed | tm.pack_ids(sl.rest.tid[w.inside]), Walk(inside, w.cross, sl.index[w.src], w.inv)
