"""ECMA-262 ``pattern``s as regex IR: the syntax Python's parser reads differently is rewritten,
what has no exact automaton is refused (``Unsupported``), and the parse tree becomes IR with
search semantics (unanchored unless ``^``/``$``)."""

from __future__ import annotations

import re
from typing import Any, Iterable

from trellis.constrain.automata.finite_words import ir_words
from trellis.constrain.automata.charsets import ECMA_DIGIT, ECMA_DOT, ECMA_SPACE, ECMA_WORD, cs, cs_neg, cs_union
from trellis.constrain.automata.regex_ir import ANYSTAR, EPS, MAX_REPEAT, NONE, Unsupported, alt, cat, ch, dec_regex, ir_len, rep

try:
    import re._constants as _src
    import re._parser as _sre
except ImportError:  # Python < 3.11
    import sre_constants as _src  # type: ignore[no-redef]
    import sre_parse as _sre  # type: ignore[no-redef]


_ECMA_ESCAPES = set("dDwWsSbBtnvfr0cxukpP")
_CATEGORIES = {
    _src.CATEGORY_DIGIT: ECMA_DIGIT, _src.CATEGORY_NOT_DIGIT: cs_neg(ECMA_DIGIT),
    _src.CATEGORY_SPACE: ECMA_SPACE, _src.CATEGORY_NOT_SPACE: cs_neg(ECMA_SPACE),
    _src.CATEGORY_WORD: ECMA_WORD, _src.CATEGORY_NOT_WORD: cs_neg(ECMA_WORD),
}


