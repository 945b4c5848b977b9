"""A ``pattern`` with ``minLength``/``maxLength`` compiled exactly as chunk rules over the
pattern's states (issue 59; ``json_schema/pattern_chunks.py``), for bounds up to 10,000.

Random patterns and bounds, judged by Python's ``re`` (``re.search``: JSON Schema patterns are
unanchored) plus a length check: strings of the pattern's language at the bounds and at chunk
boundaries, and mutations of them, are accepted exactly when the judge says so. Every prefix is
checked too: walked byte by byte, the constraint refuses at the first character after which no
valid string can follow (so no mask leads into a dead end), and never before.
"""

from __future__ import annotations

import json
import random
import re
import signal
from typing import Any

import interegular
import pytest

from tests.constrain.test_json_schema import BY_BYTES, accepts, make
from trellis.constrain import JsonSchema, SchemaError

# characters the strings are drawn from: pattern letters, JSON escapes ('"', '\\', '\n') and
# multi-byte UTF-8 ('é', '€'), so chunks of characters are not chunks of bytes
ALPHABET = 'ab-.é€"\\\nz0'
RE_SECONDS = 0.2


class _Slow(Exception):
    pass


def _re_search(rx: re.Pattern, s: str) -> bool | None:
    """``rx.search(s)`` found something; None if it took over RE_SECONDS (re checks signals)."""
    def stop(*_: Any) -> None:
        raise _Slow

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, RE_SECONDS)
    try:
        return rx.search(s) is not None
    except _Slow:
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


PIECES = ["a", "b", "-", ".", "é", "[ab]", "[^a]", ".", r"\d", "(?:ab|b)", "(?:a|é-)"]


def random_pattern(rng: random.Random) -> str:
    def atom(depth: int) -> str:
        if depth < 1 and rng.random() < 0.25:  # one level of groups, as real patterns mostly are
            return "(?:" + "|".join(seq(depth + 1) for _ in range(rng.randint(1, 3))) + ")"
        return rng.choice(PIECES)

    def seq(depth: int) -> str:
        out = ""
        for _ in range(rng.randint(1, 3)):
            a = atom(depth)
            q = rng.random()
            out += a + ("*" if q < 0.3 else "+" if q < 0.45 else "?" if q < 0.55
                        else f"{{{rng.randint(0, 2)},{rng.randint(2, 5)}}}" if q < 0.65 else "")
        return out

    body = seq(0)
    return ("^" if rng.random() < 0.6 else "") + body + ("$" if rng.random() < 0.6 else "")


def random_bounds(rng: random.Random) -> tuple[int, int | None]:
    hi = int(10 ** rng.uniform(1.3, 4.0))  # 20 .. 10,000, log-uniform
    lo = rng.choice([0, 0, rng.randint(0, 40), max(0, hi - rng.randint(0, 40))])
    return lo, (None if rng.random() < 0.1 else hi)


class Oracle:
    """The pattern's automaton (interegular, over the test alphabet) with, per state, the
    lengths at which a final state can be reached: to draw strings of a given length, and to
    say which prefixes can still be completed."""

    def __init__(self, pattern: str, lo: int, hi: int | None, limit: int) -> None:
        body = pattern.lstrip("^").rstrip("$").replace(".", "[^\n]")  # '.' is a wildcard in PIECES
        search = ("" if pattern.startswith("^") else r"[\s\S]*") + body \
            + ("" if pattern.endswith("$") else r"[\s\S]*")
        self.fsm = interegular.parse_pattern(search).to_fsm()
        # the judge is Python's re, with $ as ECMA reads it: the end of the string only
        self.judge_re = re.compile(pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern)
        self.lo, self.hi, self.limit, self.bits = lo, hi, limit, None
        f = self.fsm
        # can[n] = states from which exactly n more characters (of ALPHABET) reach a final state
        self.can = [set(f.finals)]
        for _ in range(limit if hi is not None else limit + 64):  # unbounded: room past the drawn strings
            prev = self.can[-1]
            self.can.append({s for s in f.states if any(self.step(s, ch) in prev for ch in ALPHABET)})

    def step(self, s: Any, ch: str) -> Any:
        t = self.fsm.map.get(s, {}).get(self.fsm.alphabet[ch])
        return t

    def judge(self, s: str) -> bool:
        """Python's re and the length check. re backtracks: on these random patterns (nested
        quantifiers) a search can take minutes, so a search past RE_SECONDS is given up and the
        string judged by the automaton, which is checked against re wherever re answers."""
        in_fsm = (self.first_dead(s) is None and self.fsm.accepts(s) and self.lo <= len(s)
                  if len(s) <= self.limit else None)
        found = _re_search(self.judge_re, s)
        if found is None:
            assert in_fsm is not None
            return in_fsm
        want = self.lo <= len(s) and (self.hi is None or len(s) <= self.hi) and found
        assert in_fsm is None or in_fsm == want, ("the test's automaton disagrees with re", s)
        return want

    def first_dead(self, w: str) -> int | None:
        """The least j such that ``w[:j]`` is a prefix of no valid string (None: every prefix is)."""
        if self.bits is None:  # per state, bit n: a final state is exactly n characters away
            self.bits = {st: sum(1 << n for n, layer in enumerate(self.can) if st in layer) for st in self.fsm.states}
        top = len(self.can) - 1 if self.hi is None else self.hi
        s = self.fsm.initial
        for j in range(len(w) + 1):
            if j:
                s = self.step(s, w[j - 1])
            a, b = max(0, self.lo - j), top - j
            if s is None or b < a or not (self.bits.get(s, 0) >> a) & ((1 << (b - a + 1)) - 1):
                return j
        return None

    def draw(self, n: int, rng: random.Random) -> str | None:
        s, out = self.fsm.initial, []
        if n >= len(self.can) or s not in self.can[n]:
            return None
        for left in range(n, 0, -1):
            ch = rng.choice([c for c in ALPHABET if self.step(s, c) in self.can[left - 1]])
            out.append(ch)
            s = self.step(s, ch)
        return "".join(out)


