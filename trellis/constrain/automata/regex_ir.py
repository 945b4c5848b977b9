"""A regex IR (immutable tuples over ``Ranges``) with smart constructors; its rendering as
Python regex text, over decoded characters or over their JSON string encoding; and conversions
to and from interegular automata (intersection, difference, state elimination back to a regex)."""

from __future__ import annotations

import heapq
import json
from typing import Any, Callable

from trellis.constrain.automata.charsets import (ANYCHAR, CONTROLS, SURROGATES, Ranges, alphabet_ranges, cs, cs_diff, cs_has,
                                        cs_inter, cs_neg, cs_size, cs_union)
from trellis.constrain.automata.fsm_product import minimal, product

# Bounds on what one regex may expand into (the schema compiler refuses beyond them, never
# silently loosens: see json_schema/__init__.py).
MAX_REPEAT = 2048  # longest bounded regex repetition, or range of enumerated multiples
MAX_REGEX_CHARS = 20_000  # longest regex text of one terminal built from an automaton
MAX_REGEX = 60_000  # IR nodes of one regex built from an automaton


# ============================================================================ regex IR
# Immutable tuples: ("none",) empty language, ("eps",), ("set", ranges), ("cat", parts),
# ("alt", parts), ("rep", x, min, max|None). Smart constructors keep them small.

NONE = ("none",)
EPS = ("eps",)


class TooComplex(Exception):
    """A regex (or automaton product) grew past its size limit while being built."""


class Unsupported(Exception):
    """A regex construct that cannot be compiled exactly (message says which)."""


def ch(r: Ranges) -> tuple:
    return ("set", r) if r else NONE


def lit(s: str) -> tuple:
    return cat(*[("set", ((ord(c), ord(c)),)) for c in s])


def cat(*xs: tuple) -> tuple:
    parts: list[tuple] = []
    for x in xs:
        if x[0] == "none":
            return NONE
        if x[0] == "eps":
            continue
        for y in (x[1] if x[0] == "cat" else (x,)):
            if parts and y == parts[-1] and y[0] == "rep" and y[2] == 0 and y[3] is None:
                continue  # y* y* == y*
            parts.append(y)
    if not parts:
        return EPS
    return parts[0] if len(parts) == 1 else ("cat", tuple(parts))


def alt(*xs: tuple) -> tuple:
    parts: list[tuple] = []
    sets: Ranges = ()
    has_set = False
    for x in xs:
        if x[0] == "none":
            continue
        for y in (x[1] if x[0] == "alt" else (x,)):
            if y[0] == "set":
                sets, has_set = cs_union(sets, y[1]), True
            elif y not in parts:
                parts.append(y)
    if has_set:
        parts.insert(0, ("set", sets))
    parts = _factor(parts)
    if not parts:
        return NONE
    if len(parts) == 1:
        return parts[0]
    if len(parts) == 2 and EPS in parts:
        other = parts[0] if parts[1] == EPS else parts[1]
        return rep(other, 0, 1)
    return ("alt", tuple(parts))


def _factor(parts: list[tuple]) -> list[tuple]:
    """Merge alternatives sharing a first or last element: ab|ac -> a(b|c) (keeps sizes down)."""
    if len(parts) < 2:
        return parts
    for end in (0, -1):
        groups: dict[tuple, list[int]] = {}
        for i, p in enumerate(parts):
            seq = p[1] if p[0] == "cat" else (p,)
            groups.setdefault(seq[end], []).append(i)
        for head, idx in groups.items():
            if len(idx) < 2 or head == EPS:
                continue
            rests = []
            for i in idx:
                p = parts[i]
                seq = p[1] if p[0] == "cat" else (p,)
                rests.append(cat(*(seq[1:] if end == 0 else seq[:-1])))
            merged = cat(head, alt(*rests)) if end == 0 else cat(alt(*rests), head)
            keep = [p for i, p in enumerate(parts) if i not in idx]
            return _factor(keep + [merged])
    return parts


def rep(x: tuple, lo: int, hi: int | None) -> tuple:
    if hi is not None and hi < lo:
        return NONE
    if x[0] == "none":
        return EPS if lo == 0 else NONE
    if x[0] == "eps" or hi == 0:
        return EPS
    if lo == 1 and hi == 1:
        return x
    if x[0] == "rep":
        _, y, a, b = x
        if a == 0 and b is None:  # (y*){m,n} == y*
            return x
        if lo == 0 and hi is None and a <= 1:  # (y{0|1,n})* == y*
            return ("rep", y, 0, None)
        if a == 0 and b == 1 and hi is None:  # (y?){m,} == y*
            return ("rep", y, 0, None)
    return ("rep", x, lo, hi)


