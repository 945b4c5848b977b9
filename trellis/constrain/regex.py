"""Regular expressions -> byte-level DFAs, and the ``Regex`` constraint.

A pattern is read by Python's own regex parser and built into a byte NFA over UTF-8
(``regex_compile.py``: every character set, flags included, exactly as ``re`` matches it), then
determinised and trimmed (states that cannot reach an accepting state are removed, so every live
state can still be completed). Tokens may therefore end in the middle of a UTF-8 character. The
DFA is then minimised (Moore refinement on hashed signatures, checked as a bisimulation).

The language is ``re.fullmatch``'s, with Unicode ``\\w \\d \\s`` and every flag (``i`` ``s`` ``x``
``m`` ``a`` ``u``), and lookarounds that see only the match (``lookaround.py``). Refused with
``GrammarError`` naming the feature: a lookaround that can see past either end of the match,
backreferences, anchors (``^``, ``$``, ``\\b``, ``\\A``, ``\\Z``), conditional and atomic groups,
possessive quantifiers.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Hashable

import numpy as np
import torch
from torch import Tensor

from trellis.constrain.errors import GrammarError
from trellis.constrain.regex_compile import Lookaround, RegexTooLarge, RegexUnsupported, regex_nfa
from trellis.tokens import Vocabulary

_SURROGATES = (0xD800, 0xDFFF)


@dataclass(frozen=True, eq=False)
class ByteDFA:
    """A trimmed byte DFA: ``trans`` int32 [S, 256] (-1 = dead), ``final`` bool [S]; start state 0.

    Every state can reach an accepting state (dead states are pruned at construction).
    """

    trans: np.ndarray  # [S, 256] int32
    final: np.ndarray  # [S] bool

    @property
    def num_states(self) -> int:
        return int(self.trans.shape[0])

    def matches(self, data: bytes) -> bool:
        s = 0
        for b in data:
            s = int(self.trans[s, b])
            if s < 0:
                return False
        return bool(self.final[s])


# ----------------------------------------------------------------------------- UTF-8 ranges


def _split_utf8(lo: int, hi: int, out: list[list[tuple[int, int]]]) -> None:
    """Append byte-range sequences whose concatenations encode exactly the codepoints [lo, hi]."""
    for bound in (0x7F, 0x7FF, 0xFFFF):
        if lo <= bound < hi:
            _split_utf8(lo, bound, out)
            _split_utf8(bound + 1, hi, out)
            return
    if hi <= 0x7F:
        out.append([(lo, hi)])
        return
    n = len(chr(lo).encode("utf-8"))
    for i in range(1, n):
        m = (1 << (6 * i)) - 1
        if (lo & ~m) != (hi & ~m):
            if lo & m:
                _split_utf8(lo, lo | m, out)
                _split_utf8((lo | m) + 1, hi, out)
                return
            if (hi & m) != m:
                _split_utf8(lo, (hi & ~m) - 1, out)
                _split_utf8(hi & ~m, hi, out)
                return
    a, b = chr(lo).encode("utf-8"), chr(hi).encode("utf-8")
    out.append(list(zip(a, b)))


def codepoint_ranges_to_utf8(ranges: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Codepoint ranges (inclusive, surrogates skipped) -> byte-range sequences."""
    out: list[list[tuple[int, int]]] = []
    for lo, hi in ranges:
        pieces = [(lo, hi)]
        if lo <= _SURROGATES[1] and hi >= _SURROGATES[0]:
            pieces = [(lo, _SURROGATES[0] - 1), (_SURROGATES[1] + 1, hi)]
        for a, b in pieces:
            if a <= b:
                _split_utf8(a, b, out)
    return out


# ----------------------------------------------------------------------------- pattern checks

_REWRITES = {
    # lark's common.ESCAPED_STRING uses a lookbehind and a lazy quantifier; this is the same
    # language with no lookaround (the closing quote is the first unescaped one).
    r'".*?(?<!\\)(\\\\)*?"': r'"(?:[^"\\\n]|\\[^\n])*"',
    r'"(?:.*?)(?<!\\)(?:\\\\)*?"': r'"(?:[^"\\\n]|\\[^\n])*"',
}


DFA_MEMO: dict[str, ByteDFA] = {}  # pattern -> DFA; generated grammars repeat terminals
_DFA_MEMO_MAX = 4096
# Subset states past which a regex is refused by name rather than determinised for minutes. The
# largest real terminal seen is ~20k states (``[a-zA-Z_]\w{0,63}`` with Unicode ``\w``: 0.7 s);
# random nestings of overlapping Unicode classes reach millions (one took 141 s for 88k states).
MAX_DFA_STATES = 100_000


