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

Bounded slices. A string with a length bound (``maxLength: 64``: ``[^"\\]{0,64}"``) contains no
slice, yet a state with 40 characters left keeps every member of at most 40 bytes alive, and no
member is longer than the longest token (48 bytes on Gemma). ``reach(sl, dfa)`` gives, per DFA
state, the depth ``D`` up to which every byte string the slice keeps alive stays alive; a state
with ``D`` at least the longest member contains the slice for every purpose a walk has, and one
with ``D`` at least ``DEPTHS[0]`` is walked over the complement plus the members longer than
``D`` (rounded down to a ``DEPTHS`` level, so a few walked sets serve every state): the members of
at most ``D`` bytes stay inside without a walk. llguidance gets the same effect from extra
bounded slices (``[^"\\\x00-\x1F\x7F]{1,10}``, ``{1,30}``: ``earley/slicer.rs``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trellis.constrain.automata.byte_dfa import ByteDFA
from trellis.constrain.automata.regex import regex_to_byte_dfa
from trellis.constrain.vocab.rest_walk import RestSet, Walk, c_table, walk
from trellis.constrain.vocab.trie_walk import TokenTrie, TrieCut, walk_vocabulary
from trellis.constrain.vocab.walks import TokenMatrix, walkc

# Largest first: the first one a state contains is used. Control bytes and DEL are out of all of
# them (a JSON string must escape them; most comment and text terminals stop at a newline).
SLICES = (
    r"[^\x00-\x1f\x7f]+",  # printable text: a line comment's or a free-text terminal's interior
    r'[^"\\\x00-\x1f\x7f]+',  # a JSON string's body (llguidance's JSON slice, unbounded)
    # A JSON Schema pattern's ``.`` (ECMA-262: any character but a line terminator) inside a JSON
    # string: the body without U+2028/U+2029, which the JSON slice keeps alive, so a ``.*`` or
    # ``.+`` state (``^https?://.+$`` after its prefix) contained no slice and was walked whole,
    # ~3.7 ms a first mask (bench_fresh's o11684). Its members are the JSON slice's on Gemma's
    # vocabulary (no token holds those characters), and a slice with the very members of an
    # earlier one shares its arrays and covers (``slices``): no second copy in memory or on disk.
    r'[^"\\\x00-\x1f\x7f\u2028\u2029]+',
    r"[^'\\\x00-\x1f\x7f]+",  # a single-quoted string's body (SQL, Python, Lark literals)
    # Words: an identifier, hostname or key pattern's loop (``[\-0-9A-Z_a-z]+``, ``\w+``,
    # ``[a-z0-9-]+``) keeps every letters-and-digits token alive (53,100 of Gemma's, 33,189 all
    # lowercase) and drops the rest at a space or punctuation: its walk was a trie walk of ~1.3 ms,
    # ~0.45 with the slice (bench_fresh's o11684, its uri and "$(...)" patterns: nine masks over 1 ms).
    r"[0-9A-Za-z]+",
    r"[a-z]+",
)
WORDS = SLICES[-2:]  # held whole only: no bounded covers (``cover_for``)
DOT = SLICES[2]
# False: the ``.`` slice is built but not used (``benchmarks/ab_masks.py --switch dotslice``).
DOT_SLICE = True
# False: the two word slices are built but not used (``benchmarks/ab_masks.py --switch wordslices``).
WORD_SLICES = True

# Product pairs ``contains`` visits before it gives up (a full walk then, never a wrong answer):
# a JSON string's interior against either slice visits ~20.
PAIR_CAP = 256


@dataclass(eq=False)
class Cover:
    """Tokens a DFA state surely keeps inside without a walk: ``inside`` ([N] bool over
    ``RestSet.vocabulary(tm)``) and ``packed`` (their [W] int32 bitset), the other valid tokens as
    ``rest`` with each one's index in ``RestSet.vocabulary(tm)`` (``index``). A ``Slice`` is the
    cover of a state that keeps all its members alive; ``cover_for`` also makes bounded ones."""

    pattern: str  # names the cover in walk keys (the leftovers' order depends on ``rest``)
    inside: np.ndarray
    packed: np.ndarray
    rest: RestSet
    index: np.ndarray  # [len(rest)] int64


@dataclass(eq=False)
class Slice(Cover):
    """One slice over one vocabulary: the cover of its members (tokens whose bytes stay alive in
    its DFA from the start), its DFA, and what ``reach`` and ``cover_for`` need of it."""

    dfa: ByteDFA
    moves: list[tuple[np.ndarray, np.ndarray]]  # per slice DFA state: (bytes with a move, targets)
    loop: int  # a byte b with b, bb, bbb, ... all kept alive by the slice DFA (``contains``' witness)
    longest: int  # the longest member's byte length: a state with this reach contains the slice
    members_upto: np.ndarray  # [longest + 1] int64: how many members have at most d bytes
    bounded: dict  # depth level (``DEPTHS``) -> its bounded ``Cover`` (``cover_for``)
    cuts: dict = field(default_factory=dict)  # depth level (``CUT_LEVELS``) -> ``trie_cut``


def slices(tm: TokenMatrix) -> tuple[Slice, ...]:
    """The slices of ``tm``'s vocabulary (built once per token matrix: ~20 ms a slice on Gemma's
    vocabulary, with the token matrix's other per-vocabulary tables)."""
    hit = tm.__dict__.get("_slices")
    if hit is None:
        built: list[Slice] = []
        for p in SLICES:
            built.append(_build(tm, p, built))
        hit = tm.__dict__["_slices"] = tuple(built)
    return hit


def _in_use(tm: TokenMatrix) -> tuple[Slice, ...]:
    if WORD_SLICES and DOT_SLICE:
        return slices(tm)
    return tuple(sl for sl in slices(tm)
                 if (WORD_SLICES or sl.pattern not in WORDS) and (DOT_SLICE or sl.pattern != DOT))


def _build(tm: TokenMatrix, pattern: str, earlier: list[Slice]) -> Slice:
    dfa = regex_to_byte_dfa(pattern, name="slice")
    vocab = RestSet.vocabulary(tm)
    inside = walk_vocabulary(dfa.trans, dfa.final, 0, vocab, tm).inside
    moves = []
    for s in range(dfa.num_states):
        b = np.flatnonzero(dfa.trans[s] >= 0)
        moves.append((b, dfa.trans[s, b].astype(np.int64)))
    for e in earlier:  # the very members of an earlier slice: its arrays, bounded covers and cuts
        if np.array_equal(e.inside, inside):
            return Slice(pattern, e.inside, e.packed, e.rest, e.index, dfa, moves, _loop_byte(dfa), e.longest,
                         e.members_upto, e.bounded, e.cuts)
    rest, index = _others(tm, inside)
    inside.setflags(write=False)
    member_len = vocab.length[inside]
    longest = int(member_len.max(initial=0))
    upto = np.cumsum(np.bincount(member_len, minlength=longest + 1))
    return Slice(pattern, inside, tm.pack_where(vocab.tid, inside), rest, index, dfa, moves, _loop_byte(dfa),
                 longest, upto, {})


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
    for sl in _in_use(tm):
        if contains(sl, trans, q):
            return sl
    return None


def _others(tm: TokenMatrix, inside: np.ndarray) -> tuple[RestSet, np.ndarray]:
    """The valid tokens not in ``inside`` (bool over ``RestSet.vocabulary(tm)``) as a rest set,
    and each one's index in the vocabulary's."""
    index = np.flatnonzero(~inside)
    return RestSet.vocabulary(tm).subset(tm, index), index


# Bounded covers (module docstring): the member lengths a reach is rounded down to. Below the
# first a bounded cover walks most of the vocabulary anyway (Gemma: 29,530 JSON-slice members
# are longer than 12 bytes, 85,092 longer than 8), and the full walk's trie shares their
# prefixes: a cover at 4 bytes walked 195k tokens flat in 8.9 ms where the trie takes ~3 ms.
DEPTHS = (12, 16, 24, 32)
# DFAs over this many states get no reach table in the numpy path (``reach``: one gather of
# states x byte classes per depth level; the C kernel searches from one state instead): their
# states are walked as before.
REACH_MAX_STATES = 4096
_NO_REACH = object()


def reach(sl: Slice, dfa: ByteDFA) -> np.ndarray | None:
    """[S] int32: per state q of ``dfa``, the largest ``D <= sl.longest`` such that every byte
    string of at most ``D`` bytes that ``sl``'s DFA keeps alive stays alive in ``dfa`` from q
    (``sl.longest``: every member does). None over ``REACH_MAX_STATES`` states. Memoised on the
    DFA per slice.

    Shortest paths to a violation in the product of the two DFAs: a pair (s, p) violates when a
    byte with a move from slice state s has none from p (``reach`` 0); otherwise its reach is one
    more than its successors' least. Bytes with equal DFA columns and equal slice targets move
    every pair alike, so the product steps per such class; Bellman-Ford from the cap down
    converges within ``sl.longest`` rounds."""
    memo = dfa.__dict__.setdefault("_reach", {})
    key = (sl.pattern, sl.longest)
    hit = memo.get(key, _NO_REACH)
    if hit is not _NO_REACH:
        return hit
    n, cap = dfa.num_states, sl.longest
    if n > REACH_MAX_STATES:
        memo[key] = None
        return None
    trans = dfa.trans
    cls = memo.get("classes")
    if cls is None:  # [256] the DFA's byte classes: equal columns (compared as raw bytes, exact)
        cols = np.ascontiguousarray(trans.T).view(np.dtype((np.void, 4 * n))).reshape(-1)
        cls = memo["classes"] = np.unique(cols, return_inverse=True)[1].reshape(-1).astype(np.int64)
    m = sl.dfa.num_states
    size = m * n
    sentinel = size  # a cell that stays at the cap: what a slice state without moves points at
    ok = np.ones(size + 1, dtype=bool)
    rows: list[list[np.ndarray]] = []
    for s, (bs, ts) in enumerate(sl.moves):
        reps = np.unique(cls[bs] * m + ts, return_index=True)[1] if len(bs) else []
        col = [trans[:, bs[j]] for j in reps]
        if col:
            ok[s * n:(s + 1) * n] = np.logical_and.reduce([c >= 0 for c in col])
        rows.append([ts[j] * n + np.maximum(c, 0) for j, c in zip(reps, col)] or [np.full(n, sentinel)])
    width = max(len(r) for r in rows)
    idx = np.stack([np.concatenate([r[min(j, len(r) - 1)] for r in rows]) for j in range(width)])
    r_ = np.full(size + 1, cap, dtype=np.int32)
    r_[~ok] = 0
    for _ in range(cap):
        nxt = np.minimum(r_[idx].min(axis=0) + 1, cap).astype(np.int32)
        nxt = np.append(np.where(ok[:size], nxt, 0), cap).astype(np.int32)
        if np.array_equal(nxt, r_):
            break
        r_ = nxt
    out = memo[key] = r_[:n].copy()  # slice state 0 (its start) with each DFA state
    out.setflags(write=False)
    return out


def reach_at(sl: Slice, dfa: ByteDFA, q: int) -> int | None:
    """``reach(sl, dfa)[q]``: in C a breadth-first search from (start, q) alone (~10-100 us: the
    pairs within ``sl.longest`` bytes), else from the numpy table (None over its size limit)."""
    if walkc is not None:
        return walkc.reach(c_table(dfa.trans), dfa.num_states, c_table(sl.dfa.trans), sl.dfa.num_states, q, sl.longest)
    r = reach(sl, dfa)
    return None if r is None else int(r[q])


def cover_for(tm: TokenMatrix, dfa: ByteDFA, q: int) -> Cover | None:
    """What ``vocab_walk`` may skip from state ``q``: of the slices whose members all stay alive
    from ``q`` (a reach of at least the longest member) and the bounded covers (a slice's members
    of at most its reach, rounded down to a ``DEPTHS`` level), the one with the most members;
    None when no slice reaches ``DEPTHS[0]`` bytes."""
    if walkc is None:  # the numpy reach table is costly: unbounded containment first
        sl = slice_for(tm, dfa.trans, q)
        if sl is not None:
            return sl
    best: tuple[int, Slice, int | None] | None = None  # (members, slice, bounded level or None: whole)
    trans = dfa.trans
    for sl in _in_use(tm):
        if (trans[q, sl.moves[0][0]] < 0).any():  # a byte the slice starts with dies: reach 0
            continue
        if sl.pattern in WORDS and trans[q, 0x20] >= 0:
            # A word slice pays where its others die at once (an identifier's loop: a space or
            # punctuation ends it). Where a space goes on, its ~210k others (most of Gemma's
            # tokens start with one) are walked flat, without the trie's shared prefixes: a
            # printable ASCII class's positions took 4.5 ms instead of ~1 ms patched (o10012).
            continue
        if walkc is None:  # the slice's loop byte repeated dies within DEPTHS[0] bytes
            p = q
            for _ in range(DEPTHS[0]):
                p = int(trans[p, sl.loop])
                if p < 0:
                    break
            if p < 0:
                continue
        d = reach_at(sl, dfa, q)
        if d is None:
            return None
        if d >= sl.longest:  # every member stays alive: the slice itself
            level = None
            members = int(sl.members_upto[-1])
        elif d < DEPTHS[0] or sl.pattern in WORDS:
            # (a word slice's bounded cover walks its ~210k others flat at every position of a
            # length-bounded string, which alike_patch patches from each other on a few hundred
            # tokens: with them, ab_masks' masks sum was 2,147 -> 2,248 ms, without 2,355 -> 2,170)
            continue
        else:
            level = max(x for x in DEPTHS if x <= d)
            members = int(sl.members_upto[level])
        # the cover with the most members: a word slice held whole (53k of Gemma's tokens) must
        # not beat the JSON body's members up to a bounded string's reach (~250k)
        if best is None or members > best[0]:
            best = (members, sl, level)
    if best is None:
        return None
    return best[1] if best[2] is None else bounded_cover(tm, best[1], best[2])


def bounded_cover(tm: TokenMatrix, sl: Slice, level: int) -> Cover:
    """The cover of ``sl``'s members of at most ``level`` bytes (memoised on the slice)."""
    hit = sl.bounded.get(level)
    if hit is None:
        vocab = RestSet.vocabulary(tm)
        inside = sl.inside & (vocab.length <= level)
        inside.setflags(write=False)
        rest, index = _others(tm, inside)
        hit = sl.bounded[level] = Cover(f"{sl.pattern}{{,{level}}}", inside, tm.pack_where(vocab.tid, inside), rest, index)
    return hit


def prebuild(tm: TokenMatrix) -> None:
    """Build every slice's bounded covers (the word slices have none) and trie cuts now
    (``tables.prepare``: kept on disk with the other tables), so that no mask pays for them: each
    took 1.5-2 ms (the JSON body's) to 12 ms (the first cut of a word slice, bench_fresh's o10012)
    the first time a state reached its level in a process. All of them: ~26 ms once per
    vocabulary on Gemma, ~15 MB more on disk, ~12 ms more to read (``benchmarks/README.md``,
    ab_masks' forty-seventh session rows)."""
    for sl in slices(tm):
        if sl.pattern not in WORDS:
            for level in DEPTHS:
                bounded_cover(tm, sl, level)
        for level in CUT_LEVELS:
            trie_cut(tm, sl, level)


# Trie cuts: below ``DEPTHS[0]`` a bounded cover's flat walk costs more than the trie (the members
# longer than the reach are most of the vocabulary), yet the trie walk can still skip what the
# reach guarantees: every subtree whose tokens are all members of at most the reach's bytes stays
# inside whole (``_walkc.walk_trie``'s ``cut``). Gemma 3's vocabulary, a JSON string of at most 48
# characters with 8 / 10 left: 3.8 -> 3.1 / 3.9 -> 2.7 ms a walk (with 4 left no gain, at 12 and
# more a bounded cover's walk is 2-6x faster than a cut one). Over bench_fresh's 100 schemas
# in one process, the two alternating per schema (/tmp/q/ab.py in the session note): fresh masks
# 2,027 -> 1,927 ms in sum, over 1 ms 247 -> 200.
CUT_LEVELS = (6, 8, 10)


def trie_cut_for(tm: TokenMatrix, dfa: ByteDFA, q: int) -> TrieCut | None:
    """The ``trie_cut`` a whole-vocabulary trie walk from state ``q`` may take: of the slice that
    lets it skip the most members (the most members of at most its ``CUT_LEVELS`` level of the
    state's reach), or None when no slice reaches ``CUT_LEVELS[0]`` bytes (or without the C
    kernel, whose walk is the only one that cuts)."""
    if walkc is None:
        return None
    best: tuple[int, Slice, int] | None = None
    for sl in slices(tm):
        if sl.pattern == DOT and not DOT_SLICE:
            continue
        if (dfa.trans[q, sl.moves[0][0]] < 0).any():  # a byte the slice starts with dies: reach 0
            continue
        d = reach_at(sl, dfa, q)
        if d is None or d < CUT_LEVELS[0]:
            continue
        level = max(x for x in CUT_LEVELS if x <= d)
        members = int(sl.members_upto[min(level, sl.longest)])
        if best is None or members > best[0]:
            best = (members, sl, level)
    return None if best is None else trie_cut(tm, best[1], best[2])


def trie_cut(tm: TokenMatrix, sl: Slice, level: int) -> TrieCut:
    """The ``TrieCut`` of ``sl``'s members of at most ``level`` bytes (memoised on the slice: ~2 ms
    to build on Gemma's vocabulary, 0.9 MB)."""
    hit = sl.cuts.get(level)
    if hit is None:
        trie = TokenTrie.of(tm)
        _, _, _, tlo, thi, _, _, _ = trie.preorder()
        known = sl.inside & (RestSet.vocabulary(tm).length <= level)
        bad = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(~known[trie.lex])])  # lexicographic
        nodes = ((bad[thi] - bad[tlo]) == 0).astype(np.uint8)
        for a in (known, nodes):
            a.setflags(write=False)
        hit = sl.cuts[level] = TrieCut(nodes, known)
    return hit


def walk_sliced(sl: Cover, trans: np.ndarray, final: np.ndarray, q: int, tm: TokenMatrix,
                follow: np.ndarray | None = None) -> tuple[np.ndarray, Walk]:
    """``rest_walk.walk`` over ``RestSet.vocabulary(tm)`` from a state that contains ``sl``
    (``slice_for``, or a bounded ``cover_for``), and the packed bitset of its ``inside``: only
    the rest is walked."""
    w = walk(trans, final, q, sl.rest, tm, follow)
    inside = sl.inside.copy()
    inside[sl.index] = w.inside
    return sl.packed | tm.pack_where(sl.rest.tid, w.inside), Walk(inside, w.cross, sl.index[w.src], w.inv)
