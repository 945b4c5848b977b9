"""Regular expressions -> byte-level DFAs.

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

This module holds the pattern -> DFA entry points (``regex_to_byte_dfa``, ``terminal_parts`` /
``terminal_dfa`` for grammar terminals, with lazy quantifiers and follow guards); the ``Regex``
constraint is ``regex_constraint.py``, the automaton type and its algebra are ``byte_dfa.py``, determinising and minimising
``dfa_minimise.py`` (their names that callers reach through this module are re-exported).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable

import numpy as np

from trellis.constrain.automata.byte_dfa import (ByteDFA, difference, intersects, literal_dfa,
                                        restrict_first_char, trim, word_trie)
from trellis.constrain.automata.counted_repeat import counted_repeat
from trellis.constrain.automata.dfa_minimise import (MAX_DFA_STATES, determinised, minimal, minimise,
                                            subset_construction, unique_rows)
from trellis.constrain.errors import GrammarError
from trellis.constrain.automata.regex_compile import Lookaround, RegexTooLarge, RegexUnsupported, regex_nfa

if TYPE_CHECKING:
    from trellis.constrain.automata.lookaround import FollowGuard


# ----------------------------------------------------------------------------- pattern checks

_REWRITES = {
    # lark's common.ESCAPED_STRING uses a lookbehind and a lazy quantifier; this is the same
    # language with no lookaround (the closing quote is the first unescaped one).
    r'".*?(?<!\\)(\\\\)*?"': r'"(?:[^"\\\n]|\\[^\n])*"',
    r'"(?:.*?)(?<!\\)(?:\\\\)*?"': r'"(?:[^"\\\n]|\\[^\n])*"',
}


DFA_MEMO: dict[str, ByteDFA] = {}  # pattern -> DFA; generated grammars repeat terminals
_DFA_MEMO_MAX = 4096


def regex_to_byte_dfa(pattern: str, *, name: str = "regex") -> ByteDFA:
    """Compile a Python-syntax regex into a trimmed ``ByteDFA`` over UTF-8 bytes (memoised per
    process: DFAs are never mutated, and a failure is raised again, with this ``name``)."""
    dfa = DFA_MEMO.get(pattern)
    if dfa is None:
        dfa = build_byte_dfa(pattern, name=name)
        dfa.trans.setflags(write=False)  # shared from now on
        dfa.final.setflags(write=False)
        if len(DFA_MEMO) >= _DFA_MEMO_MAX:
            DFA_MEMO.clear()
        DFA_MEMO[pattern] = dfa
    return dfa


def build_byte_dfa(pattern: str, *, name: str) -> ByteDFA:
    """``regex_to_byte_dfa`` without the memo: a new DFA each call."""
    trans, final, guards = _automaton(_REWRITES.get(pattern, pattern), name=name)
    if guards is not None and any(g is not None for g in guards):
        # The full-match language of a text on its own: a match that ends under a follow guard (a
        # trailing lookahead, ``$``, ``\Z``) ends the text, so it counts iff the guard lets the text
        # end there, as re.fullmatch judges it ("a(?!b)", "a$" and "a\Z" match "a"; "a(?=b)" and
        # "a$" with "a\n" do not).
        final = final | np.array([g is not None and g.at_end for g in guards], dtype=bool)
    return minimal(trans, final, name=name, pattern=pattern)


def _automaton(pattern: str, *, name: str, ordered: bool = False) -> tuple[np.ndarray, np.ndarray, list | None]:
    """(trans, final, guards) of ``pattern`` (not minimal): the plain subset construction, or the
    lookaround one (``lookaround.automaton``) where the regex has a lookaround or ``ordered``
    asks for the first-match language; ``guards`` (per state, a ``FollowGuard`` or None) comes
    from the latter only. Every failure is a ``GrammarError`` naming ``name``."""

    from trellis.constrain.automata.lookaround import automaton

    try:
        if ordered:
            return automaton(pattern, ordered=True)
        words = literal_alternatives(pattern)
        if words is not None:  # a string enum: its trie, no NFA (0.1-0.25 ms -> ~20 us a schema enum)
            return (*_trie(words), None)
        counted = counted_repeat(pattern)
        if counted is not None:  # a length-bounded string: units counted, no subsets (counted_repeat.py)
            return (*counted, None)
        try:
            edges, finals = regex_nfa(pattern)
        except Lookaround:
            return automaton(pattern)
        return (*determinised(edges, finals, 0), None)
    except RegexTooLarge as e:  # from any stage: the NFA, the subsets, the lookaround automaton
        raise GrammarError(f"{name}: regex too large ({e}) in /{pattern}/") from None
    except RegexUnsupported as e:
        raise GrammarError(f"{name}: regex feature not supported ({e}) in /{pattern}/") from None
    except (re.error, OverflowError, RecursionError) as e:
        raise GrammarError(f"{name}: invalid regex ({e}) in /{pattern}/") from None


_ALTERNATIVES = re.compile(r'("?)\(\?:(.*)\)\1', re.S)
_META = frozenset("[](){}*+?.^$|\\")


def literal_alternatives(pattern: str) -> list[bytes] | None:
    """The strings of a pattern that is an alternation of literals, ``(?:a|b\\.c)`` or quoted
    ``"(?:a|b)"`` (how a JSON Schema string ``enum`` is written: ``re.escape``d values), as UTF-8;
    None for anything else (a class, a quantifier, a group, an escape other than a backslashed
    punctuation character or space)."""
    m = _ALTERNATIVES.fullmatch(pattern) if isinstance(pattern, str) else None  # (bytes patterns too)
    if m is None:
        return None
    quote, body = m.group(1), m.group(2)
    words: list[bytes] = []
    cur: list[str] = []
    chars = iter(body)
    for c in chars:
        if c == "\\":
            c = next(chars, "")
            if not c or c.isalnum() or c == "_" or not c.isascii():
                return None  # \d, \x41, \u00e9, \n...: not a plain literal character
        elif c == "|":
            words.append((quote + "".join(cur) + quote).encode("utf-8", "surrogatepass"))
            cur = []
            continue
        elif c in _META:
            return None
        cur.append(c)
    words.append((quote + "".join(cur) + quote).encode("utf-8", "surrogatepass"))
    return words


def _trie(words: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(trans, final) of the trie of ``words`` (``byte_dfa.word_trie``; not minimal)."""
    children, end = word_trie(words)
    flat = [(q << 8) | b for q, ch in enumerate(children) for b in ch]
    trans = np.full(len(end) * 256, -1, dtype=np.int32)
    trans[flat] = [c for ch in children for c in ch.values()]
    return trans.reshape(len(end), 256), np.array(end, dtype=bool)


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
# a terminal literal as written -> (a builder of its one DFA, its size): ``seed_parts``, run by the
# first ``terminal_parts``. Bounded by the states the builders hold (~0.3 KB each in interegular's
# maps): a translation that is never compiled leaves its entries until the bound drops them.
PENDING_PARTS: dict[str, tuple] = {}
PENDING_MAX_SIZE = 200_000
_pending_size = 0