def literal_dfa(data: bytes) -> ByteDFA:
    """The chain DFA matching exactly ``data`` (non-empty); what interegular would build for
    ``re.escape(text)``, without the ~2 ms of parsing and determinising per literal."""
    n = len(data)
    trans = np.full((n + 1, 256), -1, dtype=np.int32)
    trans[np.arange(n), np.frombuffer(data, dtype=np.uint8)] = np.arange(1, n + 1, dtype=np.int32)
    final = np.zeros(n + 1, dtype=bool)
    final[n] = True
    return ByteDFA(trans, final)


def regex_to_byte_dfa(pattern: str, *, name: str = "regex") -> ByteDFA:
    """Compile a Python-syntax regex into a trimmed ``ByteDFA`` over UTF-8 bytes (memoised per
    process: DFAs are never mutated, and a failure is raised again, with this ``name``)."""
    dfa = DFA_MEMO.get(pattern)
    if dfa is None:
        dfa = _regex_to_byte_dfa(pattern, name=name)
        dfa.trans.setflags(write=False)  # shared from now on
        dfa.final.setflags(write=False)
        if len(DFA_MEMO) >= _DFA_MEMO_MAX:
            DFA_MEMO.clear()
        DFA_MEMO[pattern] = dfa
    return dfa


def _regex_to_byte_dfa(pattern: str, *, name: str) -> ByteDFA:
    trans, final, guards = _automaton(_REWRITES.get(pattern, pattern), name=name)
    if guards is not None and any(g is not None for g in guards):  # only a terminal has text after it
        raise GrammarError(f"{name}: regex feature not supported (lookahead that can see past the end of the "
                           f"match) in /{pattern}/")
    return _minimal(trans, final, name=name, pattern=pattern)


def _automaton(pattern: str, *, name: str, ordered: bool = False) -> tuple[np.ndarray, np.ndarray, list | None]:
    """(trans, final, guards) of ``pattern`` (not minimal): the plain subset construction, or the
    lookaround one (``lookaround.automaton``) where the regex has a lookaround or ``ordered``
    asks for the first-match language; ``guards`` (per state, a ``FollowGuard`` or None) comes
    from the latter only. Every failure is a ``GrammarError`` naming ``name``."""
    import re

    from trellis.constrain.lookaround import automaton

    try:
        if ordered:
            return automaton(pattern, ordered=True)
        try:
            edges, finals = regex_nfa(pattern)
        except Lookaround:
            return automaton(pattern)
        # chains such as flexible JSON whitespace are deterministic already
        det = _already_deterministic(edges, finals, 0)
        trans, final = det if det is not None else subset_construction(edges, finals, 0)
        return trans, final, None
    except RegexTooLarge as e:  # from any stage: the NFA, the subsets, the lookaround automaton
        raise GrammarError(f"{name}: regex too large ({e}) in /{pattern}/") from None
    except RegexUnsupported as e:
        raise GrammarError(f"{name}: regex feature not supported ({e}) in /{pattern}/") from None
    except (re.error, OverflowError, RecursionError) as e:
        raise GrammarError(f"{name}: invalid regex ({e}) in /{pattern}/") from None


def _determinise(edges: list[list[tuple[int, int, int]]], finals: set[int], start: int, *,
                 name: str, pattern: str) -> ByteDFA:
    return _minimal(*subset_construction(edges, finals, start), name=name, pattern=pattern)


def subset_construction(edges: list[list[tuple[int, int, int]]], finals: set[int],
             start: int) -> tuple[np.ndarray, np.ndarray]:
    """Subset construction: (trans [S, 256], final [S]), states numbered breadth-first."""
    key0 = frozenset([start])
    ids: dict[frozenset[int], int] = {key0: 0}
    order = [key0]
    # Rows are built as runs of bytes every edge treats alike (target, run length): the NFAs hold
    # byte ranges (a linear pattern's states a few each), and 256 Python steps per state, then a
    # list-of-lists -> array conversion, were most of determinising flexible-whitespace chains.
    runs_to: list[int] = []
    runs_len: list[int] = []

    def target(k: frozenset[int]) -> int:
        j = ids.get(k)
        if j is None:
            if len(order) >= MAX_DFA_STATES:
                raise RegexTooLarge(f"its DFA passes {MAX_DFA_STATES:,} states")
            j = ids[k] = len(order)
            order.append(k)
        return j

    i = 0
    while i < len(order):
        cur = order[i]
        i += 1
        # Sweep the edges' endpoints once (O(E log E) a state): Unicode classes give states
        # hundreds of edges, where testing every edge at every cut was quadratic.
        events = sorted([(lo, 1, dst) for node in cur for lo, _, dst in edges[node]]
                        + [(hi + 1, -1, dst) for node in cur for _, hi, dst in edges[node]])
        active: dict[int, int] = {}
        pos = 0
        k = 0
        while k < len(events):
            at = events[k][0]
            if at > pos:
                runs_to.append(target(frozenset(active)) if active else -1)
                runs_len.append(at - pos)
                pos = at
            while k < len(events) and events[k][0] == at:
                _, d, dst = events[k]
                c = active.get(dst, 0) + d
                if c:
                    active[dst] = c
                else:
                    del active[dst]
                k += 1
        if pos < 256:
            runs_to.append(-1)
            runs_len.append(256 - pos)
    return _run_table(runs_to, runs_len), np.array([bool(k & finals) for k in order], dtype=bool)


