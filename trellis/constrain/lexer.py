"""Terminals -> one byte DFA per contextual terminal set; vocabulary x lexer-state tables (numpy).

``LexerDFA`` is the subset-construction product of the byte DFAs of a set of terminals (the
terminals one LALR state accepts, plus the ``%ignore`` ones). Each state records which terminal a
lexeme ending there becomes (``accept``, resolved the way Lark's lexer resolves ties), which
terminals the lexeme can still become (``completable``), and which bytes can follow the lexeme
when it ends as a given terminal (``boundary``: bytes that cannot extend it — lexemes are greedy).

``walk_live`` runs a DFA from one state over the vocabulary at once (the tokens whose first byte
is live), one byte column at a time, and reports where each token ends or first leaves the lexeme.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Hashable, Sequence

import numpy as np

from trellis.constrain.regex import ByteDFA
from trellis.tokens import Vocabulary

# ----------------------------------------------------------------------------- vocabulary matrix


@dataclass(eq=False)
class TokenMatrix:
    """The vocabulary as a padded byte matrix, bucketed by first byte for ``walk_live``.

    ``valid[t]`` is False for empty, special and EOS tokens: those are never produced by a walk.
    ``order`` lists the valid ids sorted by (first byte, length); the ids starting with byte
    ``b`` are ``order[first_lo[b]:first_lo[b + 1]]`` and ``first_bits[b]`` is their packed set.
    """

    size: int
    lengths: np.ndarray  # [V] int32
    valid: np.ndarray  # [V] bool
    order: np.ndarray  # [N] int64 valid token ids by (first byte, length)
    mat_t: np.ndarray  # [Lmax, N] uint8, column j = byte j of each ordered token (0-padded)
    first_lo: np.ndarray  # [257] int64 bucket offsets into ``order``
    first_bits: np.ndarray  # [256, W] int32
    valid_bits: np.ndarray  # [W] int32
    rank: np.ndarray  # [V] int64 column of each valid token in ``mat_t`` (-1: invalid)
    eos: tuple[int, ...]
    tokens: tuple[bytes, ...] = field(repr=False, default=())
    _by_bytes: dict[bytes, int] | None = field(default=None, repr=False)

    @property
    def words(self) -> int:
        return (self.size + 31) // 32

    @property
    def max_len(self) -> int:
        return int(self.mat_t.shape[0])

    @classmethod
    def of(cls, vocab: Vocabulary) -> "TokenMatrix":
        key = vocab.fingerprint()
        tm = _TM_CACHE.get(key)
        if tm is None:
            tm = _TM_CACHE[key] = cls._build(vocab)
        return tm

    @classmethod
    def _build(cls, vocab: Vocabulary) -> "TokenMatrix":
        toks = vocab.tokens
        v = len(toks)
        lengths = np.fromiter((len(t) for t in toks), dtype=np.int32, count=v)
        valid = lengths > 0
        bad = np.fromiter(vocab.special | vocab.eos, dtype=np.int64)
        valid[bad] = False
        ids = np.flatnonzero(valid)
        first = np.fromiter((toks[i][0] for i in ids.tolist()), dtype=np.int64, count=len(ids))
        order = ids[np.lexsort((lengths[ids], first))]
        lmax = int(lengths[ids].max()) if len(ids) else 0
        if lmax > np.iinfo(np.int16).max:  # walk tables store byte positions as int16
            raise ValueError(f"a token of {lmax} bytes: tokens longer than 32767 bytes are not supported")
        flat = np.frombuffer(b"".join(toks[i].ljust(lmax, b"\0") for i in order.tolist()), dtype=np.uint8)
        mat_t = np.ascontiguousarray(flat.reshape(len(order), lmax).T)  # [Lmax, N]
        first_lo = np.searchsorted(np.sort(first), np.arange(257)).astype(np.int64)
        words = (v + 31) // 32
        first_bits = np.zeros((256, words), dtype=np.int32)
        rank = np.full(v, -1, dtype=np.int64)
        rank[order] = np.arange(len(order), dtype=np.int64)
        tm = cls(v, lengths, valid, order, mat_t, first_lo, first_bits, np.zeros(words, np.int32), rank,
                 tuple(sorted(vocab.eos)), toks)
        for b in np.flatnonzero(np.diff(first_lo)).tolist():
            first_bits[b] = tm.pack_ids(order[first_lo[b]:first_lo[b + 1]])
        tm.valid_bits = tm.pack(valid)
        return tm

    def pack(self, allowed: np.ndarray) -> np.ndarray:
        """[V] bool -> [W] int32 bitmask row (bit t%32 of word t//32)."""
        a = np.zeros(self.words * 32, dtype=bool)
        a[: self.size] = allowed
        return np.packbits(a, bitorder="little").view(np.int32)

    def pack_ids(self, ids: np.ndarray) -> np.ndarray:
        a = np.zeros(self.words * 32, dtype=bool)
        a[ids] = True
        return np.packbits(a, bitorder="little").view(np.int32)

    def eos_bits(self) -> np.ndarray:
        return self.pack_ids(np.array(self.eos, dtype=np.int64))

    def token_of_bytes(self, data: bytes) -> int | None:
        """A valid token id whose bytes are exactly ``data``, or None. Of several, the lowest id
        that is not a byte-fallback token: SentencePiece vocabularies (Gemma, Llama) hold
        ``<0x22>`` as well as the piece ``"``, and a tokenizer emits the fallback only for bytes
        no piece covers, so proposing it would be a tokenisation the model never chooses."""
        if self._by_bytes is None:
            fallback = set(byte_fallback_ids(self.tokens))
            d: dict[bytes, int] = {}
            ids = np.flatnonzero(self.valid).tolist()
            for i in [i for i in ids if i not in fallback] + [i for i in ids if i in fallback]:
                d.setdefault(self.tokens[i], i)
            self._by_bytes = d
        return self._by_bytes.get(data)

    def tokenize_forced(self, forced: bytes, advance: Callable[[Hashable, int], Hashable | None],
                        state: Hashable) -> list[int]:
        """Greedy longest-token tokenisation of ``forced`` that ``advance`` allows step by step."""
        out: list[int] = []
        i, lmax = 0, self.max_len
        while i < len(forced):
            for n in range(min(lmax, len(forced) - i), 0, -1):
                t = self.token_of_bytes(forced[i:i + n])
                if t is None:
                    continue
                nxt = advance(state, t)
                if nxt is not None:
                    out.append(t)
                    state = nxt
                    i += n
                    break
            else:
                break
        return out


_TM_CACHE: dict[str, TokenMatrix] = {}


def byte_classes(trans: np.ndarray) -> np.ndarray:
    """[256] int: bytes with identical columns in ``trans`` [S, 256] get one class id, so from any
    state they lead to the same state (and a search over bytes needs one byte per class)."""
    _, inverse = np.unique(np.ascontiguousarray(trans.T), axis=0, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)


def byte_fallback_ids(tokens: Sequence[bytes]) -> range:
    """The ids of a SentencePiece byte-fallback block: 256 consecutive tokens ``<0x00>`` ..
    ``<0xFF>``, whose bytes are exactly 0x00 .. 0xFF in order (empty range if there is none)."""
    for i, t in enumerate(tokens):
        if t == b"\x00" and i + 256 <= len(tokens) and all(tokens[i + k] == bytes([k]) for k in range(256)):
            return range(i, i + 256)
    return range(0)


def scaled(trans: np.ndarray) -> np.ndarray:
    """[S * 256] int64 ``trans`` with states scaled by 256 (-1: no transition), so that in ``_walk``
    (state, byte) -> next is one add and one gather. Built once per table, not per walk."""
    return np.where(trans >= 0, trans.astype(np.int64) << 8, -1).reshape(-1)


def _walk(t256: np.ndarray, start: int | np.ndarray, lengths: np.ndarray, tm: "TokenMatrix", base: np.ndarray,
          j0: int = 0) -> tuple[np.ndarray, ...]:
    """Run a DFA (``scaled(trans)``) from ``start`` over ``len(lengths)`` byte strings of the
    token matrix at once.

    Byte ``j`` of string ``i`` is ``tm.mat_t.flat[base[i] + j * N]`` (N = tokens in the matrix):
    ``base`` is a token's column for whole tokens, ``pos * N + column`` for a rest from ``pos``.
    Returns (end: state after the whole string, -1 if it died; bpos: index of the first byte with
    no transition, -1 if none; bstate: the state before that byte), each int32, and bbyte
    (uint8: that byte, where a crossing token's rest begins). One gather per byte column; strings
    leave the working set as soon as they end or die. ``start`` may be one state per string, and
    ``j0`` > 0 resumes the strings at byte ``j0`` (the bytes before it already consumed).
    """
    n = len(lengths)
    end = np.full(n, -1, dtype=np.int32)
    bpos = np.full(n, -1, dtype=np.int32)
    bst = np.full(n, -1, dtype=np.int32)
    bbyte = np.zeros(n, dtype=np.uint8)
    flat = tm.mat_t.reshape(-1)
    stride = tm.mat_t.shape[1]
    idx = np.arange(n, dtype=np.int64)
    cs = np.broadcast_to(np.asarray(start, dtype=np.int64) << 8, (n,)).copy()
    lens = np.asarray(lengths)
    at = np.asarray(base, dtype=np.int64) + j0 * stride
    j = j0
    while len(idx):
        fin = lens == j
        if fin.any():
            end[idx[fin]] = cs[fin] >> 8
            keep = ~fin
            idx, cs, lens, at = idx[keep], cs[keep], lens[keep], at[keep]
            if not len(idx):
                break
        col = flat.take(at)
        nxt = t256.take(cs + col)
        dead = nxt < 0
        if dead.any():
            di = idx[dead]
            bpos[di] = j
            bst[di] = cs[dead] >> 8
            bbyte[di] = col[dead]
            keep = ~dead
            idx, cs, lens, at = idx[keep], nxt[keep], lens[keep], at[keep]
        else:
            cs = nxt
        at += stride
        j += 1
    return end, bpos, bst, bbyte


# (state after the first byte, first byte) -> ((ids, end, bpos, bstate, bbyte) batch, lo, hi); and
# _SCALED -> scaled(trans), shared like the buckets.
WalkMemo = dict
_SCALED = "scaled"


def walk_live(trans: np.ndarray, start: int, tm: TokenMatrix, memo: WalkMemo | None = None) -> tuple[np.ndarray, ...]:
    """Run ``trans`` from ``start`` over every token whose first byte has a transition.

    Returns (ids [n] int64, end, bpos, bstate, bbyte) with ``_walk``'s meaning. Tokens whose first byte
    is dead are not listed (see ``dead_first_bits``): in most lexer states that is nearly the
    whole vocabulary, so this costs O(tokens walked), not O(V).

    ``memo`` shares work between states: after the first byte ``b`` a token's walk depends only
    on ``u = trans[start, b]``, and many states agree on ``u`` (every lexer's start state enters
    the same %ignore'd-whitespace state on b" ", every string state the same interior state), so
    each (u, b) bucket is walked once per table build.
    """
    live = np.flatnonzero(trans[start] >= 0)
    if memo is None:
        memo = {}
    t256 = memo.get(_SCALED)
    if t256 is None:
        t256 = memo[_SCALED] = scaled(trans)
    succ = trans[start, live]
    need = np.array([k for k, (u, b) in enumerate(zip(succ.tolist(), live.tolist())) if (u, b) not in memo],
                    dtype=np.int64)
    if len(need):
        bs = live[need]
        lo, counts = tm.first_lo[bs], tm.first_lo[bs + 1] - tm.first_lo[bs]
        n = int(counts.sum())
        pos = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(n, dtype=np.int64)  # into order
        ids = tm.order[pos]
        end, bpos, bst, bbyte = _walk(t256, np.repeat(succ[need], counts), tm.lengths[ids], tm, pos, j0=1)
        batch = (ids, end, bpos, bst, bbyte)
        stops = np.cumsum(counts).tolist()
        for u, b, lo_, hi_ in zip(succ[need].tolist(), bs.tolist(), [0] + stops[:-1], stops):
            memo[(u, b)] = (batch, lo_, hi_)  # a slice of this batch (views, not copies)
    parts: list[list] = []
    for u, b in zip(succ.tolist(), live.tolist()):
        bt, lo_, hi_ = memo[(u, b)]
        if parts and parts[-1][0] is bt and parts[-1][2] == lo_:  # adjacent slices of one batch: one copy
            parts[-1][2] = hi_
        else:
            parts.append([bt, lo_, hi_])
    if not parts:
        empty = np.zeros(0, dtype=np.int32)
        return np.zeros(0, dtype=np.int64), empty, empty.copy(), empty.copy(), np.zeros(0, dtype=np.uint8)
    if len(parts) == 1:
        bt, lo_, hi_ = parts[0]
        return tuple(x[lo_:hi_] for x in bt)
    return tuple(np.concatenate([bt[k][lo_:hi_] for bt, lo_, hi_ in parts]) for k in range(5))


def dead_first_bits(trans: np.ndarray, start: int, tm: TokenMatrix) -> np.ndarray:
    """[W] int32 packed set of the valid tokens whose first byte has no transition from ``start``."""
    live = trans[start] >= 0
    if live.sum() <= 128:
        return tm.valid_bits & ~np.bitwise_or.reduce(tm.first_bits[live], axis=0)
    return np.bitwise_or.reduce(tm.first_bits[~live], axis=0)


# ----------------------------------------------------------------------------- terminals


@dataclass(frozen=True)
class TerminalInfo:
    """What the lexer needs to know about one Lark terminal."""

    name: str
    priority: int
    is_string: bool  # Lark PatternStr (a literal) rather than PatternRE
    value: str  # the literal, or the regex source
    flags: frozenset[str]
    max_width: int
    dfa: ByteDFA


def lark_order(terms: Sequence[TerminalInfo], members: Sequence[int]) -> tuple[list[int], dict[int, list[int]]]:
    """Lark's BasicLexer order over ``members`` and its ``unless`` retyping table.

    Returns (alternation order with embedded literals removed, {regex terminal: literals it is
    retyped to when the lexeme equals them}) exactly as ``lark.lexer._create_unless`` builds them.
    """
    srt = sorted(members, key=lambda i: (-terms[i].priority, -terms[i].max_width, -len(terms[i].value),
                                         terms[i].name))
    embedded: set[int] = set()
    unless: dict[int, list[int]] = {}
    for r in srt:
        if terms[r].is_string:
            continue
        lst = []
        for s in srt:
            if not terms[s].is_string or terms[s].priority != terms[r].priority:
                continue
            if terms[r].dfa.matches(terms[s].value.encode("utf-8")):
                lst.append(s)
                if terms[s].flags <= terms[r].flags:
                    embedded.add(s)
        if lst:
            unless[r] = lst
    return [i for i in srt if i not in embedded], unless


@dataclass(eq=False)
class LexerDFA:
    """Product DFA of a terminal set; state 0 = no lexeme started (never accepting).

    ``accept[s]``: terminal a lexeme ending in ``s`` becomes (-1: none); ``completable[s]``: bitset
    of terminals reachable as ``accept`` from ``s``; ``boundary[s][T]``: 256-bit set of bytes that
    may follow a lexeme ending as ``T`` somewhere at or after ``s``; ``first``: bytes that start one.
    """

    members: tuple[int, ...]
    trans: np.ndarray  # [S, 256] int32
    accept: np.ndarray  # [S] int32
    completable: list[int]
    boundary: list[dict[int, int]]
    first: int
    # keys[s]: the product components of state s; equal keys in two lexers root identical
    # sub-automata, so their vocabulary walks are shared (``globalize``).
    keys: list[Hashable] = field(default_factory=list, repr=False)
    glob: np.ndarray | None = field(default=None, repr=False)  # [S] int32 global state ids
    rows: list[list[int]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.rows = self.trans.tolist()

    @functools.cached_property
    def scaled(self) -> np.ndarray:
        """``scaled(trans)``, for walking rests from this lexer (``continuation``)."""
        return scaled(self.trans)

    def __getstate__(self) -> dict:
        d = dict(self.__dict__)
        d.pop("rows", None)
        d.pop("scaled", None)  # derived
        return d

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        self.rows = self.trans.tolist()


def _bits(row: np.ndarray) -> int:
    """[256] bool -> Python int bitset."""
    return int.from_bytes(np.packbits(row.astype(bool), bitorder="little").tobytes(), "little")


def build_lexer_dfa(terms: Sequence[TerminalInfo], members: Sequence[int]) -> LexerDFA:
    """Subset-construction product of the members' byte DFAs, with Lark's tie resolution."""
    members = tuple(sorted(members))
    alt, unless = lark_order(terms, members)
    rank = {t: i for i, t in enumerate(alt)}

    def resolve(finals: list[int]) -> int:
        cands = [t for t in finals if t in rank]
        if not cands:
            return -1
        best = min(cands, key=rank.__getitem__)
        for s in unless.get(best, ()):
            if s in finals:
                return s
        return best

    start = tuple((t, 0) for t in members)
    ids: dict[object, int] = {("start",): 0}
    order: list[tuple[tuple[int, int], ...]] = [start]
    rows: list[np.ndarray] = []
    accept: list[int] = []
    i = 0
    while i < len(order):
        comps = order[i]
        i += 1
        finals = [t for t, s in comps if terms[t].dfa.final[s]]
        accept.append(resolve(finals) if i > 1 else -1)
        if not comps:  # a parser state that accepts only $END and no %ignore terminals
            rows.append(np.full(256, -1, dtype=np.int32))
            continue
        # Distinct columns of the components' rows, sorted (np.unique's order, which fixes the state
        # numbering); a dict of tuples is ~10x faster than np.unique(axis=0) at these sizes.
        cols = list(zip(*[terms[t].dfa.trans[s].tolist() for t, s in comps]))  # 256 column tuples
        uniq = sorted(set(cols))
        pos = {c: u for u, c in enumerate(uniq)}
        inv = np.array([pos[c] for c in cols], dtype=np.int64)
        targets = np.empty(len(uniq), dtype=np.int32)
        for u, col in enumerate(uniq):
            nxt = tuple((comps[k][0], c) for k, c in enumerate(col) if c >= 0)
            if not nxt:
                targets[u] = -1
                continue
            j = ids.get(nxt)
            if j is None:
                j = ids[nxt] = len(order)
                order.append(nxt)
            targets[u] = j
        rows.append(targets[inv])
    trans = np.stack(rows).astype(np.int32)
    acc = np.array(accept, dtype=np.int32)
    n = len(order)
    succ = [sorted(set(r.tolist()) - {-1}) for r in rows]
    dead_bytes = [_bits(trans[s] < 0) for s in range(n)]
    completable = [(1 << int(acc[s])) if acc[s] >= 0 else 0 for s in range(n)]
    boundary: list[dict[int, int]] = [{int(acc[s]): dead_bytes[s]} if acc[s] >= 0 else {} for s in range(n)]
    changed = True
    while changed:
        changed = False
        for s in range(n - 1, -1, -1):
            c, b = completable[s], boundary[s]
            for u in succ[s]:
                c |= completable[u]
                for t, bb in boundary[u].items():
                    old = b.get(t, 0)
                    if old | bb != old:
                        b[t] = old | bb
                        changed = True
            if c != completable[s]:
                completable[s] = c
                changed = True
    keys: list[Hashable] = [("start", order[0])] + order[1:]
    return LexerDFA(members, trans, acc, completable, boundary, _bits(trans[0] >= 0), keys)


def globalize(lexers: Sequence[LexerDFA]) -> tuple[np.ndarray, np.ndarray]:
    """Number the states of all lexers by their keys; set each ``lex.glob``.

    Returns (gtrans [G, 256] int32, gfinal [G] bool). A state's transitions depend only on its
    product components, so one global table serves every lexer; ``accept >= 0`` exactly when some
    component is final (an embedded literal's regex is final on the same lexeme), so it is global
    too. On json.lark the 417 lexer states are 123 global ones, sql_select.lark 1671 -> 308.
    """
    gid: dict[Hashable, int] = {}
    for lex in lexers:
        lex.glob = np.array([gid.setdefault(k, len(gid)) for k in lex.keys], dtype=np.int32)
    gtrans = np.full((len(gid), 256), -1, dtype=np.int32)
    gfinal = np.zeros(len(gid), dtype=bool)
    for lex in lexers:
        g = lex.glob
        gtrans[g] = np.where(lex.trans >= 0, g[lex.trans], -1)
        gfinal[g] = lex.accept >= 0
    return gtrans, gfinal


# ----------------------------------------------------------------------------- per-state tables


@dataclass(eq=False)
class WalkTable:
    """The vocabulary walked from one global lexer state (the context-independent split).

    ``inside``: (global end state, packed tokens) — tokens that stay inside the current lexeme;
    ``first_dead``: packed tokens whose first byte cannot extend the lexeme; ``cross_*``: tokens
    whose lexeme ends, complete, before a later byte (ids, that byte's position >= 1, global state
    before it, the byte). Every other token is rejected in this state whatever the stack.
    """

    inside: list[tuple[int, np.ndarray]]
    first_dead: np.ndarray | None
    cross_ids: np.ndarray  # [C] int32
    cross_pos: np.ndarray  # [C] int16
    cross_state: np.ndarray  # [C] int32
    cross_byte: np.ndarray  # [C] uint8 the byte at ``cross_pos`` (where the rest begins)


def _grouped(keys: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(key, indices into ``keys``) per distinct key, ascending, indices in their original order:
    one stable sort, not a pass over ``keys`` per key."""
    if not len(keys):
        return []
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    cuts = [0, *(np.flatnonzero(k[1:] != k[:-1]) + 1).tolist(), len(k)]
    return [(int(k[a]), order[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]


def walk_table(gtrans: np.ndarray, gfinal: np.ndarray, g: int, tm: TokenMatrix,
               memo: WalkMemo | None = None) -> WalkTable:
    ids, end, bpos, bst, bbyte = walk_live(gtrans, g, tm, memo)
    ok = np.flatnonzero(end >= 0)
    inside = [(u, tm.pack_ids(ids[ok[ix]])) for u, ix in _grouped(end[ok])]
    first_dead = dead_first_bits(gtrans, g, tm) if gfinal[g] else None
    sel = bpos >= 1
    sel[sel] = gfinal[bst[sel]]
    # Narrow dtypes: the crossing arrays are most of a table on disk (~137k entries per state
    # that can begin a whitespace lexeme on Gemma's vocabulary).
    return WalkTable(inside, first_dead, ids[sel].astype(np.int32), bpos[sel].astype(np.int16), bst[sel],
                     bbyte[sel])


def state_table(lex: LexerDFA, d: int, w: WalkTable, local: np.ndarray, cross: dict[int, "Rests"]) -> StateTable:
    """Rename ``w`` (the walk of ``lex``'s state ``d``) into ``lex``; ``local``: [G] global -> local;
    ``cross``: ``w``'s crossing tokens split by terminal (``split_crossing``, shared by lexers)."""
    inside = [(int(local[u]), bits) for u, bits in w.inside]
    group0 = w.first_dead if lex.accept[d] >= 0 else None
    return StateTable(inside, group0, cross)


def global_accept(lexers: Sequence[LexerDFA], n: int) -> np.ndarray:
    """[G] the terminal each global state's lexeme becomes (-1: none).

    It is the same in every lexer holding the state: resolution ranks the final components by
    Lark's key (priority, width, length, name) and ``unless`` retypes to a literal that is itself
    final, neither of which depends on the other members. Checked here all the same, because the
    crossing-token split is shared between lexers on this basis."""
    acc = np.full(n, -2, dtype=np.int32)
    for lex in lexers:
        seen = acc[lex.glob]
        if ((seen != -2) & (seen != lex.accept)).any():
            raise AssertionError("a global lexer state resolves to different terminals in two lexers")
        acc[lex.glob] = lex.accept
    return acc


@dataclass(eq=False)
class Rests:
    """Boundary-crossing tokens, where their rests begin and each rest's first byte, so that a
    next lexer walks only the rests its start state can begin (after a whitespace lexeme that is
    ~137k Gemma tokens, of which a JSON value lexer can begin a few thousand).

    ``after[lexer]`` caches the ``Continuation`` of these rests in that lexer.
    """

    ids: np.ndarray  # [C] int32
    pos: np.ndarray  # [C] int16
    first: np.ndarray  # [C] uint8
    after: dict[int, "Continuation"] = field(default_factory=dict)

def split_crossing(w: WalkTable, gaccept: np.ndarray) -> dict[int, Rests]:
    """``w``'s crossing tokens by the terminal their lexeme becomes."""
    terms = gaccept[w.cross_state]
    if not len(terms):
        return {}
    counts = np.bincount(terms)  # few distinct terminals, one dominant (whitespace): no sort
    out = {}
    for t in np.flatnonzero(counts).tolist():
        if counts[t] == len(terms):
            return {t: Rests(w.cross_ids, w.cross_pos, w.cross_byte)}
        k = np.flatnonzero(terms == t)
        out[t] = Rests(w.cross_ids[k], w.cross_pos[k], w.cross_byte[k])
    return out


@dataclass(eq=False)
class StateTable:
    """A ``WalkTable`` seen from one lexer state: local end states, and crossing tokens grouped
    by the terminal their lexeme becomes in this lexer.

    ``inside``: (end state, packed tokens); ``group0``: packed tokens whose first byte ends the
    current (complete) lexeme; ``cross[T]``: the tokens whose lexeme ends as ``T`` before a later
    byte, with their rests (shared by every lexer state of the same global state).
    """

    inside: list[tuple[int, np.ndarray]]
    group0: np.ndarray | None
    cross: dict[int, Rests]


@dataclass(eq=False)
class Continuation:
    """Rests of boundary-crossing tokens walked from a lexer's start state.

    ``groups``: (end state, token ids) of rests that end inside that next lexeme; ``cross[T]``:
    the rests whose lexeme ends again, as ``T`` (with the rests after that boundary). The others
    are rejected.
    """

    groups: list[tuple[int, np.ndarray]]
    cross: dict[int, Rests]


def continuation(lex: LexerDFA, rests: Rests, tm: TokenMatrix) -> Continuation:
    """Walk ``tokens[ids[i]][pos[i]:]`` from ``lex``'s start state (one numpy pass over the rests
    whose first byte ``lex`` can begin with; the others die at once).

    The rests are read straight from the token matrix (byte ``pos + j`` of each token's column):
    joining ~100k rests in Python made a first visit cost 0.3-0.6 s."""
    start = lex.trans[0][rests.first]
    sel = np.flatnonzero(start >= 0)
    if not len(sel):
        return Continuation([], {})
    ids, pos = rests.ids[sel], rests.pos[sel].astype(np.int64)
    start = start[sel]
    end, bpos, bst, bbyte = _walk(lex.scaled, start, tm.lengths[ids].astype(np.int64) - pos, tm,
                                  pos * tm.mat_t.shape[1] + tm.rank[ids], j0=1)
    ok = np.flatnonzero(end >= 0)
    groups = [(u, ids[ok[ix]]) for u, ix in _grouped(end[ok])]
    again = bpos >= 1
    again[again] = lex.accept[bst[again]] >= 0
    terms = lex.accept[bst[again]]
    ids2, pos2, first2 = ids[again], (pos[again] + bpos[again]).astype(np.int16), bbyte[again]
    cross = {t: Rests(ids2[ix], pos2[ix], first2[ix]) for t, ix in _grouped(terms)}
    return Continuation(groups, cross)
