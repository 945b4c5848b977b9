"""The strings of a finite language, enumerated: of a regex IR (``ir_words``) or of an interegular
FSM (``fsm_words``), or None when the language is infinite or has more than ``limit`` strings;
and the Venn regions of regexes that are such languages (``venn_words``).

Why: a JSON Schema ``oneOf`` over tagged objects (``"type": {"pattern": "^Abs$"}``, ``"const"``,
``"enum"``) asks, per pair of branches, whether two string sets meet, and splits the values one
key may take into Venn regions. Done with automata products that is O(n^2) products for n
branches: 41 tags took 160 ms of a 38 KB schema's translation (maskbench
Github_ultra---o17072, bench_fresh's p95 tail). When a side is a handful of strings, testing
each string is exact and takes microseconds."""

from __future__ import annotations

from typing import Any

from trellis.constrain.automata.regex import literal_alternatives
from trellis.constrain.automata.regex_ir import alt, lit, live_states, regex_fsm, to_regex

LIMIT = 256  # strings enumerated at most: past that the automata are no slower than the strings


def ir_words(x: tuple, limit: int = LIMIT) -> list[str] | None:
    """The strings of regex IR ``x`` (``regex_ir``'s tuples), each once, or None when there are
    infinitely many or more than ``limit``."""
    k = x[0]
    if k == "none":
        return []
    if k == "eps":
        return [""]
    if k == "set":
        if sum(hi - lo + 1 for lo, hi in x[1]) > limit:
            return None
        return [chr(c) for lo, hi in x[1] for c in range(lo, hi + 1)]
    if k == "cat":
        out = [""]
        for p in x[1]:
            ws = ir_words(p, limit)
            if ws is None or len(out) * len(ws) > limit:
                return None
            out = [a + b for a in out for b in ws]
        return list(dict.fromkeys(out))
    if k == "alt":
        seen: dict[str, None] = {}
        for p in x[1]:
            ws = ir_words(p, limit)
            if ws is None:
                return None
            seen.update(dict.fromkeys(ws))
            if len(seen) > limit:
                return None
        return list(seen)
    _, y, m, n = x  # ("rep", y, min, max|None)
    ws = ir_words(y, limit)
    if ws is None or (n is None and ws != [""] and ws != []):
        return None
    if not ws:
        return [""] if m == 0 else []
    if ws == [""]:
        return [""]
    seen = dict.fromkeys([""]) if m == 0 else {}
    cur = [""]
    for i in range(1, n + 1):  # n is not None here
        cur = list(dict.fromkeys(a + b for a in cur for b in ws))
        if len(cur) > limit:
            return None
        if i >= m:
            seen.update(dict.fromkeys(cur))
            if len(seen) > limit:
                return None
    return list(seen)


def fsm_words(f: Any, limit: int = LIMIT) -> list[str] | None:
    """The strings an interegular FSM accepts, or None when there are infinitely many, more than
    ``limit``, or a live transition on ``anything_else`` (all characters not named)."""
    from interegular.fsm import anything_else

    live = live_states(f)
    if f.initial not in live:
        return []
    chars = f.alphabet.by_transition
    out: list[str] = []
    on_path: set = set()

    def walk(q: Any, prefix: str) -> bool:
        if q in f.finals:
            out.append(prefix)
            if len(out) > limit:
                return False
        on_path.add(q)
        for sym, t in f.map.get(q, {}).items():
            if t not in live:
                continue
            if t in on_path:
                return False  # a cycle through live states: infinitely many strings
            cs = chars[sym]
            if anything_else in cs:
                return False
            for c in cs:
                if not walk(t, prefix + c):
                    return False
        on_path.discard(q)
        return True

    # sorted: the FSM's transition order may follow string hashes (a grammar's text must not
    # change between processes: it keys the compiled-grammar memo and the disk cache)
    return sorted(set(out)) if walk(f.initial, "") else None


def venn_words(items: list[tuple[str, set]]) -> list[tuple[str, set]] | None:
    """The Venn regions of ``items`` ((regex, tags) pairs), as ``ScalarRules._venn`` makes them
    with automata, when every item is a few strings: the strings grouped by the items that hold
    them (a string lies in the region of exactly those items); None otherwise."""
    owner: dict[str, set] = {}
    for rx, ts in items:
        ws = plain_words(rx)
        if ws is None:
            ws = fsm_words(regex_fsm(rx))
        if ws is None:
            return None
        for w in ws:
            owner.setdefault(w, set()).update(ts)
    regions: dict[frozenset, list[str]] = {}
    for w, ts in owner.items():  # (in the items' order, each item's strings sorted: fsm_words)
        regions.setdefault(frozenset(ts), []).append(w)
    return [(to_regex(alt(*[lit(w) for w in ws])), set(ts)) for ts, ws in regions.items()]


def plain_words(rx: str) -> list[str] | None:
    """The strings of ``rx``, sorted, read off its text when it is literal characters or one group
    of literal alternatives, as a tag's or an enum's regex is (``regex.literal_alternatives``,
    which a terminal's string enum takes too); None for any other regex (the automata decide).
    interegular's parse and FSM cost ~0.4 ms per regex the process had not seen: 41 module tags
    were 16 of the 36 ms of Github_ultra o17072's first translation in a process (/tmp timing of
    ``to_lark`` warm and cold, forty-eighth session)."""
    words = literal_alternatives(rx if rx.startswith("(?:") else f"(?:{rx})")
    return None if words is None else sorted({w.decode("utf-8", "surrogatepass") for w in words})