ANY = ch(ANYCHAR)
ANYSTAR = rep(ANY, 0, None)


def _class_body(r: Ranges, esc: Callable[[int], str]) -> str:
    out = []
    for lo, hi in r:
        if hi == lo:
            out.append(esc(lo))
        elif hi == lo + 1:
            out.append(esc(lo) + esc(hi))
        else:
            out.append(f"{esc(lo)}-{esc(hi)}")
    return "".join(out)


def _esc_in_class(c: int) -> str:
    ch_ = chr(c)
    return "\\" + ch_ if ch_ in "\\]^-[" else ch_


def _esc_literal(c: int) -> str:
    ch_ = chr(c)
    return "\\" + ch_ if ch_ in ".^$*+?{}[]\\|()" else ch_


def _set_regex(r: Ranges) -> str:
    """A Python regex (raw characters) for a code point set; large sets as negated classes."""
    if len(r) == 1 and r[0][0] == r[0][1]:
        return _esc_literal(r[0][0])
    neg = cs_diff(cs_neg(r), SURROGATES)
    if cs_size(neg) < cs_size(r) and len(neg) <= len(r):
        if not neg:
            return "(?:[^\n]|\n)"
        return f"[^{_class_body(neg, _esc_in_class)}]"
    return f"[{_class_body(r, _esc_in_class)}]"


def regex_atom(s: str) -> str:
    """Regex text ``s`` as one atom a quantifier may follow: itself, or in a non-capturing group."""
    if len(s) == 1 or (s.startswith("\\") and len(s) == 2) or _is_atom(s):
        return s
    return f"(?:{s})"


def _is_atom(s: str) -> bool:
    """True when ``s`` is one bracket class or one balanced (...) group."""
    if s.startswith("[") and s.endswith("]"):
        i = 1 + (s[1:2] == "^")
        i += s[i:i + 1] == "]"
        while i < len(s):
            if s[i] == "\\":
                i += 2
                continue
            if s[i] == "]":
                return i == len(s) - 1
            i += 1
        return False
    if s.startswith("(") and s.endswith(")"):
        depth, i = 0, 0
        in_class = False
        while i < len(s):
            c = s[i]
            if c == "\\":
                i += 2
                continue
            if in_class:
                in_class = c != "]"
            elif c == "[":
                in_class = True
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0 and i != len(s) - 1:
                    return False
            i += 1
        return True
    return False


def quantifier(lo: int, hi: int | None) -> str:
    """The regex quantifier for ``lo`` to ``hi`` (None: unbounded) repetitions."""
    if (lo, hi) == (0, None):
        return "*"
    if (lo, hi) == (1, None):
        return "+"
    if (lo, hi) == (0, 1):
        return "?"
    if hi is None:
        return f"{{{lo},}}"
    if lo == hi:
        return f"{{{lo}}}"
    return f"{{{lo},{hi}}}"


def to_regex(x: tuple, leaf: Callable[[Ranges], str] = _set_regex) -> str:
    """Python regex text of an IR; ``leaf`` renders a character set (decoded or JSON-encoded)."""
    k = x[0]
    if k == "none":
        raise TooComplex("empty language")  # callers prune empty languages first
    if k == "eps":
        return ""
    if k == "set":
        return leaf(x[1])
    if k == "cat":
        return "".join(to_regex(p, leaf) for p in x[1])
    if k == "alt":
        return "(?:" + "|".join(to_regex(p, leaf) for p in x[1]) + ")"
    _, y, lo, hi = x
    return regex_atom(to_regex(y, leaf)) + quantifier(lo, hi)


# JSON string encoding of a set of decoded characters (see the docstring of json_schema/__init__.py).
_SHORT = {8: "b", 9: "t", 10: "n", 12: "f", 13: "r"}
_SPECIAL = cs(0x22, 0x5C, (0, 0x1F))


def _hex_escapes(codes: list[int], upper: bool) -> str:
    """Regex of the two hex digits after ``\\u00`` for control characters ``codes`` (< 0x20),
    grouped by first digit (few alternatives keep the unminimised byte DFA small)."""
    if not codes:
        return ""
    alts = []
    for hi in (0, 1):
        lows = [c & 15 for c in codes if c >> 4 == hi]
        if not lows:
            continue
        digits = "".join("0123456789abcdef"[d] for d in lows)
        if upper:
            digits += "".join("0123456789abcdef"[d].upper() for d in lows if d >= 10)
        alts.append(f"{hi}" + (digits if len(digits) == 1 else "[0-9a-fA-F]" if len(digits) == 22 else
                               f"[{digits}]"))
    if len(alts) == 2 and alts[0][1:] == alts[1][1:]:
        return "[01]" + alts[0][1:]
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


