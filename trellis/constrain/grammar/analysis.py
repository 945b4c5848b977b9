"""A new grammar's analyses over its integer rules (``GrammarIR.rules``): productivity and
nullability (``derives``), FOLLOW sets as bytes (``follow_bytes``), the Earley recogniser's LR(0)
item tables (``item_tables``), and byte sets as 256-bit ints.

Each runs in C where ``_cfgc`` is built (``_cfgc.c``: it reads the rule tuples in place), else in
its Python form here (``*_py``), which returns the same objects (``tests/constrain/test_analysis.py``
compares them on the corpus grammars, schema grammars and random grammars). ``KERNEL`` says which;
``TRELLIS_CFG_KERNEL=python`` forces the Python forms. Every compile runs these over every rule:
in C a fresh schema's compile is x0.97 per schema, x0.91 with the rule lines read in C too
(``benchmarks/ab_masks.py --switch cfgc``, 100 maskbench schemas; benchmarks/README.md)."""

from __future__ import annotations

import os
from array import array
from typing import Protocol

import numpy as np

from trellis.constrain.automata.byte_dfa import ByteDFA

try:
    from trellis.constrain.grammar import _cfgc as cfgc
except ImportError:  # pragma: no cover - depends on the install
    cfgc = None
if os.environ.get("TRELLIS_CFG_KERNEL", "").lower() == "python":
    cfgc = None
KERNEL = "c" if cfgc is not None else "python"

Rules = list[tuple[int, tuple[int, ...]]]


class AnalysedIR(Protocol):
    """What these analyses read of ``grammar_ir.GrammarIR`` (which imports this module)."""

    nonterminals: list[str]
    terminals: list
    rules: Rules
    ignore: tuple[int, ...]
    nullable: list[bool]


def derives(rules: Rules, n: int, ok_t: bytes | None) -> list[bool]:
    """``derives_py`` (in C where built)."""
    return cfgc.derives(rules, n, ok_t) if cfgc is not None else derives_py(rules, n, ok_t)


def nullable(rules: Rules, n: int) -> list[bool]:
    """Per nonterminal, whether it derives the empty string."""
    return derives(rules, n, None)


def productive(rules: Rules, n: int, ok_t: bytes) -> tuple[list[bool], Rules]:
    """Per nonterminal whether it derives some string (terminal t derives one iff ``ok_t[t]``), and
    the rules whose left side and every symbol do (the same tuples, in order)."""
    if cfgc is not None:
        return cfgc.productive(rules, n, ok_t)
    prod = derives_py(rules, n, ok_t)
    return prod, [(lhs, rhs) for lhs, rhs in rules if prod[lhs] and all(prod[s] if s >= 0 else ok_t[-1 - s] for s in rhs)]


def item_tables(rules: Rules, n: int, start: int) -> tuple[list, list[int], list[list[int]], int, array, array]:
    """The LR(0) items of ``rules`` numbered rule by rule (item i + 1 is item i with the dot one
    symbol on): per item the symbol after its dot (None at a rule's end) and its rule's left side;
    per nonterminal the first items of its rules (``predict``); the item after the augmented
    rule ``start -> <start>``'s one symbol (``accept_item``); and the first two as int32 arrays
    (None as INT32_MIN) for ``_statec``."""
    if cfgc is not None:
        nxt, lhs, predict, accept, nxt_c, lhs_c = cfgc.items(rules, n, start)
        a, b = array("i"), array("i")
        a.frombytes(nxt_c)
        b.frombytes(lhs_c)
        return nxt, lhs, predict, accept, a, b
    return item_tables_py(rules, n, start)


def item_tables_py(rules: Rules, n: int, start: int) -> tuple[list, list[int], list[list[int]], int, array, array]:
    """``item_tables`` in Python."""
    nxt: list[int | None] = []
    lhs_of: list[int] = []
    predict: list[list[int]] = [[] for _ in range(n)]
    accept = -1
    for lhs, rhs in rules:
        if lhs == start:
            accept = len(nxt) + 1
        predict[lhs].append(len(nxt))
        for k in range(len(rhs) + 1):
            nxt.append(rhs[k] if k < len(rhs) else None)
            lhs_of.append(lhs)
    if accept < 0:
        raise ValueError("items: no rule for the start symbol")
    return (nxt, lhs_of, predict, accept, array("i", [-(1 << 31) if s is None else s for s in nxt]),
            array("i", lhs_of))