def _run_table(runs_to: list[int], runs_len: list[int]) -> np.ndarray:
    """[S, 256] int32 transitions from each row's byte runs (target, length), rows back to back."""
    return np.repeat(np.array(runs_to, dtype=np.int32), runs_len).reshape(-1, 256)


def _already_deterministic(edges: list[list[tuple[int, int, int]]], finals: set[int],
                           start: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The NFA as a DFA table when no state has two edges on one byte, else None: what
    ``subset_construction`` would build (states numbered in the same breadth-first, byte-ascending
    order, each subset a single state), without its per-state Python work. Linear patterns whose
    items cannot overlap are such NFAs (``[ \t\n\r]{0,64},[ \t\n\r]{0,64}``: 130 states)."""
    srt = []
    for es in edges:
        es = sorted(es)
        if any(b[0] <= a[1] for a, b in zip(es, es[1:])):
            return None
        srt.append(es)
    num = {start: 0}
    order = [start]
    for u in order:  # grows while read: breadth-first
        for _, _, dst in srt[u]:
            if dst not in num:
                num[dst] = len(order)
                order.append(dst)
    runs_to: list[int] = []
    runs_len: list[int] = []
    for u in order:
        pos = 0
        for lo, hi, dst in srt[u]:
            if lo > pos:
                runs_to.append(-1)
                runs_len.append(lo - pos)
            runs_to.append(num[dst])
            runs_len.append(hi + 1 - lo)
            pos = hi + 1
        if pos < 256:
            runs_to.append(-1)
            runs_len.append(256 - pos)
    return _run_table(runs_to, runs_len), np.array([u in finals for u in order], dtype=bool)


def _minimal(trans: np.ndarray, final: np.ndarray, *, name: str, pattern: str) -> ByteDFA:
    """Trimmed minimal DFA of ``trans`` (every state reachable from 0)."""
    fast = _minimal_acyclic(trans, final, name=name, pattern=pattern)
    return fast if fast is not None else minimise(trim(trans, final, name=name, pattern=pattern))


def _minimal_acyclic(trans: np.ndarray, final: np.ndarray, *, name: str, pattern: str) -> ByteDFA | None:
    """``minimise(trim(trans, final))`` in one pass when the DFA (all states reachable from 0)
    has no cycle, else None. Bottom-up (Revuz): in reverse topological order a state is dead if
    it is not final and has no live successor, else its class is given by its finality and its
    successors' classes, which are final by then. Bounded repeats (``[ \t\n\r]{0,64}`` in every
    flexible-whitespace punctuation terminal) are such chains: trimming and Moore refinement
    propagate one step per round there, ~130 rounds each."""
    n = trans.shape[0]
    first, _ = unique_rows(trans.T)
    tc = trans[:, np.sort(first)].tolist()  # one column per byte class
    succ = [sorted({x for x in row if x >= 0}) for row in tc]
    indeg = [0] * n
    for ss in succ:
        for x in ss:
            indeg[x] += 1
    topo = [u for u in range(n) if indeg[u] == 0]
    for u in topo:  # Kahn's algorithm; topo grows while it is read
        for x in succ[u]:
            indeg[x] -= 1
            if indeg[x] == 0:
                topo.append(x)
    if len(topo) < n:
        return None  # a cycle: Moore refinement
    cls = [-1] * n
    ids: dict[tuple, int] = {}
    for u in reversed(topo):
        sig = (bool(final[u]), *[cls[x] if x >= 0 else -1 for x in tc[u]])
        if sig[0] or any(c >= 0 for c in sig[1:]):
            cls[u] = ids.setdefault(sig, len(ids))
    if cls[0] < 0:
        raise GrammarError(f"{name}: the regex /{pattern}/ matches nothing")
    c = np.array(cls, dtype=np.int64)
    live = np.flatnonzero(c >= 0)
    _, rep = np.unique(c[live], return_index=True)
    reps = live[np.sort(rep)]  # classes numbered by first state, as minimise(): the start stays 0
    renum = np.full(len(ids), -1, dtype=np.int64)
    renum[c[reps]] = np.arange(len(reps))
    rows = trans[reps]
    succ_cls = c[np.maximum(rows, 0)]
    mapped = np.where((rows >= 0) & (succ_cls >= 0), renum[succ_cls], -1)  # dead successors: -1
    return ByteDFA(np.ascontiguousarray(mapped.astype(np.int32)), final[reps].copy())


def minimise(dfa: ByteDFA, max_rounds: int = 200) -> ByteDFA:
    """The minimal DFA of a trimmed ``dfa`` (Moore's partition refinement, vectorised over
    byte classes); ``dfa`` itself if refinement needs more than ``max_rounds`` rounds.

    UTF-8 expansion leaves equivalent copies behind: json.lark's STRING interior was four
    states (one per way of arriving), each walked over the whole vocabulary at compile time."""
    t, f = dfa.trans, dfa.final
    n = len(f)
    if n <= 1:
        return dfa
    first, _ = unique_rows(t.T)
    tc = t[:, np.sort(first)]  # one column per byte class: bytes of a class move every state alike
    cls = _refine_hashed(tc, f, max_rounds)
    if cls is None:  # a hash collision (never seen): the exact, slower refinement
        cls = _refine_exact(tc, f, max_rounds)
    if cls is None:
        return dfa
    k = int(cls.max()) + 1
    if k == n:
        return dfa
    _, rep = np.unique(cls, return_index=True)
    order = np.argsort(rep, kind="stable")  # classes numbered by first state: the start stays 0
    renum = np.empty(k, dtype=np.int64)
    renum[order] = np.arange(k)
    reps = rep[order]
    rows = t[reps]
    trans = np.where(rows >= 0, renum[cls[np.maximum(rows, 0)]], -1).astype(np.int32)
    return ByteDFA(np.ascontiguousarray(trans), f[reps].copy())


def unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of each distinct row's first occurrence, [rows] distinct-row id) of a 2-D array.
    Rows are compared as raw bytes (one np.void each), in no particular order of ids: np.unique
    with ``axis=0`` sorts rows field by field, 1.7 s over the 48 flexible-schema lexer builds
    where this takes milliseconds."""
    a = np.ascontiguousarray(a)
    v = a.view(np.dtype((np.void, a.dtype.itemsize * a.shape[1]))).reshape(-1)
    _, first, inv = np.unique(v, return_index=True, return_inverse=True)
    return first, inv.reshape(-1)


