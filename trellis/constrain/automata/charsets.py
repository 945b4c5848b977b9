"""Character sets as sorted, disjoint code point ranges (``Ranges``): their algebra (union,
complement, difference, intersection) and the ECMA-262 classes ``\\s \\d \\w .``."""

from __future__ import annotations

from typing import Any, Iterable

MAXC = 0x10FFFF
Ranges = tuple  # sorted, disjoint, non-adjacent (lo, hi) code point ranges


def cs(*items: int | tuple[int, int]) -> Ranges:
    rs = [(i, i) if isinstance(i, int) else i for i in items]
    return _norm(rs)


def _norm(rs: Iterable[tuple[int, int]]) -> Ranges:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(rs):
        if lo > hi:
            continue
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


def cs_union(a: Ranges, b: Ranges) -> Ranges:
    return _norm(list(a) + list(b))


def cs_neg(a: Ranges) -> Ranges:
    out, nxt = [], 0
    for lo, hi in a:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAXC:
        out.append((nxt, MAXC))
    return tuple(out)


def cs_diff(a: Ranges, b: Ranges) -> Ranges:
    return cs_inter(a, cs_neg(b))


def cs_inter(a: Ranges, b: Ranges) -> Ranges:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def alphabet_ranges(alphabet: Any) -> dict[Any, Ranges]:
    """The characters of each transition of an interegular ``Alphabet`` (its ``anything_else``
    symbol stands for every character the alphabet does not name)."""
    from interegular.fsm import anything_else

    other = cs_neg(cs(*[ord(c) for c in alphabet._symbol_mapping if c is not anything_else]))
    out: dict[Any, Ranges] = {}
    for t, chars in alphabet.by_transition.items():
        r = cs(*[ord(c) for c in chars if c is not anything_else])
        out[t] = cs_union(r, other) if any(c is anything_else for c in chars) else r
    return out


def cs_has(a: Ranges, c: int) -> bool:
    return any(lo <= c <= hi for lo, hi in a)


def cs_size(a: Ranges) -> int:
    return sum(hi - lo + 1 for lo, hi in a)


ANYCHAR: Ranges = ((0, MAXC),)
SURROGATES: Ranges = ((0xD800, 0xDFFF),)
CONTROLS: Ranges = ((0, 0x1F),)
ECMA_SPACE = cs(9, 10, 11, 12, 13, 32, 0xA0, 0x1680, (0x2000, 0x200A), 0x2028, 0x2029, 0x202F, 0x205F,
                0x3000, 0xFEFF)
ECMA_DIGIT = cs((48, 57))
ECMA_WORD = cs((48, 57), (65, 90), 95, (97, 122))
ECMA_DOT = cs_neg(cs(10, 13, 0x2028, 0x2029))
