"""Linear ASCII regexes -> byte NFA directly, without interegular.

A *linear* pattern is a sequence of items, each one ASCII character or ASCII character class
(``a``, ``\\{``, ``\\u0009``, ``[ \\t\\n\\r]``, ``[a-z_]``) with an optional quantifier (``?``,
``*``, ``+``, ``{m}``, ``{m,n}``): no alternation, groups, negated classes, dots or shorthand
classes. Flexible-whitespace JSON Schema grammars are full of them (``[ \\t\\n\\r]{0,64},[ \\t\\n\\r]{0,64}``),
and interegular builds ``{0,64}`` as 64 FSM concatenations, each determinised: ~10 ms a pattern,
most of a schema's regex time. Here the NFA is written down in one pass; ``regex.py`` then
determinises, trims and minimises it as any other. Anything else returns None (interegular's path).

Construction (epsilon-free, the Glushkov idea for a concatenation): ``frontier`` holds the states
where the items read so far may end. An item ``S{lo,hi}`` is a chain ``c1 .. c_hi`` of states,
entered on ``S`` from every frontier state; the new frontier is ``{c_k : lo <= k <= hi}`` (plus the
old frontier when ``lo == 0``); ``S*`` adds one state with a self-loop.
"""

from __future__ import annotations

_META = set(".^$*+?{}[]()|\\/")
_ESCAPES = {"t": 9, "n": 10, "r": 13, "f": 12, "v": 11}
MAX_REPEAT = 1024  # a bound above this is left to interegular (chains this long are rare and large)

Edges = list[list[tuple[int, int, int]]]  # per NFA state: (first byte, last byte, target)


def _char(p: str, i: int, in_class: bool) -> tuple[int, int] | None:
    """(byte, next index) of the single ASCII character at ``p[i]``, or None if it is not one."""
    c = p[i]
    if c != "\\":
        if ord(c) >= 0x80 or (not in_class and c in _META) or (in_class and c in "[]^"):
            return None
        return ord(c), i + 1
    if i + 1 >= len(p):
        return None
    e = p[i + 1]
    if e in _ESCAPES:
        return _ESCAPES[e], i + 2
    if e == "u" or e == "x":
        n = 4 if e == "u" else 2
        digits = p[i + 2:i + 2 + n]
        if len(digits) != n or any(d not in "0123456789abcdefABCDEF" for d in digits):
            return None
        v = int(digits, 16)
        return (v, i + 2 + n) if v < 0x80 else None
    if e in _META or e in "-,:;#=!<>'\"@%&~` ":  # escaped punctuation stands for itself
        return ord(e), i + 2
    return None  # \d \w \s \b, backreferences, ...: interegular's business


def _item(p: str, i: int) -> tuple[list[tuple[int, int]], int] | None:
    """(sorted byte ranges, next index) of the character or class at ``p[i]``."""
    if p[i] != "[":
        got = _char(p, i, in_class=False)
        return None if got is None else ([(got[0], got[0])], got[1])
    i += 1
    if i < len(p) and p[i] == "^":
        return None  # a negated class holds non-ASCII characters: UTF-8 expansion needed
    members: set[int] = set()
    while i < len(p) and p[i] != "]":
        got = _char(p, i, in_class=True)
        if got is None:
            return None
        lo, i = got
        if i + 1 < len(p) and p[i] == "-" and p[i + 1] != "]":
            hi_got = _char(p, i + 1, in_class=True)
            if hi_got is None or hi_got[0] < lo:
                return None
            hi, i = hi_got
            members.update(range(lo, hi + 1))
        else:
            members.add(lo)
    if i >= len(p) or not members:
        return None
    ranges: list[tuple[int, int]] = []
    for b in sorted(members):
        if ranges and ranges[-1][1] == b - 1:
            ranges[-1] = (ranges[-1][0], b)
        else:
            ranges.append((b, b))
    return ranges, i + 1


def _quantifier(p: str, i: int) -> tuple[int, int | None, int] | None:
    """(lo, hi or None for unbounded, next index); (1, 1, i) when there is none."""
    if i >= len(p) or p[i] not in "?*+{":
        return 1, 1, i
    c = p[i]
    if c == "{":
        j = p.find("}", i)
        if j < 0:
            return None
        body = p[i + 1:j].split(",")
        if len(body) > 2 or not all(x.isdigit() for x in body):
            return None  # {m,} and malformed bounds go to interegular
        lo, hi = int(body[0]), int(body[-1])
        if hi < lo or hi > MAX_REPEAT:
            return None
        q, i = (lo, hi), j + 1
    else:
        q, i = {"?": (0, 1), "*": (0, None), "+": (1, None)}[c], i + 1
    if i < len(p) and p[i] in "?+":
        return None  # lazy / possessive
    return q[0], q[1], i


def linear_nfa(pattern: str) -> tuple[Edges, set[int]] | None:
    """(edges, final states) of the byte NFA of a linear ASCII ``pattern`` (start state 0), or
    None when the pattern is not linear (module docstring)."""
    edges: Edges = [[]]
    frontier = [0]
    i = 0
    while i < len(pattern):
        item = _item(pattern, i)
        if item is None:
            return None
        ranges, i = item
        q = _quantifier(pattern, i)
        if q is None:
            return None
        lo, hi, i = q
        ends = list(frontier) if lo == 0 else []
        entry = frontier
        for k in range(1, (hi if hi is not None else max(lo, 1)) + 1):
            edges.append([])
            n = len(edges) - 1
            for f in entry:
                edges[f].extend((a, b, n) for a, b in ranges)
            entry = [n]
            if k >= lo:
                ends.append(n)
        if hi is None:  # the last chain state loops
            n = entry[0]
            edges[n].extend((a, b, n) for a, b in ranges)
            if n not in ends:
                ends.append(n)
        frontier = ends
    return edges, set(frontier)