def _refine_exact(tc: np.ndarray, f: np.ndarray, max_rounds: int) -> np.ndarray | None:
    """Moore refinement with exact row signatures (np.unique over rows); None past max_rounds."""
    cls = f.astype(np.int64)
    k = len(np.unique(cls))
    for _ in range(max_rounds):
        sig = np.concatenate([cls[:, None], np.where(tc >= 0, cls[np.maximum(tc, 0)], -1)], axis=1)
        _, new = np.unique(sig, axis=0, return_inverse=True)
        cls = new.reshape(-1).astype(np.int64)
        k2 = int(cls.max()) + 1
        if k2 == k:
            return cls
        k = k2
    return None


def _refine_hashed(tc: np.ndarray, f: np.ndarray, max_rounds: int,
                   weights: np.ndarray | None = None) -> np.ndarray | None:
    """Moore refinement with each row's signature hashed to one uint64, so a round is a 1-D
    np.unique instead of a row sort (flexible-whitespace schema terminals such as
    ``[ \t\n\r]{0,64},[ \t\n\r]{0,64}`` are chains that need ~130 rounds: 38 -> 4 ms). A
    collision could only merge states; the result is used only if it is a bisimulation (every
    state agrees with its class's first state on finality and on every successor's class), which
    makes merging exact. None past max_rounds or on a failed check."""
    n, c = tc.shape
    succ = np.where(tc >= 0, tc, n)  # n: the missing transition, a class of its own
    w = weights if weights is not None else (
        np.random.default_rng(0x7E11).integers(1, 1 << 62, size=c + 1, dtype=np.uint64) | np.uint64(1))
    cls = f.astype(np.int64)
    k = len(np.unique(cls))
    with np.errstate(over="ignore"):
        for _ in range(max_rounds):
            ext = np.append(cls, -1).astype(np.uint64)
            h = ext[:n] * w[0] + (ext[succ] * w[1:]).sum(axis=1, dtype=np.uint64)
            _, new = np.unique(h, return_inverse=True)
            new = new.reshape(-1).astype(np.int64)
            k2 = int(new.max()) + 1
            cls = new
            if k2 == k:
                break
            k = k2
        else:
            return None
    _, rep = np.unique(cls, return_index=True)
    ext = np.append(cls, -1)
    head = rep[cls]  # each state's class representative
    if not (f == f[head]).all() or not (ext[succ] == ext[succ[head]]).all():
        return None
    return cls