def terminal_parts(pattern: str, *, name: str, written: str | None = None) -> list[tuple[ByteDFA, "FollowGuard | None"]]:
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
    Memoised per pattern (the DFAs are shared, never mutated). ``written``: the terminal's literal
    in the grammar text, whose DFA a translation may have offered (``seed_parts``)."""
    hit = PARTS_MEMO.get(pattern)
    if hit is None:
        hit = (written is not None and _seeded_parts(pattern, written)) or _terminal_parts(pattern, name=name)
        if len(PARTS_MEMO) >= _DFA_MEMO_MAX:
            PARTS_MEMO.clear()
        PARTS_MEMO[pattern] = hit
    return hit


def seed_parts(written: str, build: "Callable[[], ByteDFA | None]", size: int) -> None:
    """Let ``terminal_parts`` take the DFA of the terminal written ``written`` in a grammar's text
    (its literal, ``/.../``) from ``build()`` instead of parsing the regex, when a grammar reader
    first asks for it: the minimal DFA of the literal's language, made from an automaton the
    caller holds (``encoded_dfa``). Keyed by the literal as written, so the reader's reading of
    it (escapes) needs no copy here. Called per translation, run per compile: a terminal that no
    grammar compiles costs nothing. ``size``: what ``build`` holds alive (its automaton's states),
    bounded all together by ``PENDING_MAX_SIZE``. For plain regexes only (no lazy quantifier, no
    flags: ``terminal_parts`` checks)."""
    global _pending_size
    if not PENDING_PARTS:  # (a caller that restores the dict itself, a benchmark, leaves no stale count)
        _pending_size = 0
    old = PENDING_PARTS.pop(written, None)
    if old is not None:
        _pending_size -= old[1]
    if _pending_size + size > PENDING_MAX_SIZE:  # (what is dropped is parsed from its regex instead)
        PENDING_PARTS.clear()
        _pending_size = 0
    PENDING_PARTS[written] = (build, size)
    _pending_size += size


def clear_pending() -> None:
    global _pending_size
    PENDING_PARTS.clear()
    _pending_size = 0


def _seeded_parts(pattern: str, written: str) -> list | None:
    global _pending_size
    hit = PENDING_PARTS.pop(written, None)  # (first: most terminals were offered nothing)
    if hit is None:
        return None
    build, size = hit
    _pending_size -= size
    if pattern in _REWRITES or strip_lazy(pattern) != pattern:  # (its parts are not its plain language)
        return None
    try:
        dfa = build()
    except (RegexUnsupported, GrammarError):  # (a bound: the regex's own path says so, typed)
        return None
    return None if dfa is None else [(_frozen(dfa), None)]


def _terminal_parts(pattern: str, *, name: str) -> list:
    lazy = pattern not in _REWRITES and strip_lazy(pattern) != pattern
    if lazy and _lazy_form(pattern) is None:  # literal, lazy loop over characters, literal: 10x cheaper
        return [(shortest_matches(regex_to_byte_dfa(strip_lazy(pattern), name=name)), None)]
    trans, final, guards = _automaton(_REWRITES.get(pattern, pattern), name=name, ordered=lazy)
    parts = []
    if final.any():
        parts.append((_frozen(minimal(trans, final, name=name, pattern=pattern)), None))
    for g in dict.fromkeys(g for g in guards or () if g is not None):
        ends = np.array([x == g for x in guards], dtype=bool)  # type: ignore[union-attr]
        parts.append((_frozen(minimal(trans, ends, name=name, pattern=pattern)), g))
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


# this module's names and the re-exported ones of byte_dfa.py and dfa_minimise.py
__all__ = ["DFA_MEMO", "MAX_DFA_STATES", "PARTS_MEMO", "PENDING_PARTS", "clear_pending", "ByteDFA", "build_byte_dfa",
           "difference", "intersects", "literal_dfa", "minimise", "regex_to_byte_dfa",
           "restrict_first_char", "seed_parts", "shortest_matches", "strip_lazy", "subset_construction", "terminal_dfa",
           "terminal_parts", "trim", "unique_rows"]
