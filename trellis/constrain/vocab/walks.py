"""The vocabulary as a byte matrix, walked through byte DFAs with numpy.

``TokenMatrix`` holds the vocabulary as a byte matrix bucketed by first byte. ``walk_live`` runs a
DFA from one state over every token at once (those whose first byte is live), one byte column at a
time, and reports where each token ends or first leaves the lexeme; ``walk_tokens`` walks given
strings from given states. Both engines build on these: the Earley engine's rest walks
(``rest_walk.py``) and the LALR engine's per-lexer-state tables (``lalr/lalr_walks.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Hashable, Sequence

import numpy as np

from trellis.tokens import Vocabulary

# ``walkc``: the C kernel module (setup.py builds it; an install without a compiler runs the numpy
# walks), or None.
try:
    from trellis.constrain.vocab import _walkc as walkc
except ImportError:  # pragma: no cover - depends on the install
    walkc = None
if os.environ.get("TRELLIS_WALK_KERNEL", "").lower() == "numpy":
    walkc = None
# Which implementation runs the walks: "c" or "numpy" (equal results, element for element:
# tests/constrain/test_walk_kernel.py). ``TRELLIS_WALK_KERNEL=numpy`` forces numpy.
KERNEL = "c" if walkc is not None else "numpy"


def c_int64(a: np.ndarray) -> np.ndarray:
    return a if a.dtype == np.int64 and a.flags.c_contiguous else np.ascontiguousarray(a, dtype=np.int64)


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
    def cached(cls, vocab: Vocabulary) -> "TokenMatrix | None":
        """The token matrix of ``vocab`` if this process has one, else None (nothing is built)."""
        return _TM_CACHE.get(vocab.fingerprint())

    # What a token matrix holds besides the token bytes: its fields and the per-vocabulary tables
    # cached on it (``_trie``, ``_sorted_vocab``, ``_vocab_rests``, ``_rows``, ``_slices``), the
    # form ``vocab/tables.py`` keeps on disk.
    FIELDS = ("size", "lengths", "valid", "order", "mat_t", "first_lo", "first_bits", "valid_bits", "rank", "eos")

    def tables(self) -> dict:
        """Everything this matrix holds but the token bytes (``restore`` takes it back)."""
        return {k: v for k, v in self.__dict__.items() if k != "tokens"}

    @classmethod
    def restorable(cls, tables: dict) -> bool:
        return all(k in tables for k in cls.FIELDS)

    @classmethod
    def restore(cls, vocab: Vocabulary, tables: dict) -> "TokenMatrix":
        """The token matrix of ``vocab`` from ``tables()`` of one built for the same vocabulary (the
        caller keys them by ``vocab.fingerprint()``), registered as ``of(vocab)``'s."""
        tm = object.__new__(cls)
        tm.__dict__.update(tables)
        tm.tokens = vocab.tokens
        tm._by_bytes = tables.get("_by_bytes")
        _TM_CACHE[vocab.fingerprint()] = tm
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
        """[W] int32 bitmask row of the token ids ``ids``."""
        if walkc is None:
            a = np.zeros(self.words * 32, dtype=bool)
            a[ids] = True
            return np.packbits(a, bitorder="little").view(np.int32)
        # One C pass over the ids instead of a 262k-byte bool array packed per call (~77 us a
        # call on Gemma's vocabulary, 375 calls in 30 fresh corpus documents).
        out = np.zeros(self.words, dtype=np.int32)
        walkc.set_bits(out, c_int64(ids))
        return out

    def pack_where(self, ids: np.ndarray, flags: np.ndarray) -> np.ndarray:
        """``pack_ids(ids[flags])`` for a bool ``flags`` per id (a walk's ``inside`` over a rest
        set's ``tid``). Where a quarter or more are kept, in C without the boolean gather, one
        pass over every flag: on Gemma's vocabulary a 30-character string's interior (143k tokens
        kept) packs in 0.62 ms instead of 1.38, a JSON string's (254k) in 0.45 instead of 0.75;
        a few kept (12.6k) stay with the gather (0.07 ms against the pass's 0.47)."""
        if (walkc is None or len(flags) != len(ids) or flags.dtype != np.bool_
                or np.count_nonzero(flags) * 4 < len(flags)):
            return self.pack_ids(ids[flags])
        out = np.zeros(self.words, dtype=np.int32)
        walkc.set_bits(out, c_int64(ids), np.ascontiguousarray(flags))
        return out

    def sparse_ids(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``pack_ids(ids)`` as (indices of its nonzero words [int32], their values [int32]): the
        end-state groups of a table hold a few tokens each (sql_select: median 3 nonzero words of
        8,192 on Gemma), so dense rows were 47 MB of one table file, and OR-ing them cost more."""
        if len(ids) > self.words // 2:  # many: sorting costs more than one dense pass
            bits = self.pack_ids(ids)
            w = np.flatnonzero(bits).astype(np.int32)
            return w, bits[w]
        if not len(ids):
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32)
        ids = np.sort(np.asarray(ids, dtype=np.int64))
        w = ids >> 5
        heads = np.flatnonzero(np.concatenate([[True], w[1:] != w[:-1]]))
        vals = np.bitwise_or.reduceat(np.left_shift(1, ids & 31).astype(np.uint32), heads)
        return w[heads].astype(np.int32), vals.view(np.int32)

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


def sparse_words(packed: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The indices and values of a packed row's nonzero words, or None where over ``limit``:
    OR-ed into a mask word by word instead of whole (a key literal's tokens lie in a few of Gemma's
    8,192 words; ``scannerless.SPARSE_ROWS``)."""
    nz = (packed != 0).nonzero()[0]  # (np.flatnonzero of int32: ~12 us on Gemma's row, this ~2)
    return (nz, packed[nz]) if len(nz) <= limit else None


def byte_fallback_ids(tokens: Sequence[bytes]) -> range:
    """The ids of a SentencePiece byte-fallback block: 256 consecutive tokens ``<0x00>`` ..
    ``<0xFF>``, whose bytes are exactly 0x00 .. 0xFF in order (empty range if there is none)."""
    for i, t in enumerate(tokens):
        if t == b"\x00" and i + 256 <= len(tokens) and all(tokens[i + k] == bytes([k]) for k in range(256)):
            return range(i, i + 256)
    return range(0)


def scaled(trans: np.ndarray) -> np.ndarray:
    """[(S + 1) * 256] int32 ``trans`` with states scaled by 256, so that in ``walk_tokens`` (state, byte)
    -> next is one add and one gather; a missing transition leads to an absorbing sink state ``S``
    (``_sink(t256)``), so a walk needs no branch per byte. Built once per table, not per walk."""
    s = trans.shape[0]
    if (s + 1) << 8 > np.iinfo(np.int32).max:
        raise ValueError(f"a lexer DFA of {s} states is too large")
    t = np.where(trans >= 0, trans, s).astype(np.int32)
    return (np.vstack([t, np.full((1, trans.shape[1]), s, dtype=np.int32)]) << 8).reshape(-1)


def _sink(t256: np.ndarray) -> int:
    """The scaled sink state of a ``scaled`` table."""
    return len(t256) - 256


def _running(lens: np.ndarray) -> np.ndarray:
    """[max + 1]: how many of ``lens`` (descending) exceed j, i.e. the strings still running at byte j."""
    return np.searchsorted(-lens, -np.arange(int(lens[0]) + 1, dtype=np.int16), side="left")


def walk_tokens(t256: np.ndarray, start: int | np.ndarray, lengths: np.ndarray, tm: "TokenMatrix", base: np.ndarray,
          j0: int = 0) -> tuple[np.ndarray, ...]:
    """Run a DFA (``scaled(trans)``) from ``start`` over ``len(lengths)`` byte strings of the
    token matrix at once.

    Byte ``j`` of string ``i`` is ``tm.mat_t.flat[base[i] + j * N]`` (N = tokens in the matrix):
    ``base`` is a token's column for whole tokens, ``pos * N + column`` for a rest from ``pos``.
    Returns (end: state after the whole string, -1 if it died; bpos: index of the first byte with
    no transition, -1 if none; bstate: the state before that byte), each int32, and bbyte
    (uint8: that byte, where a crossing token's rest begins). ``start`` may be one state per
    string, and ``j0`` > 0 resumes the strings at byte ``j0`` (the bytes before it consumed).

    The strings are walked longest first, so the ones still running at byte ``j`` are a prefix of
    the working arrays (a slice, not a compaction per byte); dead ones fall into the sink state
    and are compacted away only once they are the majority. Two gathers per byte column: half
    the time of compacting every column (a Gemma walk of ~137k rests, 1.1 MB: 15 -> 7 ms).
    """
    n = len(lengths)
    end = np.full(n, -1, dtype=np.int32)
    bpos = np.full(n, -1, dtype=np.int32)
    bst = np.full(n, -1, dtype=np.int32)
    bbyte = np.zeros(n, dtype=np.uint8)
    if not n:
        return end, bpos, bst, bbyte
    sink = _sink(t256)
    flat = tm.mat_t.reshape(-1)
    stride = tm.mat_t.shape[1]
    lens = np.asarray(lengths).astype(np.int16)  # tokens are <= 32767 bytes (TokenMatrix)
    idx = np.argsort(-lens, kind="stable")  # radix sort on int16
    lens = lens[idx]
    cs = np.broadcast_to(np.asarray(start, dtype=np.int32), (n,))[idx] << 8
    at = np.asarray(base, dtype=np.int64)[idx] + j0 * stride
    at = at.astype(np.int32) if flat.size + stride < 2**31 else at
    running = _running(lens)
    live = n
    dead = 0  # sink states among cs[:live]
    for j in range(j0, int(lens[0]) + 1):
        r = int(running[j])
        if r < live:  # strings of length j end here
            e = cs[r:live]
            end[idx[r:live]] = np.where(e == sink, -1, e >> 8)
            if dead:
                dead -= int(np.count_nonzero(e == sink))
            live = r
            if not live:
                break
        if dead > (live >> 1):  # compact: keeps the length order
            keep = np.flatnonzero(cs[:live] != sink)
            idx, cs, at, lens = idx[keep], cs[keep], at[keep], lens[keep]
            live, dead = len(keep), 0
            if not live:
                break
            running = _running(lens)
        c = cs[:live]
        col = flat.take(at[:live])
        nxt = t256.take(c + col)
        died = int(np.count_nonzero(nxt == sink))
        if died > dead:
            new = np.flatnonzero((nxt == sink) & (c != sink))
            o = idx[new]
            bpos[o] = j
            bst[o] = c[new] >> 8
            bbyte[o] = col[new]
            dead = died
        cs[:live] = nxt
        at[:live] += stride
    return end, bpos, bst, bbyte


# (state after the first byte, first byte) -> ((ids, end, bpos, bstate, bbyte) batch, lo, hi); and
# _SCALED -> scaled(trans), shared like the buckets.
WalkMemo = dict
_SCALED = "scaled"


def walk_live(trans: np.ndarray, start: int, tm: TokenMatrix, memo: WalkMemo | None = None) -> tuple[np.ndarray, ...]:
    """Run ``trans`` from ``start`` over every token whose first byte has a transition.

    Returns (ids [n] int64, end, bpos, bstate, bbyte) with ``walk_tokens``'s meaning. Tokens whose first byte
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

    def items(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # positions in tm.order
        ids = tm.order[pos]
        return ids, tm.lengths[ids], pos

    return walk_buckets(t256, trans[start, live], live, tm.first_lo, items, tm, memo)


def walk_buckets(t256: np.ndarray, succ: np.ndarray, bs: np.ndarray, lo: np.ndarray,
                  items: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]], tm: TokenMatrix,
                  memo: dict) -> tuple[np.ndarray, ...]:
    """Walk the strings of first-byte buckets ``bs`` (bucket ``b`` = positions ``lo[b]:lo[b+1]``
    of some ordering), those of bucket ``b`` from state ``succ[k]`` (after their first byte).
    ``items(positions)`` gives (what to report, lengths, ``walk_tokens`` bases). ``memo[(u, b)]`` keeps
    each bucket's walk (a slice of one batch), so states and lexers that enter the same state on
    a byte share it. Returns (items, end, bpos, bstate, bbyte) over the buckets in order."""
    su, sb = succ.tolist(), bs.tolist()
    need = np.array([k for k, (u, b) in enumerate(zip(su, sb)) if (u, b) not in memo], dtype=np.int64)
    if len(need):
        nb = bs[need]
        first, counts = lo[nb], lo[nb + 1] - lo[nb]
        n = int(counts.sum())
        pos = np.repeat(first - np.cumsum(counts) + counts, counts) + np.arange(n, dtype=np.int64)
        what, lengths, base = items(pos)
        end, bpos, bst, bbyte = walk_tokens(t256, np.repeat(succ[need], counts), lengths, tm, base, j0=1)
        batch = (what, end, bpos, bst, bbyte)
        stops = np.cumsum(counts).tolist()
        for u, b, a, z in zip(succ[need].tolist(), nb.tolist(), [0] + stops[:-1], stops):
            memo[(u, b)] = (batch, a, z)  # a slice of this batch (views, not copies)
    parts: list[list] = []
    for u, b in zip(su, sb):
        bt, a, z = memo[(u, b)]
        if parts and parts[-1][0] is bt and parts[-1][2] == a:  # adjacent slices of one batch: one copy
            parts[-1][2] = z
        else:
            parts.append([bt, a, z])
    if not parts:
        empty = np.zeros(0, dtype=np.int32)
        return np.zeros(0, dtype=np.int64), empty, empty.copy(), empty.copy(), np.zeros(0, dtype=np.uint8)
    if len(parts) == 1:
        bt, a, z = parts[0]
        return tuple(x[a:z] for x in bt)
    return tuple(np.concatenate([bt[k][a:z] for bt, a, z in parts]) for k in range(5))


def dead_first_bits(trans: np.ndarray, start: int, tm: TokenMatrix) -> np.ndarray:
    """[W] int32 packed set of the valid tokens whose first byte has no transition from ``start``."""
    live = trans[start] >= 0
    if live.sum() <= 128:
        return tm.valid_bits & ~np.bitwise_or.reduce(tm.first_bits[live], axis=0)
    return np.bitwise_or.reduce(tm.first_bits[~live], axis=0)