def trim(trans: np.ndarray, final: np.ndarray, *, name: str = "regex", pattern: str = "",
         allow_empty: bool = True) -> ByteDFA:
    """Remove states that cannot reach an accepting state; keep state 0 as start."""
    n = trans.shape[0]
    live = final.copy()
    while True:
        succ_live = np.zeros(n, dtype=bool)
        valid = trans >= 0
        succ_live = (valid & live[np.where(valid, trans, 0)]).any(axis=1)
        new = live | succ_live
        if (new == live).all():
            break
        live = new
    if not live[0]:
        raise GrammarError(f"{name}: the regex /{pattern}/ matches nothing")
    if final[0] and not allow_empty:
        raise GrammarError(f"{name}: the regex /{pattern}/ matches the empty string")
    keep = np.flatnonzero(live)  # 0 stays first
    remap = np.full(n, -1, dtype=np.int32)
    remap[keep] = np.arange(len(keep), dtype=np.int32)
    t = trans[keep]
    t = np.where(t >= 0, remap[np.where(t >= 0, t, 0)], -1).astype(np.int32)
    return ByteDFA(np.ascontiguousarray(t), final[keep].copy())


# ----------------------------------------------------------------------------- the constraint


@dataclass(frozen=True)
class Regex:
    """A regular-expression grammar (Python ``re`` syntax); ``compile(Regex(p), vocab)`` builds it.

    The output must match the whole pattern (``re.fullmatch``); EOS is allowed exactly on a match.
    """

    pattern: str

    def compile(self, vocab: Vocabulary) -> "RegexConstraint":
        return RegexConstraint(regex_to_byte_dfa(self.pattern), vocab)


class RegexConstraint:
    """Token-level constraint from a ``ByteDFA``; its state is the DFA state (an ``int``).

    Per DFA state, the whole vocabulary is walked at once (numpy, column by column over the
    padded token-byte matrix) and the surviving tokens stored as a packed bitmask; the tables are
    built lazily, on the first visit of each DFA state, then reused.
    """

    def __init__(self, dfa: ByteDFA, vocab: Vocabulary) -> None:
        from trellis.constrain.walks import TokenMatrix

        self.vocab = vocab
        self.dfa = dfa
        self.tm = TokenMatrix.of(vocab)
        self._masks: dict[int, np.ndarray] = {}  # DFA state -> [W] int32
        self._walk_memo: dict = {}  # walk_live's first-byte buckets, shared by the DFA's states
        self._eos = self.tm.eos_bits()

    def start(self) -> Hashable:
        return 0

    def advance(self, state: Hashable, token: int) -> Hashable | None:
        if not 0 <= token < self.tm.size or not self.tm.valid[token]:
            return None
        s = int(state)  # type: ignore[arg-type]
        for b in self.vocab.tokens[token]:
            s = int(self.dfa.trans[s, b])
            if s < 0:
                return None
        return s

    def mask_array(self, state: Hashable) -> np.ndarray:
        """[W] int32 packed mask for ``state`` (cached; do not modify)."""
        s = int(state)  # type: ignore[arg-type]
        m = self._masks.get(s)
        if m is None:
            from trellis.constrain.walks import walk_live

            ids, end, *_ = walk_live(self.dfa.trans, s, self.tm, self._walk_memo)
            m = self.tm.pack_ids(ids[end >= 0])
            if self.dfa.final[s]:
                m = m | self._eos
            self._masks[s] = m
        return m

    def fill_mask(self, state: Hashable, out: Tensor) -> None:
        out.copy_(torch.from_numpy(self.mask_array(state)))

    def is_accepting(self, state: Hashable) -> bool:
        return bool(self.dfa.final[int(state)])  # type: ignore[arg-type]

    def byte_classes(self) -> np.ndarray:
        """[256] class id per byte (bytes with identical DFA columns)."""
        from trellis.constrain.lexer import byte_classes

        return byte_classes(self.dfa.trans)

    def forced_tokens(self, state: Hashable) -> list[int]:
        """Tokens of the unique continuation forced by the regex from ``state`` (may be empty)."""
        s = int(state)  # type: ignore[arg-type]
        forced = bytearray()
        while len(forced) < 256 and not self.dfa.final[s]:
            nxt = np.flatnonzero(self.dfa.trans[s] >= 0)
            if len(nxt) != 1:
                break
            forced.append(int(nxt[0]))
            s = int(self.dfa.trans[s, nxt[0]])
        return self.tm.tokenize_forced(bytes(forced), lambda st, t: self.advance(st, t), state)

    def __repr__(self) -> str:
        return f"RegexConstraint(states={self.dfa.num_states}, vocab={self.tm.size})"


