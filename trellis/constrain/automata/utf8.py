"""Code point ranges -> UTF-8 byte automata.

``codepoint_ranges_to_utf8`` splits code point ranges into byte-range sequences (surrogates
skipped), so that a character set becomes a few byte paths; ``utf8_dawg`` merges those paths into
the minimal acyclic byte automaton. Both the regex compiler (character sets in byte NFAs) and the
finished-DFA products (``byte_dfa.restrict_first_char``) build on them.
"""

from __future__ import annotations

from functools import lru_cache

from trellis.constrain.automata.charsets import Ranges

_SURROGATES = (0xD800, 0xDFFF)

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


@lru_cache(maxsize=4096)
def utf8_dawg(ranges: Ranges) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """The minimal acyclic byte automaton of the UTF-8 encodings of ``ranges``: nodes (node 0 the
    root) of edges (first byte, last byte, target node; -1 the end). ``codepoint_ranges_to_utf8``
    splits ranges so that at any prefix two sequences' next byte ranges are equal or disjoint
    (a lead range wider than one byte is followed only by full continuation ranges), so the trie
    of the sequences is deterministic; equal subtrees are then merged (Unicode ``\\w``: 734 ranges,
    ~1,000 sequences, a few hundred nodes)."""
    trie: dict = {}
    for seq in codepoint_ranges_to_utf8(list(ranges)):
        node = trie
        for r in seq:
            node = node.setdefault(r, {})
    out: list[tuple[tuple[int, int, int], ...]] = [()]
    sig_id: dict[tuple, int] = {}

    def canon(node: dict) -> int:
        if not node:
            return -1
        sig = tuple((lo, hi, canon(child)) for (lo, hi), child in sorted(node.items()))
        j = sig_id.get(sig)
        if j is None:
            j = sig_id[sig] = len(out)
            out.append(sig)
        return j

    out[0] = tuple((lo, hi, canon(child)) for (lo, hi), child in sorted(trie.items()))
    return tuple(out)
