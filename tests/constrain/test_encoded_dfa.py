"""``automata/encoded_dfa.py``: a length-bounded pattern's chunk terminals get their byte DFAs
from the chunk automata, not by parsing the chunk regexes again; the tables must be the ones
parsing gives (``regex._terminal_parts``), up to the numbering of states: both minimal, so equal
languages have equal tables once numbered breadth-first (the parsed one of a counted repeat is
numbered otherwise)."""

from __future__ import annotations

import random

import numpy as np
from tests.constrain.test_json_schema_pattern_lengths import random_pattern
from trellis.constrain import JsonSchema, SchemaError
from trellis.constrain.automata import regex
from trellis.constrain.compile import clear_caches
from trellis.constrain.grammar.plain_patterns import plain_pattern

# real shapes (maskbench-like): '/' (written '\/' in the grammar), escapes, negated classes, \S, unicode
PATTERNS = [r"^https?://.+$", r"^(\d+\.\d+\.\d+.*)$", r'^[^\\/:\*\?"<>\|\x01-\x1f]+$', r"^[a-zA-Z0-9](-?[a-zA-Z0-9])*$",
            r"^\S+@\S+$", r"^/.*", r"^[^\s-]+$", r"^([a-z]{4}-){3}[a-z]{4}$", r"é€.\d"]


def _bfs(d) -> tuple[np.ndarray, np.ndarray]:
    """The DFA's tables with states numbered breadth-first from the start, bytes in order."""
    order, queue = {0: 0}, [0]
    for q in queue:
        for t in d.trans[q]:
            if t >= 0 and int(t) not in order:
                order[int(t)] = len(order)
                queue.append(int(t))
    assert len(order) == d.num_states  # (minimal: every state reachable)
    old = np.array(sorted(order, key=order.get))
    ren = np.full(d.num_states + 1, -1, dtype=np.int32)
    ren[old] = np.arange(len(old))
    return ren[d.trans[old]], d.final[old]


def _same(a, b) -> bool:
    (ta, fa), (tb, fb) = _bfs(a), _bfs(b)
    return np.array_equal(ta, tb) and np.array_equal(fa, fb)


def _seeded_equal_parsed(schema: dict) -> int:
    clear_caches()
    try:
        JsonSchema(schema).to_lark("earley")
    except SchemaError:  # (a bound no string of the pattern meets)
        return 0
    pending = dict(regex.PENDING_PARTS)
    for key, (build, _) in pending.items():
        seeded = build()
        assert seeded is not None, key
        (parsed, guard), = regex._terminal_parts(plain_pattern(key).to_regexp(), name="t")
        assert guard is None
        assert _same(seeded, parsed), key
    return len(pending)


def test_chunk_terminal_dfas_equal_the_parsed_regexes():
    chunked = [p for p in PATTERNS
               if sum(_seeded_equal_parsed({"type": "string", "pattern": p, "maxLength": hi, "minLength": lo})
                      for lo, hi in ((0, 12), (3, 40), (1, 200)))]
    assert len(chunked) >= 5, chunked  # (the chunk path was taken: terminals were seeded)


def test_random_patterns_chunk_dfas_equal_the_parsed_regexes():
    rng = random.Random(59)
    seeded = 0
    for _ in range(12):
        lo = rng.choice([0, 0, 1, 5])
        schema = {"type": "string", "pattern": random_pattern(rng), "minLength": lo,
                  "maxLength": lo + rng.choice([3, 17, 40])}
        seeded += _seeded_equal_parsed(schema)
    assert seeded > 12


def test_a_seeded_terminal_is_taken_once_by_terminal_parts():
    clear_caches()
    schema = {"type": "string", "pattern": r"^https?://.+$", "maxLength": 40}
    JsonSchema(schema).to_lark("earley")
    written = set(regex.PENDING_PARTS)
    assert written
    for w in written:
        pattern = plain_pattern(w).to_regexp()
        (d, _), = regex.terminal_parts(pattern, name="t", written=w)
        assert w not in regex.PENDING_PARTS  # taken on first use
        (p, _), = regex._terminal_parts(pattern, name="t")
        assert _same(d, p)


def test_pending_builders_are_bounded_by_what_they_hold():
    regex.clear_pending()
    calls = []
    regex.seed_parts("/a/", lambda: calls.append("a"), regex.PENDING_MAX_SIZE - 10)
    regex.seed_parts("/b/", lambda: calls.append("b"), 5)
    assert set(regex.PENDING_PARTS) == {"/a/", "/b/"}
    regex.seed_parts("/c/", lambda: calls.append("c"), 20)  # past the bound: the others dropped
    assert set(regex.PENDING_PARTS) == {"/c/"}
    regex.seed_parts("/c/", lambda: calls.append("c2"), 20)  # the same literal again: replaced, counted once
    regex.seed_parts("/d/", lambda: calls.append("d"), regex.PENDING_MAX_SIZE - 40)
    assert set(regex.PENDING_PARTS) == {"/c/", "/d/"} and not calls
    regex.clear_pending()