# ----------------------------------------------------------------------------- grammar terminals


def strip_lazy(pattern: str) -> str:
    """``pattern`` with every lazy quantifier (``*?``, ``+?``, ``??``, ``{m,n}?``) made greedy:
    the same set of strings (a regex's language does not depend on laziness)."""
    out, i, n, in_class = [], 0, len(pattern), False
    while i < n:
        c = pattern[i]
        out.append(c)
        if c == "\\" and i + 1 < n:
            out.append(pattern[i + 1])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            for extra in ("^", "]"):
                if pattern[i + 1:i + 2] == extra:
                    out.append(extra)
                    i += 1
        elif c in "*+?}" and pattern[i + 1:i + 2] == "?" and not (c == "?" and pattern[i - 1:i] == "("):
            i += 1  # drop the lazy marker
        i += 1
    return "".join(out)


def _lazy_form(pattern: str) -> str | None:
    """Why a lazy terminal is not of the one form compiled exactly, or None when it is:
    literal prefix, one lazy loop over single characters, literal suffix (``/\\*(.|\\n)*?\\*/``,
    ``".*?"``)."""
    import re._parser as sre  # type: ignore[import-not-found]
    from re import _constants as C  # type: ignore[attr-defined]

    def flat(items: list) -> list:
        out = []
        for op, av in items:
            if op is C.SUBPATTERN and av[1] == 0 and av[2] == 0:  # a group without flags
                out.extend(flat(list(av[3])))
            else:
                out.append((op, av))
        return out

    def one_char(items: list) -> bool:
        items = flat(items)
        if len(items) != 1:
            return False
        op, av = items[0]
        if op in (C.ANY, C.LITERAL, C.NOT_LITERAL, C.IN, C.CATEGORY):
            return True
        return op is C.BRANCH and all(one_char(list(b)) for b in av[1])

    try:
        seq = flat(list(sre.parse(pattern)))
    except Exception:
        return "cannot be parsed"
    lazy = [k for k, (op, _) in enumerate(seq) if op is C.MIN_REPEAT]
    if len(lazy) != 1:
        return "lazy quantifier not at the top level" if not lazy else "more than one lazy quantifier"
    k = lazy[0]
    if not all(op is C.LITERAL for op, _ in seq[:k] + seq[k + 1:]) or k == len(seq) - 1:
        return "lazy quantifier not between literal text (e.g. /\\/\\*(.|\\n)*?\\*\\//)"
    if not one_char(list(seq[k][1][2])):
        return "lazy quantifier over more than one character"
    return None


def shortest_matches(dfa: ByteDFA) -> ByteDFA:
    """The strings of ``dfa`` with no proper prefix in its language (no way out of an accepting
    state): what ``re.match`` returns for a lazy loop between literals, the first end found."""
    trans = dfa.trans.copy()
    trans[dfa.final] = -1
    return trim(trans, dfa.final.copy(), name="lazy terminal")


PARTS_MEMO: dict[str, list] = {}


def terminal_parts(pattern: str, *, name: str) -> list[tuple[ByteDFA, "FollowGuard | None"]]:
    r"""The byte DFAs of a grammar terminal's regex as Lark matches it in a document: one part
    per way its matches may end, ``(dfa, None)`` for matches that end unconditionally and
    ``(dfa, guard)`` for matches that end only where the text after them passes a trailing
    one-character lookahead (``lookaround.FollowGuard``: ``/[+*]|[?](?![a-z])/`` is ``[+*]``
    and ``?`` guarded by "not followed by [a-z]").

    A terminal is matched with ``re.match`` at a position of the text, so laziness matters: a lazy
    regex means its first-match language ``{w : re.match(R, w) matches all of w}``, what Lark's
    ``dynamic_complete`` reads (``lookaround.automaton(ordered=True)``): the lazy loop of
    ``/\/\*(.|\n)*?\*\//`` (Lark's C_COMMENT) or ``/".*?"/`` stops at the first closing literal,
    and Lark's own REGEXP ``/\/(?!\/)(\\\/|\\\\|[^\/])*?\/[imslux]*/`` keeps its flags.
    Memoised per pattern (the DFAs are shared, never mutated)."""
    hit = PARTS_MEMO.get(pattern)
    if hit is None:
        hit = _terminal_parts(pattern, name=name)
        if len(PARTS_MEMO) >= _DFA_MEMO_MAX:
            PARTS_MEMO.clear()
        PARTS_MEMO[pattern] = hit
    return hit