def bnf_parse(text: str) -> tuple | None:
    """``grammar_ir.load_bnf``'s reading of its rule lines in C (``_cfgc.bnf_parse``: each name once,
    the rules as int32 tables); None without ``_cfgc``, or for a text the C reader leaves to the
    Python one (a line break other than "\\n")."""
    return cfgc.bnf_parse(text) if cfgc is not None else None


def remap(origin: bytes, off: bytes, sym: bytes, table: list[int]) -> Rules:
    """``bnf_parse``'s rules as ``GrammarIR`` rules: name i is symbol ``table[i]`` (``_cfgc`` only)."""
    return cfgc.remap(origin, off, sym, table)


def follow_bytes(ir: AnalysedIR) -> list[int]:
    """``follow_bytes_py`` (in C where built: the sets as 32 bytes each)."""
    if cfgc is None:
        return follow_bytes_py(ir)
    starts = start_bytes(ir)
    ign = bytearray(len(starts))
    for t in ir.ignore:
        ign[t] = 1
    out = cfgc.follow(ir.rules, len(ir.nonterminals), b"".join(b.to_bytes(32, "little") for b in starts),
                      bytes(ir.nullable), bytes(ign))
    return [int.from_bytes(out[k:k + 32], "little") for k in range(0, len(out), 32)]


def derives_py(rules: Rules, n: int, ok_t: bytes | None) -> list[bool]:
    """Per nonterminal, whether some rule for it has every symbol true (a nonterminal: true
    itself; a terminal t: ``ok_t[t]``, every one false where ``ok_t`` is None): productivity, or
    nullability with no terminal true.
    A worklist over rule occurrences, linear in the grammar: a round-robin sweep needs one round
    per link of a chain written in the wrong order, and the Earley form of a schema's objects
    (``LarkEmitter._edge_rules``) chains unions of thousands of states."""
    ok = [False] * n
    need: list[int] = []
    uses: list[list[int]] = [[] for _ in range(n)]
    todo: list[int] = []
    for i, (lhs, rhs) in enumerate(rules):
        k = 0
        for s in rhs:
            if s >= 0:
                uses[s].append(i)
                k += 1
            elif ok_t is None or not ok_t[-1 - s]:
                k = -1
                break
        need.append(k)
        if k == 0:
            todo.append(lhs)
    while todo:
        x = todo.pop()
        if ok[x]:
            continue
        ok[x] = True
        for i in uses[x]:
            need[i] -= 1
            if need[i] == 0:
                todo.append(rules[i][0])
    return ok


def start_bytes(ir: AnalysedIR) -> list[int]:
    """Per terminal, the bytes its DFA can start with, as a 256-bit int (bit b: byte b). A
    literal's is its first byte; another DFA's is kept on the DFA object (shared across grammars
    by the regex memos): stacking every terminal's first row was ~half of ``follow_bytes`` on the
    50 median maskbench schemas."""
    out = []
    for t in ir.terminals:
        d = t.dfa
        bits = d.__dict__.get("_start_bits")
        if bits is None:
            bits = d.__dict__["_start_bits"] = state_bits(d, 0)
        out.append(bits)
    return out


def state_bits(dfa: ByteDFA, q: int) -> int:
    """The bytes ``dfa`` takes from state ``q``, as a 256-bit int; a literal chain's from its text
    (one byte, none at its end) without reading a table row (~3 us of numpy)."""
    lit = dfa.literal
    if lit is not None:
        return 1 << lit[q] if q < len(lit) else 0
    return bool_to_bits(dfa.trans[q] >= 0)