def _ecma_to_python(p: str) -> str:
    """Rewrite the ECMA-262 syntax Python's parser reads differently; refuse what neither has."""
    out: list[str] = []
    i, n, in_class = 0, len(p), False
    while i < n:
        c = p[i]
        if c == "\\":
            if i + 1 >= n:
                raise Unsupported("pattern ends with a backslash")
            e = p[i + 1]
            if e in "pP":
                raise Unsupported("Unicode property escapes (\\p{...}) are not supported")
            if e == "c":
                raise Unsupported("control escapes (\\cX) are not supported")
            if e == "k":
                raise Unsupported("named backreferences are not supported")
            if e == "u" and p[i + 2:i + 3] == "{":
                raise Unsupported("\\u{...} escapes are not supported")
            if e in "bB" and not in_class:
                raise Unsupported("word boundaries (\\b, \\B) are not supported")
            if e.isdigit() and e != "0":
                raise Unsupported("backreferences are not supported")
            if e.isascii() and e.isalpha() and e not in _ECMA_ESCAPES:
                out.append(e)  # ECMA identity escape (Annex B): \a is "a", not BEL
                i += 2
                continue
            out.append(p[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            rest = p[i + 1:i + 3]
            if rest.startswith("]") or rest == "^]":
                raise Unsupported("empty classes [] and [^] are not supported")
            in_class = True
            out.append(c)
            i += 1
            if p[i:i + 1] == "^":
                out.append("^")
                i += 1
            continue
        elif c == "(" and p[i + 1:i + 3] == "?<" and p[i + 3:i + 4] not in ("=", "!"):
            out.append("(?P<")
            i += 3
            continue
        out.append(c)
        i += 1
    return "".join(out)


# pattern -> (IR, matcher, strings): the IR (an immutable tuple) and what is derived from it on
# demand (``_UNSET`` until then). A schema repeats its patterns: Github_ultra o17072's translation
# asked for 41 distinct patterns 3,178 times (0.56 of 1.9 s under cProfile), and matched them 3,096
# times (each match rebuilt the regex text from the IR: 80 of 376 ms under cProfile before the
# matcher was kept here). An entry is replaced, never changed, so a copy of the memo
# (bench_fresh.py's snapshot of the shared memos) stays as it was.
_UNSET: Any = object()
_IR_MEMO: dict[str, tuple] = {}


def _entry(pattern: str) -> tuple:
    hit = _IR_MEMO.get(pattern)
    if hit is None:
        hit = (_pattern_ir(pattern), _UNSET, _UNSET)
        if len(_IR_MEMO) >= 4096:
            _IR_MEMO.clear()
        _IR_MEMO[pattern] = hit
    return hit


def pattern_ir(pattern: str) -> tuple:
    """IR of the strings in which ``pattern`` (ECMA-262) matches somewhere (search semantics)."""
    return _entry(pattern)[0]


def pattern_words(pattern: str) -> list[str] | None:
    """The strings ``pattern`` matches when they are few (``^Abs$``; ``finite_words.ir_words``),
    else None (a new list each call: the memo keeps a tuple)."""
    ir, matcher, words = _entry(pattern)
    if words is _UNSET:
        ws = ir_words(ir)
        words = None if ws is None else tuple(ws)
        _IR_MEMO[pattern] = (ir, matcher, words)
    return None if words is None else list(words)


def _pattern_ir(pattern: str) -> tuple:
    try:
        p = _sre.parse(_ecma_to_python(pattern))
    except re.error as e:
        raise Unsupported(f"not a supported regex ({e})") from None
    except RecursionError:
        raise Unsupported("regex nested too deeply") from None
    if p.state.flags & ~(re.UNICODE | re.ASCII):
        raise Unsupported("inline flags are not ECMA-262")
    return _top(list(p))


def _top(items: list) -> tuple:
    if len(items) == 1:  # a top-level alternation: one search per branch (smaller automata)
        op, av = items[0]
        if op is _src.BRANCH:
            return alt(*[_top(list(b)) for b in av[1]])
        if op is _src.SUBPATTERN and not av[1] and not av[2]:
            return _top(list(av[3]))
    return alt(*[cat(EPS if a else ANYSTAR, x, EPS if e else ANYSTAR) for (a, e), x in _anchored(items).items()])


# Anchors anywhere (``^$|^...$``, which Python's parser reads as ``^(?:$|...$)``, or ``(,|$)``
# inside a group): a sub-pattern is a union of pieces keyed (a, e): IR strings that must start
# at position 0 (a) and/or end at the end of the text (e). ``^`` is (True, False) of the empty
# string, ``$`` (False, True). In a concatenation, a piece that must start at 0 empties what
# comes before it in the same match, and one that must end at the end empties what follows:
# ``a^b`` is nothing, ``(x|^)y`` is ``xy`` anywhere or ``y`` at the start.
_Pieces = dict  # {(starts_at_0, ends_at_end): IR}
_MAX_ANCHORED_UNROLL = 16  # bounded repetitions of anchored pieces are unrolled up to this


def _nullable(x: tuple) -> bool:
    return x != NONE and ir_len(x)[0] == 0


def _has_anchor(items: Iterable) -> bool:
    for op, av in items:
        if op is _src.AT:
            return True
        if op is _src.BRANCH and any(_has_anchor(b) for b in av[1]):
            return True
        if op is _src.SUBPATTERN and _has_anchor(av[3]):
            return True
        if op in (_src.MAX_REPEAT, _src.MIN_REPEAT) and _has_anchor(av[2]):
            return True
    return False


def _put(out: _Pieces, key: tuple, x: tuple) -> None:
    if x != NONE:
        out[key] = alt(out[key], x) if key in out else x


def _concat(p: _Pieces, q: _Pieces) -> _Pieces:
    out: _Pieces = {}
    for (a1, e1), x1 in p.items():
        for (a2, e2), x2 in q.items():
            left = (EPS if _nullable(x1) else NONE) if a2 else x1  # q starts at 0: p matched nothing
            right = (EPS if _nullable(x2) else NONE) if e1 else x2  # p ends at the end: q matched nothing
            _put(out, (a1 or a2, e1 or e2), cat(left, right))
    return out


def _anchored(items: list) -> _Pieces:
    if not _has_anchor(items):
        return {(False, False): _seq(items)}
    out: _Pieces = {(False, False): EPS}
    for op, av in items:
        out = _concat(out, _anchored_atom(op, av))
    return out


def _anchored_atom(op: Any, av: Any) -> _Pieces:
    if not _has_anchor([(op, av)]):
        return {(False, False): _atom(op, av)}
    if op is _src.AT:
        if av is _src.AT_BEGINNING:
            return {(True, False): EPS}
        if av is _src.AT_END:
            return {(False, True): EPS}
        raise Unsupported(f"anchor {av} is not supported")
    if op is _src.BRANCH:
        out: _Pieces = {}
        for b in av[1]:
            for key, x in _anchored(list(b)).items():
                _put(out, key, x)
        return out
    if op is _src.SUBPATTERN:
        if av[1] or av[2]:
            raise Unsupported("inline flags are not ECMA-262")
        return _anchored(list(av[3]))
    lo, hi, sub = av
    return _anchored_repeat(_anchored(list(sub)), int(lo), None if hi is _src.MAXREPEAT else int(hi))


def _anchored_repeat(d: _Pieces, lo: int, hi: int | None) -> _Pieces:
    """``d{lo,hi}``. Bounded: unrolled (``_concat`` is exact). Unbounded: in a run of copies the
    last one that must start at 0 (type A) has only empty copies before it and the first that
    must end at the end (type E) only empty ones after, so the run is P* | A P* | P* E | A P* E
    | B (B: both), P the unanchored copies, the count made up by empty copies where some may be
    empty (before A: P or A ones; after E: P or E ones)."""
    if lo > MAX_REPEAT:
        raise Unsupported(f"repetition count above {MAX_REPEAT}")
    if hi is not None:
        if hi > _MAX_ANCHORED_UNROLL:
            raise Unsupported(f"a repetition of more than {_MAX_ANCHORED_UNROLL} with an anchor inside")
        opt = dict(d)
        _put(opt, (False, False), EPS)
        out: _Pieces = {(False, False): EPS}
        for i in range(hi):
            out = _concat(out, d if i < lo else opt)
        return out
    p, a, e, b = (d.get(k, NONE) for k in ((False, False), (True, False), (False, True), (True, True)))
    pre = _nullable(p) or _nullable(a)  # empty copies may stand before an A copy
    post = _nullable(p) or _nullable(e)  # and after an E copy
    out: _Pieces = {}
    _put(out, (False, False), rep(p, lo, None))
    _put(out, (True, False), cat(a, rep(p, 0 if pre else max(lo - 1, 0), None)))
    _put(out, (False, True), cat(rep(p, 0 if post else max(lo - 1, 0), None), e))
    _put(out, (True, True), cat(a, rep(p, 0 if pre or post else max(lo - 2, 0), None), e))
    if lo <= 1 or pre or post:
        _put(out, (True, True), b)
    return out


def _seq(items: Iterable) -> tuple:
    return cat(*[_atom(op, av) for op, av in items])


def _atom(op: Any, av: Any) -> tuple:
    if op is _src.LITERAL:
        return ch(cs(av))
    if op is _src.NOT_LITERAL:
        return ch(cs_neg(cs(av)))
    if op is _src.ANY:
        return ch(ECMA_DOT)
    if op is _src.IN:
        neg, r = False, ()
        for o, a in av:
            if o is _src.NEGATE:
                neg = True
            elif o is _src.LITERAL:
                r = cs_union(r, cs(a))
            elif o is _src.RANGE:
                r = cs_union(r, cs(tuple(a)))
            elif o is _src.CATEGORY and a in _CATEGORIES:
                r = cs_union(r, _CATEGORIES[a])
            else:
                raise Unsupported(f"class item {o} not supported")
        return ch(cs_neg(r) if neg else r)
    if op is _src.BRANCH:
        return alt(*[_seq(b) for b in av[1]])
    if op is _src.SUBPATTERN:
        if av[1] or av[2]:
            raise Unsupported("inline flags are not ECMA-262")
        return _seq(av[3])
    if op in (_src.MAX_REPEAT, _src.MIN_REPEAT):
        lo, hi, sub = av
        hi = None if hi is _src.MAXREPEAT else int(hi)
        if lo > MAX_REPEAT or (hi is not None and hi > MAX_REPEAT):
            raise Unsupported(f"repetition count above {MAX_REPEAT}")
        return rep(_seq(sub), int(lo), hi)
    if op is _src.AT:  # _anchored takes every sub-pattern with an anchor
        raise Unsupported(f"anchor {av} is not supported")
    if op in (_src.ASSERT, _src.ASSERT_NOT):
        raise Unsupported("lookaround assertions are not supported")
    if op in (_src.GROUPREF, _src.GROUPREF_EXISTS):
        raise Unsupported("backreferences are not supported")
    raise Unsupported(f"regex construct {op} not supported")


_MATCHERS: dict[str, re.Pattern] = {}


def regex_matcher(rx: str) -> re.Pattern:
    """Python regex ``rx`` compiled (``re.DOTALL``), cached."""
    m = _MATCHERS.get(rx)
    if m is None:
        if len(_MATCHERS) > 4000:
            _MATCHERS.clear()
        m = _MATCHERS[rx] = re.compile(rx, re.DOTALL)
    return m


def pattern_matches(pattern: str, s: str) -> bool:
    """ECMA-262 search of ``pattern`` in ``s`` (exact, through the IR)."""
    ir, matcher, words = _entry(pattern)
    if matcher is _UNSET:  # None: matches nothing (e.g. "/^a$/")
        matcher = None if ir == NONE else regex_matcher(dec_regex(ir))
        _IR_MEMO[pattern] = (ir, matcher, words)
    return matcher is not None and matcher.fullmatch(s) is not None
