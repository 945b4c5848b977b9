"""The C DFA kernels (``trellis/constrain/automata/_dfac.c``) return exactly what the Python code returns.
``subset_construction``: the same tables, states numbered alike, on the NFAs of real terminal
regexes and random NFAs (overlapping ranges, edges up to byte 255), and the same refusal past the
state limit. ``minimal``: the DFA the numpy ``minimal`` returns, state for state: the same classes numbered the same way (walks of shapes too
large to canonicalise are keyed by the DFA's content, so processes with either kernel must build
the same tables), the same refusal for a regex that matches nothing, and the same unminimised
result where Moore refinement gives up after its round limit. Inputs: the determinised DFAs of
real terminal regexes, and random DFAs, acyclic (Revuz's path) and cyclic (trim + Moore)."""

from __future__ import annotations

import numpy as np
import pytest

from trellis.constrain.automata import dfa_minimise
from trellis.constrain.automata.byte_dfa import ByteDFA
from trellis.constrain.automata.dfa_minimise import (already_deterministic, minimal, minimal_numpy, subset_construction,
                                            subset_construction_numpy)
from trellis.constrain.errors import GrammarError
from trellis.constrain.automata import regex_compile
from trellis.constrain.automata.regex_compile import RegexTooLarge, epsilon_free, epsilon_free_py, regex_nfa

pytestmark = pytest.mark.skipif(dfa_minimise.KERNEL != "c", reason="the C kernel is not built in this install")

PATTERNS = [
    r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"',  # a JSON string
    r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?",  # a JSON number
    r"[ \t\n\r]{0,64},[ \t\n\r]{0,64}",  # a flexible-whitespace separator (acyclic, ~130 states)
    r"(?i:select|from|where)",
    r"[a-zA-Z_]\w*",  # Unicode \w: a large UTF-8 automaton
    r"(?:ab|a)*c",
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}",
    r"(?:x|y){3,7}",
    r"\s+",
    r"(?:[^a]|a[^b])*",
    r"(?:a{0,300}b)*",  # cyclic with a 300-state chain: Moore refinement stops at its round limit
    r"",
]