# Ranges -> (enc_set, enc_set_strict) text. Enum values and key literals render one set per
# character, the same few sets over and over; kept across schemas like _FSM_CACHE.
_ENC_MEMO: dict[tuple, str] = {}


def _enc_memo(r: Ranges, strict: bool) -> str:
    key = (r, strict)
    hit = _ENC_MEMO.get(key)
    if hit is None:
        if len(_ENC_MEMO) > 20000:
            _ENC_MEMO.clear()
        hit = _ENC_MEMO[key] = _enc_set_strict(r) if strict else _enc_set(r)
    return hit


def enc_set_strict(r: Ranges) -> str:
    """Like ``enc_set`` but only the one spelling ``json.dumps(ensure_ascii=False)`` writes."""
    return _enc_memo(r, True)


def enc_set(r: Ranges) -> str:
    """Regex (over the JSON text) of one decoded character from ``r``, canonically escaped.

    All escapes share one backslash branch: fewer alternatives mean fewer states before
    minimisation (81 vs 138 for a string of any characters), i.e. a cheaper determinisation.
    """
    return _enc_memo(r, False)


def _enc_set_strict(r: Ranges) -> str:
    singles = "".join(e for c, e in ((0x22, '"'), (0x5C, "\\\\")) if cs_has(r, c))
    ctl = cs_inter(r, CONTROLS)
    singles += "".join(_SHORT[c] for lo, hi in ctl for c in range(lo, hi + 1) if c in _SHORT)
    hexes = _hex_escapes([c for lo, hi in ctl for c in range(lo, hi + 1) if c not in _SHORT], False)
    return _one_char(r, singles, hexes)


def _enc_set(r: Ranges) -> str:
    singles = "".join(e for c, e in ((0x22, '"'), (0x5C, "\\\\"), (0x2F, "/")) if cs_has(r, c))
    ctl = cs_inter(r, CONTROLS)
    singles += "".join(_SHORT[c] for lo, hi in ctl for c in range(lo, hi + 1) if c in _SHORT)
    return _one_char(r, singles, _hex_escapes([c for lo, hi in ctl for c in range(lo, hi + 1)], True))


def _one_char(r: Ranges, singles: str, hexes: str) -> str:
    """One JSON-text character of ``r``: its raw (unescaped) members, then a single backslash branch
    for the one-letter escapes ``singles`` and the ``\\u00`` escapes whose hex digits ``hexes`` spells."""
    alts = []
    raw = cs_diff(cs_diff(r, _SPECIAL), SURROGATES)
    if raw:
        alts.append(_set_regex(raw))
    esc = []
    if singles:
        esc.append(singles if len(singles) == 1 or singles == "\\\\" else f"[{singles}]")
    if hexes:
        esc.append("u00" + hexes)
    if esc:
        alts.append("\\\\" + (esc[0] if len(esc) == 1 else "(?:" + "|".join(esc) + ")"))
    if not alts:
        raise TooComplex("empty character set")
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


def enc_regex(x: tuple) -> str:
    """Regex of the JSON string *content* (no quotes) whose decoded value is in ``x``."""
    return to_regex(x, enc_set)


def enc_regex_strict(x: tuple) -> str:
    """``enc_regex`` with one spelling per string (keys that must differ textually from literals)."""
    return to_regex(x, enc_set_strict)


def dec_regex(x: tuple) -> str:
    """Python regex over decoded characters (for ``re.fullmatch`` and interegular)."""
    return to_regex(x)


def canonical(s: str) -> str:
    """The canonical JSON encoding of a string's content (json.dumps, ensure_ascii=False)."""
    return json.dumps(s, ensure_ascii=False)[1:-1]


# Every JSON string content (RFC 8259).
JSON_CONTENT = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*'
JSON_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
JSON_UNIT = enc_set(ANYCHAR)  # one character of a constrained string


# ============================================================================ automata (interegular)

_FSM_CACHE: dict[str, Any] = {}