def _terminal_parts(pattern: str, *, name: str) -> list:
    lazy = pattern not in _REWRITES and strip_lazy(pattern) != pattern
    if lazy and _lazy_form(pattern) is None:  # literal, lazy loop over characters, literal: 10x cheaper
        return [(shortest_matches(regex_to_byte_dfa(strip_lazy(pattern), name=name)), None)]
    trans, final, guards = _automaton(_REWRITES.get(pattern, pattern), name=name, ordered=lazy)
    parts = []
    if final.any():
        parts.append((_frozen(_minimal(trans, final, name=name, pattern=pattern)), None))
    for g in dict.fromkeys(g for g in guards or () if g is not None):
        ends = np.array([x == g for x in guards], dtype=bool)  # type: ignore[union-attr]
        parts.append((_frozen(_minimal(trans, ends, name=name, pattern=pattern)), g))
    if not parts:
        raise GrammarError(f"{name}: the regex /{pattern}/ matches nothing")
    return parts


def _frozen(dfa: ByteDFA) -> ByteDFA:
    dfa.trans.setflags(write=False)
    dfa.final.setflags(write=False)
    return dfa


def terminal_dfa(pattern: str, *, name: str) -> ByteDFA:
    """The one byte DFA of a terminal (``terminal_parts``) for a lexer that cannot apply follow
    guards (the LALR engine's): a trailing lookahead is refused by name there."""
    parts = terminal_parts(pattern, name=name)
    if len(parts) != 1 or parts[0][1] is not None:
        raise GrammarError(f"{name}: regex feature not supported (lookahead that can see past the end of the "
                           f"match; the default engine compiles it) in /{pattern}/")
    return parts[0][0]


def restrict_first_char(dfa: ByteDFA, allowed: tuple) -> ByteDFA | None:
    """The DFA of the strings of ``dfa`` whose first character is in ``allowed`` (code point
    ranges), or None when there is none: a product of ``dfa`` with the UTF-8 automaton of
    ``allowed`` over the first character, then ``dfa`` itself."""
    from trellis.constrain.regex_compile import utf8_dawg

    nodes = utf8_dawg(tuple(allowed))
    n = dfa.num_states
    ids: dict[tuple[int, int], int] = {(0, 0): n}  # (dawg node, dfa state) mid first character
    order = [(0, 0)]
    rows: list[np.ndarray] = []
    i = 0
    while i < len(order):
        node, q = order[i]
        i += 1
        row = np.full(256, -1, dtype=np.int32)
        src = dfa.trans[q]
        for lo, hi, child in nodes[node]:
            for b in range(lo, hi + 1):
                q2 = int(src[b])
                if q2 < 0:
                    continue
                if child < 0:
                    row[b] = q2
                else:
                    key = (child, q2)
                    j = ids.get(key)
                    if j is None:
                        j = ids[key] = n + len(order)
                        order.append(key)
                    row[b] = j
        rows.append(row)
    # states: dfa's own 0..n-1, then the pairs; the first pair becomes the start
    trans = np.vstack([dfa.trans, np.stack(rows)])
    final = np.concatenate([dfa.final, np.zeros(len(rows), dtype=bool)])
    perm = np.concatenate([[n], np.arange(n), np.arange(n + 1, n + len(rows))])
    inv = np.empty_like(perm)
    inv[perm] = np.arange(len(perm))
    t = trans[perm]
    t = np.where(t >= 0, inv[np.maximum(t, 0)], -1).astype(np.int32)
    f = final[perm]
    try:
        return trim(t, f, name="guarded terminal")
    except GrammarError:
        return None


def _chain_words(dfa: ByteDFA) -> list[bytes] | None:
    """The strings of a DFA that is one chain from state 0 (a literal: no branch, no loop), by
    ``literal_walk.literal_at``; None otherwise."""
    from trellis.constrain.literal_walk import literal_at

    lit = literal_at(dfa, 0)
    if lit is None:
        return None
    return ([b""] if dfa.final[0] else []) + [lit.text[:j] for j in lit.ends]