def _same_tables(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> None:
    """Equal (trans, final) tables: same dtypes, shapes and entries."""
    assert a[0].dtype == b[0].dtype == np.int32 and a[1].dtype == b[1].dtype == bool
    assert a[0].shape == b[0].shape and np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def _same(a: ByteDFA, b: ByteDFA) -> None:
    _same_tables((a.trans, a.final), (b.trans, b.final))


def determinised(pattern: str) -> tuple[np.ndarray, np.ndarray]:
    """(trans, final) of ``pattern`` as the regex compiler determinises it, before minimisation."""
    edges, finals = regex_nfa(pattern)
    det = already_deterministic(edges, finals, 0)
    return det if det is not None else subset_construction(edges, finals, 0)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_c_minimal_equals_numpy_on_terminal_regexes(pattern: str) -> None:
    trans, final = determinised(pattern)
    _same(minimal(trans, final, name="T", pattern=pattern), minimal_numpy(trans, final, name="T", pattern=pattern))


def test_the_round_limit_case_is_really_exercised() -> None:
    """(a{0,300}b)* needs more Moore rounds than the limit: both kernels return it trimmed, not
    minimised (so the case above compares that fallback, not a minimal DFA)."""
    trans, final = determinised(r"(?:a{0,300}b)*")
    out = minimal(trans, final, name="T", pattern="p")
    assert out.trans.shape[0] == trans.shape[0]  # nothing merged...
    assert dfa_minimise.minimise(out, max_rounds=2000).trans.shape[0] < out.trans.shape[0]  # ...though it could be


def _random_dfa(rng: np.random.Generator, acyclic: bool) -> tuple[np.ndarray, np.ndarray]:
    """A random DFA with every state reachable from 0 (the contract of ``minimal``)."""
    n = int(rng.integers(1, 40))
    trans = np.full((n, 256), -1, dtype=np.int32)
    for u in range(n):
        for b in rng.choice(256, size=int(rng.integers(1, 6)), replace=False):
            lo = u + 1 if acyclic else 0
            if lo < n and rng.random() < 0.8:
                trans[u, b:b + int(rng.integers(1, 4))] = int(rng.integers(lo, n))
    final = rng.random(n) < 0.3
    order, seen = [0], {0}
    for u in order:
        for v in trans[u][trans[u] >= 0].tolist():
            if v not in seen:
                seen.add(v)
                order.append(v)
    remap = np.full(n + 1, -1, dtype=np.int32)
    remap[order] = np.arange(len(order), dtype=np.int32)
    return remap[trans[order]], final[order]


@pytest.mark.parametrize("acyclic", [True, False])
def test_c_minimal_equals_numpy_on_random_dfas(acyclic: bool) -> None:
    rng = np.random.default_rng(7 if acyclic else 8)
    refused = merged = 0
    for _ in range(1500):
        trans, final = _random_dfa(rng, acyclic)
        try:
            want = minimal_numpy(trans, final, name="T", pattern="p")
        except GrammarError as e:
            with pytest.raises(GrammarError) as got:
                minimal(trans, final, name="T", pattern="p")
            assert str(got.value) == str(e)
            refused += 1
            continue
        got_dfa = minimal(trans, final, name="T", pattern="p")
        _same(got_dfa, want)
        merged += got_dfa.trans.shape[0] < trans.shape[0]
    assert refused > 50 and merged > 200  # both outcomes exercised, and states really merged


def test_c_minimal_tables_are_writable_arrays() -> None:
    trans, final = determinised(r"[ab]+c")
    out = minimal(trans, final, name="T", pattern="p")
    assert out.trans.flags.writeable and out.trans.flags.c_contiguous and out.trans.shape[1] == 256
    out.trans.copy()[0, 0] = 5  # (callers freeze shared DFAs themselves: regex.terminal_parts)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_c_subset_construction_equals_python_on_terminal_regexes(pattern: str) -> None:
    edges, finals = regex_nfa(pattern)
    _same_tables(subset_construction(edges, finals, 0), subset_construction_numpy(edges, finals, 0))


def test_c_subset_construction_equals_python_on_random_nfas() -> None:
    rng = np.random.default_rng(11)
    grew = 0
    for _ in range(1500):
        n = int(rng.integers(1, 12))
        edges = []
        for _u in range(n):
            es = []
            for _e in range(int(rng.integers(0, 6))):
                lo = int(rng.integers(0, 256))
                hi = min(255, lo + int(rng.integers(0, 40)) if rng.random() < 0.8 else 255)
                es.append((lo, hi, int(rng.integers(0, n))))
            edges.append(es)
        finals = {int(x) for x in rng.choice(n, size=int(rng.integers(0, n + 1)), replace=False)}
        got, want = subset_construction(edges, finals, 0), subset_construction_numpy(edges, finals, 0)
        _same_tables(got, want)
        grew += got[0].shape[0] > n
    assert grew > 100  # subsets really formed (more DFA states than NFA states)


def test_c_subset_construction_refuses_past_the_state_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    edges, finals = regex_nfa(r"(?:a|b)*a(?:a|b){6}")  # 2^7 subsets
    assert subset_construction(edges, finals, 0)[0].shape[0] > 100
    monkeypatch.setattr(dfa_minimise, "MAX_DFA_STATES", 100)
    with pytest.raises(RegexTooLarge, match="passes 100 states"):
        subset_construction(edges, finals, 0)
    with pytest.raises(RegexTooLarge, match="passes 100 states"):
        subset_construction_numpy(edges, finals, 0)


@pytest.mark.parametrize("edges", [[[(0, 300, 0)]], [[(5, 2, 0)]], [[(0, 1, 7)]], [[(0, 1)]], [None], 5])
def test_c_subset_construction_refuses_malformed_nfas(edges: object) -> None:
    """Bytes outside 0..255, an empty range, a node that does not exist, a short edge, a node that
    is not a list: a typed error from the kernel, never a crash or a table built from garbage."""
    with pytest.raises((ValueError, TypeError)):
        dfa_minimise.dfac.subset_construction(edges, set(), 0, 100)
    with pytest.raises(ValueError):
        dfa_minimise.dfac.subset_construction([[]], set(), 3, 100)  # no such start state


def test_c_minimal_refuses_a_table_of_the_wrong_size() -> None:
    with pytest.raises(ValueError):
        dfa_minimise.dfac.minimal(np.zeros(10, dtype=np.int32), np.ones(1, dtype=bool))


def test_subset_construction_refuses_past_the_work_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 58: the work bound (edge events) stops both kernels at the same point, however few
    subsets: an NFA of optional items has few subsets with many members each."""
    edges, finals = regex_nfa(r"(?:a?){40}b")
    work = sum(len(e) for e in edges)
    assert subset_construction(edges, finals, 0)[0].shape[0] <= 42  # few subsets, each large
    monkeypatch.setattr(dfa_minimise, "COMPILE_WORK", work)  # less than the construction needs
    for kernel in (subset_construction, subset_construction_numpy):
        with pytest.raises(RegexTooLarge, match="steps"):
            kernel(edges, finals, 0)
    monkeypatch.setattr(dfa_minimise, "COMPILE_WORK", 50 * work)
    _same_tables(subset_construction(edges, finals, 0), subset_construction_numpy(edges, finals, 0))


@pytest.mark.parametrize("seed", range(3))
def test_minus_words_in_c_is_the_python_product(seed: int, monkeypatch) -> None:
    """``byte_dfa._minus_words`` (a terminal minus a set of words: an object's "other keys" regex
    minus its declared keys) in C: the same DFA state for state, the same origins and tree size
    (``Cut``, which ``cut_walk`` reads), and None alike when nothing is left. Words share prefixes,
    hold escapes, non-ASCII bytes and quotes, and can be the whole language (``[a-c]+`` minus all
    its short words)."""
    import random

    from trellis.constrain.automata import byte_dfa
    from trellis.constrain.automata.regex import regex_to_byte_dfa

    assert byte_dfa._dfac is not None
    rng = random.Random(seed)
    bases = [regex_to_byte_dfa(PATTERNS[0]), regex_to_byte_dfa(r'"[a-z_]{0,12}"'), regex_to_byte_dfa(r"[a-c]{1,2}")]
    compared = empty = 0
    for a in bases:
        for _ in range(120):
            words = [("".join(rng.choice('abcé_"\\') for _ in range(rng.randint(0, 6)))).encode()
                     for _ in range(rng.randint(1, 30))]
            if a is not bases[2]:
                words = [b'"' + w + b'"' for w in words]
            else:  # sometimes every word of the language, so that nothing is left
                words += [bytes([x]) for x in b"abc"] + [bytes([x, y]) for x in b"abc" for y in b"abc"] if rng.random() < 0.3 else []
            got = byte_dfa._minus_words(a, words)
            monkeypatch.setattr(byte_dfa, "_dfac", None)
            want = byte_dfa._minus_words(a, words)
            monkeypatch.undo()
            assert (got is None) == (want is None), words
            if got is None:
                empty += 1
                continue
            assert np.array_equal(got.trans, want.trans) and np.array_equal(got.final, want.final), words
            assert np.array_equal(got.cut.origin, want.cut.origin) and got.cut.inner == want.cut.inner
            assert got.cut.base is a
            compared += 1
    assert compared > 300 and empty > 0, (compared, empty)


def _determinised(edges: list, finals: set) -> tuple[np.ndarray, np.ndarray]:
    return subset_construction_numpy(edges, finals, 0)


@pytest.mark.parametrize("pattern", PATTERNS + [r"(?:a?){20}b", r"(?:|x|(?:y|)*)+z", r"\d{2,5}(?:[.,]\d*)?"])
def test_c_epsilon_free_determinises_as_python(pattern: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The C ``epsilon_free`` may number states otherwise, but the DFA of its NFA is the Python
    one's table for table (the subset construction numbers subsets breadth-first by byte)."""
    got = _determinised(*regex_nfa(pattern))
    monkeypatch.setattr(regex_compile, "dfac", None)
    _same_tables(got, _determinised(*regex_nfa(pattern)))


def test_c_epsilon_free_on_random_nfas() -> None:
    """Random NFAs with empty moves (cycles of them, moves to self, nodes no byte reaches): the
    same determinised tables as the Python function, and the same edge counts (states renumbered)."""
    rng = np.random.default_rng(5)
    cyclic = 0
    for _ in range(800):
        n = int(rng.integers(2, 14))
        nfa = regex_compile._NFA()
        for _u in range(n):
            nfa.new()
        for u in range(n):
            for _e in range(int(rng.integers(0, 4))):
                lo = int(rng.integers(0, 256))
                nfa.edges[u].append((lo, min(255, lo + int(rng.integers(0, 30))), int(rng.integers(0, n))))
            nfa.eps[u].extend(int(x) for x in rng.integers(0, n, size=int(rng.integers(0, 3))))
        start, end = int(rng.integers(0, n)), int(rng.integers(0, n))
        got, want = epsilon_free(nfa, start, end), epsilon_free_py(nfa, start, end)
        assert sorted(map(len, got[0])) == sorted(map(len, want[0]))
        assert len(got[1]) == len(want[1]) and (0 in got[1]) == (0 in want[1])
        _same_tables(_determinised(*got), _determinised(*want))
        cyclic += any(u in nfa.eps[v] and v in nfa.eps[u] for u in range(n) for v in range(n))
    assert cyclic > 50


@pytest.mark.parametrize("edges,eps", [([[(0, 1, 7)]], [[]]), ([[]], [[4]]), ([[(0, 1)]], [[]]), ([[]], [[], []]),
                                       ([None], [[]]), ([[]], [None])])
def test_c_epsilon_free_refuses_malformed_nfas(edges: object, eps: object) -> None:
    """A move to a node that does not exist, a short edge, lists of different lengths, a node that
    is not a list: a typed error, never a crash."""
    with pytest.raises((ValueError, TypeError)):
        regex_compile.dfac.epsilon_free(edges, eps, 0, 0)
    with pytest.raises(ValueError):
        regex_compile.dfac.epsilon_free([[]], [[]], 3, 0)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_determinised_in_c_is_the_python_path(pattern: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the kernel, ``determinised`` runs the C subsets even on NFAs that are deterministic
    already; without it, ``already_deterministic`` takes those: the same tables either way."""
    edges, finals = regex_nfa(pattern)
    got = dfa_minimise.determinised(edges, finals, 0)
    monkeypatch.setattr(dfa_minimise, "dfac", None)
    _same_tables(got, dfa_minimise.determinised(edges, finals, 0))


def test_some_terminal_nfas_are_deterministic_already() -> None:
    # (so the test above compares the two paths on such NFAs, not only the subset constructions)
    assert sum(already_deterministic(*regex_nfa(p), 0) is not None for p in PATTERNS) >= 3