def follow_bytes_py(ir: AnalysedIR) -> list[int]:
    """For each terminal, the bytes that can start what comes right after it in some sentence (the
    classic FOLLOW sets at the level of terminals, then their first bytes), as 256-bit ints;
    ``%ignore`` terminals can follow anything and anything can follow them. Used to drop, ahead
    of any parse, token splits whose next byte no follower can start.

    Sets are ints (FIRST and FOLLOW as byte bitsets): the per-suffix frozensets they replaced
    took 0.5 s over 135 maskbench schema grammars (cProfile of their compiles; bench_fresh.py's
    compile column is the user-facing figure, commit cd894bb). Each rule is read once; the sets
    then flow along their inclusions by a worklist (``_flow``): the sweeps over all rules until
    nothing changed needed one round per link of a union chain written in rule order (a schema's
    Earley form, ``LarkEmitter._edge_rules``: o18637's FOLLOW sets 20 -> 85 ms)."""
    n, m = len(ir.nonterminals), len(ir.terminals)
    starts = start_bytes(ir)
    null = ir.nullable
    # FIRST of each nonterminal, as bytes: the first bytes of the terminals that can begin it,
    # and FIRST of each nonterminal that can (``into[x]``: the nonterminals x's FIRST flows into)
    first = [0] * n
    into: list[list[int]] = [[] for _ in range(n)]
    for lhs, rhs in ir.rules:
        for x in rhs:
            if x < 0:
                first[lhs] |= starts[-1 - x]
                break
            into[x].append(lhs)
            if not null[x]:
                break
    _flow(first, into)
    # FOLLOW: what starts after each symbol of a rule is FIRST of the rest of the rule, and, where
    # the rest is nullable, FOLLOW of the rule's left side (``down``: lhs -> those nonterminals;
    # ``ends``: lhs -> those terminals, applied once the nonterminals' sets are final)
    follow_nt = [0] * n
    follow_t = [0] * m
    down: list[list[int]] = [[] for _ in range(n)]
    ends: list[tuple[int, int]] = []
    for lhs, rhs in ir.rules:
        after, open_end = 0, True  # the rest's FIRST; whether the rest is nullable
        for x in reversed(rhs):
            if x < 0:
                t = -1 - x
                follow_t[t] |= after
                if open_end:
                    ends.append((lhs, t))
                after, open_end = starts[t], False
            else:
                follow_nt[x] |= after
                if open_end:
                    down[lhs].append(x)
                after = first[x] | after if null[x] else first[x]
                open_end = open_end and null[x]
    _flow(follow_nt, down)
    for lhs, t in ends:
        follow_t[t] |= follow_nt[lhs]
    ign = 0
    for t in ir.ignore:
        ign |= starts[t]
    everything = 0
    for b in starts:
        everything |= b
    ignored = set(ir.ignore)
    return [everything if t in ignored else follow_t[t] | ign for t in range(m)]


def _flow(sets: list[int], edges: list[list[int]]) -> None:
    """Close ``sets`` (bitsets as ints) under ``sets[v] |= sets[u]`` for every edge u -> v of
    ``edges`` (adjacency lists), by a worklist: each node is revisited only when its set grows."""
    todo = [u for u in range(len(sets)) if sets[u] and edges[u]]
    queued = [False] * len(sets)
    for u in todo:
        queued[u] = True
    while todo:
        u = todo.pop()
        queued[u] = False
        su = sets[u]
        for v in edges[u]:
            sv = sets[v]
            if su | sv != sv:
                sets[v] = sv | su
                if not queued[v] and edges[v]:
                    queued[v] = True
                    todo.append(v)


def bool_to_bits(row: np.ndarray) -> int:
    """The 256-bit int of a [256] bool row (bit b: row[b])."""
    return int.from_bytes(np.packbits(row, bitorder="little").tobytes(), "little")


def bits_to_bool(bits: int) -> np.ndarray:
    """[256] bool of a 256-bit int (read-only: memoised by value, ``BOOL_ROWS``)."""
    hit = BOOL_ROWS.get(bits)
    if hit is None:
        hit = np.unpackbits(np.frombuffer(bits.to_bytes(32, "little"), dtype=np.uint8), bitorder="little").astype(bool)
        hit.setflags(write=False)
        if len(BOOL_ROWS) >= 1 << 12:
            BOOL_ROWS.clear()
        BOOL_ROWS[bits] = hit
    return hit


# Byte sets as [256] bool rows by their 256-bit int: follow sets and the live bytes of chart states
# recur across grammars (a JSON string's, a number's followers); each conversion is ~3 us of numpy.
BOOL_ROWS: dict[int, np.ndarray] = {}