def _doc(s: str) -> bytes:
    return json.dumps(s, ensure_ascii=False).encode()


def _first_refusal(c: Any, data: bytes) -> int | None:
    """Index of the first byte the constraint refuses, walked byte by byte."""
    s = c.start()
    for i, b in enumerate(data):
        s = c.advance(s, BY_BYTES[bytes([b])])
        if s is None:
            return i
    return None


@pytest.mark.parametrize("seed", range(12))
def test_random_patterns_and_bounds_against_re(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(3):
        pattern, (lo, hi) = random_pattern(rng), random_bounds(rng)
        schema = {"type": "string", "pattern": pattern, "minLength": lo}
        if hi is not None:
            schema["maxLength"] = hi
        try:
            c = make(schema)
        except SchemaError as e:  # refusals are by name; which patterns may be refused is below
            if "matches no JSON value" in str(e):  # no string of the pattern has such a length
                top = lo + 200 if hi is None else min(hi, lo + 200)  # (pumping: the automata are smaller)
                oracle = Oracle(pattern, lo, hi, top + 2)
                assert len(oracle.fsm.states) < 200
                assert all(oracle.draw(n, rng) is None for n in range(lo, top + 1)), schema
                continue
            assert "rules" in str(e), (schema, str(e))
            continue
        _check_against_re(c, schema, pattern, lo, hi, rng)


# One class repeated (``pattern_chunks.class_run``): counted as a plain string with the class as
# its unit. Classes with JSON escapes ('"', '\\', '\n') and multi-byte characters, m = 0..2 (no
# '.' inside a class: the Oracle reads every '.' as the wildcard).
CLASS_PATTERNS = ["^[ab]+$", "^[ab\\-é]*$", "^[^a]+$", r"^\d*$", "^(?:[ab])(?:[ab])[ab]*$", '^[a"\\\\\n€]+$', "^[ -~]+$"]


@pytest.mark.parametrize("seed", range(6))
def test_class_patterns_and_bounds_against_re(seed: int) -> None:
    """A pattern that is one character class repeated, with random bounds: compiled as counted
    class strings (no pattern chunk rules), judged by Python's ``re`` like the random patterns."""
    rng = random.Random(100 + seed)
    for pattern in rng.sample(CLASS_PATTERNS, 3):
        lo, hi = random_bounds(rng)
        schema = {"type": "string", "pattern": pattern, "minLength": lo}
        if hi is not None:
            schema["maxLength"] = hi
        text = JsonSchema(schema).to_lark("earley")
        assert "_u0" in text and "sp0" not in text, (schema, text[:300])
        _check_against_re(make(schema), schema, pattern, lo, hi, rng)


def _check_against_re(c: Any, schema: dict, pattern: str, lo: int, hi: int | None, rng: random.Random) -> None:
    """Strings the oracle draws at the bounds and chunk edges, and mutations of them, are accepted
    exactly when ``re`` and the length check say so; walked byte by byte, a mutated string is
    refused at the first character after which no valid string can follow."""
    limit = (hi if hi is not None else lo + 40) + 2
    oracle = Oracle(pattern, lo, hi, limit)
    lengths = {lo - 1, lo, lo + 1, (hi or lo) - 1, hi or lo + 17, (hi or lo) + 1, 15, 16, 17, 31, 32, 33}
    lengths |= set(range(6))
    lengths |= {rng.randint(0, limit) for _ in range(3)}
    checked = 0
    for n in sorted(x for x in lengths if 0 <= x <= limit):
        # (strings of n letters, in the language or not: a too-short or too-long string is never drawn)
        for t in ("".join(rng.choices("ab", k=n)), "".join(rng.choices(ALPHABET, k=n))):
            assert accepts(c, _doc(t)) == oracle.judge(t), (schema, t[:80], len(t))
        s = oracle.draw(n, rng)
        if s is None:
            continue
        for t in (s, s[:-1] + rng.choice(ALPHABET) if s else s, rng.choice(ALPHABET) + s[1:]):
            want = oracle.judge(t)
            assert accepts(c, _doc(t)) == want, (schema, t[:80], len(t), want)
            checked += 1
    assert checked, schema
    # prefixes: a mutated string is refused exactly where it stops being completable
    for _ in range(2):
        s = oracle.draw(rng.choice([lo, hi or lo + 5, rng.randint(lo, hi or lo + 20)]), rng)
        if not s:
            continue
        i = rng.randrange(len(s))
        t = s[:i] + rng.choice(ALPHABET) + s[i + 1:] + rng.choice(["", "a", "é" * 20])
        bad = oracle.first_dead(t)
        data = _doc(t)
        got = _first_refusal(c, data)
        if bad is None:
            assert got is None or got == len(data) - 1 and not oracle.judge(t), (schema, t)
        else:  # the refused byte is inside the first character that cannot be completed
            start = len(_doc(t[:bad - 1])) - 1
            end = len(_doc(t[:bad])) - 1
            assert got is not None and start <= got < end, (schema, t[:80], bad, got, start, end)




@pytest.mark.parametrize("pattern,hi", [("^https?://.+$", 1024), ("^https?://.+$", 10_000),
                                        (r"^[a-z][-a-z0-9\.\+]*$", 2048), (r"^([Hh][Tt][Tt][Pp][Ss]?)://.+$", 2000),
                                        (r".*\{\{.+}}.*", 255), (r"^[\w /-]+\.[0-9a-zA-Z]+$", 1024)])
def test_real_patterns_with_long_bounds_compile_small(pattern: str, hi: int) -> None:
    """Real schemas' patterns (maskbench; the issue's URL) with their bounds: compiled, not
    refused or dropped, and the grammar text grows at most linearly with the bound (a counter),
    where the product's regex grew with the bound times the pattern's states."""
    def size(n: int) -> int:
        return len(JsonSchema({"type": "string", "pattern": pattern, "maxLength": n}).to_lark("earley"))

    assert size(hi) <= 2.2 * size(hi // 2), (size(hi // 2), size(hi))
    rx = re.compile(pattern)
    c = make({"type": "string", "pattern": pattern, "maxLength": hi})
    ok = next(s for s in ("http://" + "x" * (hi - 7), "https://a.io", "ab{{c}}", "a.b", "ab") if rx.search(s))
    assert accepts(c, _doc(ok[:hi]) if rx.search(ok[:hi]) else _doc(ok))
    assert not accepts(c, _doc(ok + "x" * (hi + 1 - len(ok))))


def test_a_pattern_whose_states_grow_with_the_bound_is_refused_by_name() -> None:
    """A pattern with its own counter (50 words) times a 500-character bound would need more
    than MAX_PATTERN_RULES rules: refused with the keyword's pointer, not silently loosened."""
    with pytest.raises(SchemaError) as e:
        JsonSchema({"type": "string", "pattern": r"^(?:\S+\s+){0,49}\S+$", "maxLength": 500}).to_lark()
    assert e.value.pointer == "/maxLength" and "rules" in str(e.value)


@pytest.mark.parametrize("items", [{"type": "string", "maxLength": 100},
                                   {"type": "string", "pattern": "^x", "maxLength": 100}])
def test_counted_strings_beside_other_alternatives_at_one_array_position(items: dict) -> None:
    """Strings counted by rules (chunked, or pattern chunks) at a position other alternatives
    share: the position's values were split into parts and the counted part was judged to derive
    nothing, so ``["xab"]`` was refused by a schema it satisfies (found while building this)."""
    schema = {"anyOf": [{"type": "array", "items": items}, {"type": "array", "items": {"type": "integer"}}]}
    c = make(schema)
    assert accepts(c, b'["xab"]') and accepts(c, b"[1,2]")
    assert not accepts(c, b'["x",1]') and not accepts(c, b'["x' + b"y" * 100 + b'"]')


def test_a_large_automaton_with_a_bound_compiles_in_short_chunks() -> None:
    """The email format's automaton (172 states) with maxLength 40: the 8- and 16-character
    chunks would need thousands of regexes (counted from the layout, before any is built), so
    one-character chunks are used; before, this was refused after a product too large."""
    c = make({"type": "string", "format": "email", "maxLength": 40})
    assert accepts(c, b'"ada@example.com"') and accepts(c, _doc("a" * 28 + "@example.com"))
    assert not accepts(c, _doc("a" * 29 + "@example.com")) and not accepts(c, b'"ada.example.com"')