def regex_fsm(rx: str) -> Any:
    """interegular FSM of a Python regex over raw characters (cached)."""
    f = _FSM_CACHE.get(rx)
    if f is None:
        import interegular

        try:
            f = interegular.parse_pattern(rx).to_fsm()
        except Exception as e:  # interegular raises plain Exception subclasses
            raise Unsupported(f"regex not supported by interegular ({e})") from None
        if len(_FSM_CACHE) > 4000:
            _FSM_CACHE.clear()
        _FSM_CACHE[rx] = f
    return f


MAX_PRODUCT = 30_000  # states of an FSM product we are willing to build


def fsm_and(f: Any, g: Any) -> Any:
    if len(f.states) * len(g.states) > MAX_PRODUCT:
        raise TooComplex("regex intersection too large")
    return product(f, g, False)


def fsm_sub(f: Any, g: Any) -> Any:
    if len(f.states) * len(g.states) > MAX_PRODUCT:
        raise TooComplex("regex difference too large")
    return product(f, g, True)


def ir_len(x: tuple) -> tuple[int, int | None]:
    """(min, max) length in characters of the strings of an IR (max None: unbounded)."""
    k = x[0]
    if k in ("none", "eps"):
        return 0, 0
    if k == "set":
        return 1, 1
    if k == "cat":
        lo, hi = 0, 0
        for p in x[1]:
            a, b = ir_len(p)
            lo += a
            hi = None if hi is None or b is None else hi + b
        return lo, hi
    if k == "alt":
        ls = [ir_len(p) for p in x[1]]
        return min(a for a, _ in ls), (None if any(b is None for _, b in ls) else max(b for _, b in ls))
    _, y, m, n = x
    a, b = ir_len(y)
    return a * m, (None if n is None or b is None else b * n)


def ir_fsm(x: tuple) -> Any:
    """interegular FSM of an IR over decoded characters (cached by regex text)."""
    return empty_fsm() if x[0] == "none" else regex_fsm(dec_regex(x))


def empty_fsm() -> Any:
    """An interegular FSM of the empty language."""
    return regex_fsm("a") - regex_fsm("a")


def live_states(f: Any) -> set:
    """States of an interegular FSM that are reachable and from which a final state is reachable."""
    fwd, stack = {f.initial}, [f.initial]
    while stack:
        for t in f.map.get(stack.pop(), {}).values():
            if t not in fwd:
                fwd.add(t)
                stack.append(t)
    # backward from the finals over reversed edges, linear: a fixpoint over every state per round
    # is quadratic along a chain of chunk states (bench_pattern_lengths' 61 nodes, in-process A/B:
    # compile sum 2,347 -> 2,280 ms, the same grammar texts; cProfile, which inflates its any()
    # calls, put the fixpoint at 162 of 374 ms of one maxLength-255 pattern)
    pred: dict[Any, list] = {}
    for s in fwd:
        for t in f.map.get(s, {}).values():
            pred.setdefault(t, []).append(s)
    back = set(f.finals) & fwd
    stack = list(back)
    while stack:
        for p in pred.get(stack.pop(), ()):
            if p not in back:
                back.add(p)
                stack.append(p)
    return back