def _minus_words(a: ByteDFA, words: list[bytes]) -> tuple[np.ndarray, np.ndarray] | None:
    """L(a) minus a finite set of strings: the product of ``a`` with the words' trie, where a
    state that has left the trie is ``a``'s own state. A schema object's "other keys" regex
    minus its declared keys: the general product (one ``np.unique`` per state over k+1 DFAs)
    took ~10 ms per object with a few dozen keys; this is ~0.1 ms per trie node."""
    children: list[dict[int, int]] = [{}]
    end = [False]
    for w in words:
        node = 0
        for b in w:
            nxt = children[node].get(b)
            if nxt is None:
                nxt = children[node][b] = len(children)
                children.append({})
                end.append(False)
            node = nxt
        end[node] = True
    ids = {(0, 0): 0}
    order = [(0, 0)]
    i = 0
    while i < len(order):
        qa, node = order[i]
        i += 1
        for b, child in children[node].items():
            q2 = int(a.trans[qa, b])
            if q2 >= 0 and (q2, child) not in ids:
                ids[(q2, child)] = len(order)
                order.append((q2, child))
    p = len(order)  # product states first; a's states follow, shifted by p
    shifted = np.where(a.trans >= 0, a.trans + p, -1).astype(np.int32)
    rows = shifted[[qa for qa, _ in order]]
    finals = np.array([bool(a.final[qa]) and not end[node] for qa, node in order], dtype=bool)
    for k, (qa, node) in enumerate(order):
        for b, child in children[node].items():
            j = ids.get((int(a.trans[qa, b]), child))
            if j is not None:
                rows[k, b] = j
    trans = np.concatenate([rows, shifted])
    final = np.concatenate([finals, a.final])
    # keep the states reachable from the start (a's start is usually not re-entered)
    reach = np.zeros(len(final), dtype=bool)
    reach[0] = True
    frontier = np.array([0])
    while len(frontier):
        nxt = np.unique(trans[frontier])
        nxt = nxt[nxt >= 0]
        nxt = nxt[~reach[nxt]]
        reach[nxt] = True
        frontier = nxt
    keep = np.flatnonzero(reach)
    remap = np.full(len(final), -1, dtype=np.int32)
    remap[keep] = np.arange(len(keep), dtype=np.int32)
    t = trans[keep]
    t = np.where(t >= 0, remap[np.maximum(t, 0)], -1).astype(np.int32)
    f = final[keep]
    if not f.any():
        return None
    return t, f


def difference(a: ByteDFA, subtract: list[ByteDFA], *, name: str = "terminal") -> ByteDFA | None:
    """The DFA of L(a) minus the union of L(b) for b in ``subtract`` (product construction over
    the bytes ``a`` takes, trimmed), or None when nothing is left."""
    words = [_chain_words(b) for b in subtract]
    if all(w is not None for w in words):
        res = _minus_words(a, [x for w in words for x in w])  # type: ignore[union-attr]
        return None if res is None else trim(*res, name=name)
    k = len(subtract)
    start = (0,) * (k + 1)
    ids: dict[tuple[int, ...], int] = {start: 0}
    order = [start]
    rows: list[np.ndarray] = []
    finals: list[bool] = []
    dead = np.full(256, -1, dtype=np.int64)
    i = 0
    while i < len(order):
        st = order[i]
        i += 1
        qa = st[0]
        ra = a.trans[qa].astype(np.int64)
        cols = np.flatnonzero(ra >= 0)
        row = np.full(256, -1, dtype=np.int32)
        if len(cols):
            combo = np.stack([ra] + [subtract[j].trans[q].astype(np.int64) if q >= 0 else dead
                                     for j, q in enumerate(st[1:])])[:, cols]
            uniq, inv = np.unique(combo, axis=1, return_inverse=True)
            targets = np.empty(uniq.shape[1], dtype=np.int32)
            for c in range(uniq.shape[1]):
                key = tuple(int(x) for x in uniq[:, c])
                t = ids.get(key)
                if t is None:
                    t = ids[key] = len(order)
                    order.append(key)
                targets[c] = t
            row[cols] = targets[inv.reshape(-1)]
        rows.append(row)
        finals.append(bool(a.final[qa]) and not any(q >= 0 and bool(subtract[j].final[q])
                                                     for j, q in enumerate(st[1:])))
    trans, final = np.stack(rows), np.array(finals, dtype=bool)
    if not final.any():
        return None
    return trim(trans, final, name=name)


def intersects(a: ByteDFA, b: ByteDFA) -> bool:
    """Whether some string is in both languages (a search over the product's reachable pairs)."""
    seen = {(0, 0)}
    todo = [(0, 0)]
    while todo:
        qa, qb = todo.pop()
        if a.final[qa] and b.final[qb]:
            return True
        ra, rb = a.trans[qa], b.trans[qb]
        both = np.flatnonzero((ra >= 0) & (rb >= 0))
        for pair in set(zip(ra[both].tolist(), rb[both].tolist())):
            if pair not in seen:
                seen.add(pair)
                todo.append(pair)
    return False
