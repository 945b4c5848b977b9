"""ECMA-262 ``pattern``s as regex IR: the syntax Python's parser reads differently is rewritten,
what has no exact automaton is refused (``_Unsupported``), and the parse tree becomes IR with
search semantics (unanchored unless ``^``/``$``)."""

from __future__ import annotations

import re
from typing import Any, Iterable

from trellis.constrain.charsets import ECMA_DIGIT, ECMA_DOT, ECMA_SPACE, ECMA_WORD, cs, cs_neg, cs_union
from trellis.constrain.regex_ir import ANYSTAR, EPS, MAX_REPEAT, _Unsupported, alt, cat, ch, dec_regex, rep

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
                raise _Unsupported("pattern ends with a backslash")
            e = p[i + 1]
            if e in "pP":
                raise _Unsupported("Unicode property escapes (\\p{...}) are not supported")
            if e == "c":
                raise _Unsupported("control escapes (\\cX) are not supported")
            if e == "k":
                raise _Unsupported("named backreferences are not supported")
            if e == "u" and p[i + 2:i + 3] == "{":
                raise _Unsupported("\\u{...} escapes are not supported")
            if e in "bB" and not in_class:
                raise _Unsupported("word boundaries (\\b, \\B) are not supported")
            if e.isdigit() and e != "0":
                raise _Unsupported("backreferences are not supported")
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
                raise _Unsupported("empty classes [] and [^] are not supported")
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


def pattern_ir(pattern: str) -> tuple:
    """IR of the strings in which ``pattern`` (ECMA-262) matches somewhere (search semantics)."""
    try:
        p = _sre.parse(_ecma_to_python(pattern))
    except re.error as e:
        raise _Unsupported(f"not a supported regex ({e})") from None
    except RecursionError:
        raise _Unsupported("regex nested too deeply") from None
    if p.state.flags & ~(re.UNICODE | re.ASCII):
        raise _Unsupported("inline flags are not ECMA-262")
    return _top(list(p))


def _top(items: list) -> tuple:
    if len(items) == 1:
        op, av = items[0]
        if op is _src.BRANCH:
            return alt(*[_top(list(b)) for b in av[1]])
        if op is _src.SUBPATTERN and not av[1] and not av[2]:
            return _top(list(av[3]))
    start = end = False
    while items and items[0] == (_src.AT, _src.AT_BEGINNING):
        items, start = items[1:], True
    while items and items[-1] == (_src.AT, _src.AT_END):
        items, end = items[:-1], True
    return cat(EPS if start else ANYSTAR, _seq(items), EPS if end else ANYSTAR)


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
                raise _Unsupported(f"class item {o} not supported")
        return ch(cs_neg(r) if neg else r)
    if op is _src.BRANCH:
        return alt(*[_seq(b) for b in av[1]])
    if op is _src.SUBPATTERN:
        if av[1] or av[2]:
            raise _Unsupported("inline flags are not ECMA-262")
        return _seq(av[3])
    if op in (_src.MAX_REPEAT, _src.MIN_REPEAT):
        lo, hi, sub = av
        hi = None if hi is _src.MAXREPEAT else int(hi)
        if lo > MAX_REPEAT or (hi is not None and hi > MAX_REPEAT):
            raise _Unsupported(f"repetition count above {MAX_REPEAT}")
        return rep(_seq(sub), int(lo), hi)
    if op is _src.AT:
        raise _Unsupported("anchors (^, $) are supported only at the start/end of the pattern")
    if op in (_src.ASSERT, _src.ASSERT_NOT):
        raise _Unsupported("lookaround assertions are not supported")
    if op in (_src.GROUPREF, _src.GROUPREF_EXISTS):
        raise _Unsupported("backreferences are not supported")
    raise _Unsupported(f"regex construct {op} not supported")


_MATCHERS: dict[str, re.Pattern] = {}


def _matcher(rx: str) -> re.Pattern:
    m = _MATCHERS.get(rx)
    if m is None:
        if len(_MATCHERS) > 4000:
            _MATCHERS.clear()
        m = _MATCHERS[rx] = re.compile(rx, re.DOTALL)
    return m


def pattern_matches(pattern: str, s: str) -> bool:
    """ECMA-262 search of ``pattern`` in ``s`` (exact, through the IR)."""
    return _matcher(dec_regex(pattern_ir(pattern))).fullmatch(s) is not None