def fsm_ir(f: Any, max_nodes: int = MAX_REGEX) -> tuple:
    """IR of an interegular FSM's language by state elimination (``max_nodes``-capped)."""
    f = minimal(f)
    cls = alphabet_ranges(f.alphabet)
    live = live_states(f)
    if f.initial not in live:
        return NONE
    # interegular numbers transitions and states in string-hash order (PYTHONHASHSEED), so edges
    # are visited by their character sets and states ranked breadth-first along them: the same
    # language then always gives the same regex text (grammar cache keys depend on it).
    edges: dict[Any, list[tuple[Ranges, Any]]] = {}
    for s in live:
        per: dict[Any, Ranges] = {}
        for t, d in f.map.get(s, {}).items():
            if d in live:
                per[d] = cs_union(per.get(d, ()), cls[t])
        edges[s] = sorted(((r, d) for d, r in per.items()), key=lambda e: e[0])
    rank = {f.initial: 0}
    queue = [f.initial]
    for s in queue:
        for _, d in edges[s]:
            if d not in rank:
                rank[d] = len(rank)
                queue.append(d)
    S, E = "start", "end"
    out: dict[Any, dict[Any, tuple]] = {S: {f.initial: EPS}}
    inn: dict[Any, set] = {f.initial: {S}, E: set()}
    for s in queue:
        out.setdefault(s, {})
        inn.setdefault(s, set())
        for r, d in edges[s]:
            out[s][d] = ch(r)
            inn.setdefault(d, set()).add(s)
        if s in f.finals:
            out[s][E] = EPS
            inn[E].add(s)
    sizes: dict[tuple[Any, Any], int] = {}

    def sz(p: Any, q: Any) -> int:
        return sizes.get((p, q), 1)

    def key(s: Any) -> tuple:
        return ((len(inn[s]) - (s in inn[s])) * (len(out[s]) - (s in out[s])),
                sum(sz(p, s) for p in inn[s]) + sum(sz(s, q) for q in out[s]), rank[s])

    # The state of least key next, from a heap: only the neighbours of an eliminated state change
    # key, and they are pushed again (stale entries are skipped). The same order as taking the
    # min over every state each time, which was quadratic: 17 of 29 s on o63934's length-bounded
    # pattern (1,926 states).
    todo = set(queue)
    heap = [(key(s), s) for s in queue]
    heapq.heapify(heap)
    while todo:
        kk, k = heapq.heappop(heap)
        if k not in todo or kk != key(k):
            continue
        todo.discard(k)
        loop = out[k].pop(k, None)
        inn[k].discard(k)
        star = rep(loop, 0, None) if loop is not None else EPS
        lsz = sz(k, k) if loop is not None else 0
        for p in inn[k]:
            a = out[p].pop(k)
            for q, b in out[k].items():
                new = cat(a, star, b)
                nsz = sz(p, k) + lsz + sz(k, q) + 1
                if q in out[p]:
                    new = alt(out[p][q], new)
                    nsz += sz(p, q)
                if nsz > max_nodes:
                    raise TooComplex("regex too large")
                out[p][q] = new
                sizes[(p, q)] = nsz
                inn[q].add(p)
        for q in out[k]:
            inn[q].discard(k)
        for x in inn[k] | out[k].keys():
            if x in todo:
                heapq.heappush(heap, (key(x), x))
        del out[k], inn[k]
    return out[S].get(E, NONE)


def _compress(x: tuple) -> tuple:
    """Nested optional chains from state elimination, ``a(?:a(?:a)?)?``, as counts ``a{1,3}``
    (interegular's recursive parser overflows on ~100 levels of nesting). Iterative: a length
    bound of 1024 on a pattern nests 1024 levels deep before compression (``maxLength`` with a
    ``pattern``), past Python's recursion limit."""
    done: dict[int, tuple] = {}
    stack: list[tuple[tuple, bool]] = [(x, False)]
    while stack:
        node, ready = stack.pop()
        k = node[0]
        if k not in ("rep", "alt", "cat"):
            done[id(node)] = node
            continue
        kids = (node[1],) if k == "rep" else tuple(node[1])
        if not ready:
            stack.append((node, True))
            stack.extend((c, False) for c in kids if id(c) not in done)
            continue
        if k == "rep":
            y = done[id(node[1])]
            if node[2] == 0 and node[3] == 1 and y[0] == "rep" and y[2] == 1 and y[3] is not None:
                done[id(node)] = ("rep", y[1], 0, y[3])
            else:
                done[id(node)] = rep(y, node[2], node[3])
            continue
        parts = [done[id(c)] for c in kids]
        if k == "alt":
            done[id(node)] = alt(*parts)
            continue
        out: list[tuple] = []
        for p in reversed(parts):  # fold x x{a,b} -> x{a+1,b+1} from the right
            nxt = out[0] if out else None
            if nxt is not None and nxt[0] == "rep" and nxt[1] == p and nxt[3] is not None:
                out[0] = ("rep", p, nxt[2] + 1, nxt[3] + 1)
                continue
            out.insert(0, p)
        done[id(node)] = cat(*out)
    return done[id(x)]


def _depth(x: tuple) -> int:
    deepest, stack = 0, [(x, 1)]
    while stack:  # iterative: uncompressible IRs can be deeper than the recursion limit
        node, d = stack.pop()
        deepest = max(deepest, d)
        if node[0] in ("cat", "alt"):
            stack.extend((p, d + 1) for p in node[1])
        elif node[0] == "rep":
            stack.append((node[1], d + 1))
    return deepest


def fsm_regex(f: Any, encode: Callable[[tuple], str], max_nodes: int = MAX_REGEX) -> str:
    """``encode(fsm_ir(f))``, refused (TooComplex) when the regex is too long or too deeply
    nested to compile."""
    ir = _compress(fsm_ir(f, max_nodes))
    if _depth(ir) > 80:
        raise TooComplex("regex nested too deeply")
    rx = encode(ir)
    if len(rx) > MAX_REGEX_CHARS:
        raise TooComplex(f"regex of {len(rx)} characters")
    return rx
