"""An independent, slow reference for the grammar-mask semantics (see trellis/constrain/lalr/cfg.py).

Parsing uses Lark's own interactive LALR parser (``parse_interactive`` / ``feed_token`` /
``feed_eof``); lexing uses the ``regex`` module (``fullmatch(..., partial=True)`` decides whether
a lexeme can still grow) over *characters*, with ties resolved by Lark's own contextual
``BasicLexer`` objects (their scanner order and ``unless`` callbacks). Nothing here uses trellis'
DFAs, tables or parser runtime.

Viability ("can the text still be completed?") is decided by a bounded depth-first search for a
completing witness string over a small alphabet; ``None`` means the search gave up.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import lark
import regex
from lark import Token, Tree
from lark.exceptions import UnexpectedInput


_TAIL_CHARS: dict[bytes, list[str]] = {}


@dataclass
class RefState:
    ip: object  # lark InteractiveParser (never mutated once stored)
    partial: str  # the current, still growing lexeme ("" only at the very start)
    tail: bytes = b""  # an incomplete UTF-8 character at the end of the text

    def key(self) -> tuple:
        return tuple(self.ip.parser_state.state_stack), self.partial, self.tail


class Reference:
    def __init__(self, text: str, alphabet: str) -> None:
        self.lark = lark.Lark(text, parser="lalr", strict=True)
        self.pats = {t.name: regex.compile(t.pattern.to_regexp()) for t in self.lark.terminals}
        self.ignore = set(self.lark.ignore_tokens)
        self.clex = self.lark.parser.lexer
        for b in self.clex.lexers.values():
            _ = b.scanner  # builds b.callback (unless retyping)
        closers = "\"')]}\n"
        self.alphabet = "".join(sorted(set(alphabet), key=lambda c: (c not in closers, closers.find(c), c)))
        self._memo: dict[tuple, bool] = {}
        # Lark's parser is deterministic, so these are pure functions of their keys; memoising them
        # (and dropping the parse values, below) made the sql_select 200-document oracle feasible.
        self._extends: dict[tuple[int, str], bool] = {}
        self._resolve: dict[tuple[int, str], str | None] = {}
        self._fed: dict[tuple[tuple[int, ...], str], object] = {}
        self._eof: dict[tuple[int, ...], bool] = {}
        self.gave_up = 0

    # -- lexing
    def allowed(self, ip) -> set[str]:
        return {k for k in ip.choices() if k.isupper() and not k.startswith("$")} | self.ignore

    def extends(self, ip, s: str) -> bool:
        key = (ip.parser_state.position, s)  # choices() depends on the top state only
        hit = self._extends.get(key)
        if hit is None:
            hit = self._extends[key] = any(self.pats[t].fullmatch(s, partial=True) is not None
                                           for t in self.allowed(ip))
        return hit

    def resolve(self, ip, lexeme: str) -> str | None:
        key = (ip.parser_state.position, lexeme)
        if key in self._resolve:
            return self._resolve[key]
        basic = self.clex.lexers[ip.parser_state.position]
        typ = None
        for t in basic.scanner.terminals:
            if self.pats[t.name].fullmatch(lexeme) is not None:
                typ = t.name
                if typ in basic.callback:
                    typ = basic.callback[typ](Token(typ, lexeme)).type
                break
        self._resolve[key] = typ
        return typ

    def start(self) -> RefState:
        return RefState(self.lark.parse_interactive(""), "")

    def feed_lexeme(self, ip, lexeme: str):
        typ = self.resolve(ip, lexeme)
        if typ is None:
            return None
        if typ in self.ignore:
            return ip
        key = (tuple(ip.parser_state.state_stack), typ)
        if key in self._fed:
            return self._fed[key]
        ip = ip.copy()
        try:
            ip.feed_token(Token(typ, lexeme))
        except UnexpectedInput:
            ip = None
        else:
            # Recognition needs only the state stack: the parse values (trees of the whole prefix)
            # are replaced by fresh empty trees, so copies stay O(stack depth) instead of O(text)
            # (deep-copying them was ~55% of the sql_select oracle).
            vs = ip.parser_state.value_stack
            vs[:] = [Tree("_", []) for _ in vs]
        self._fed[key] = ip
        return ip

    def step_char(self, st: RefState, ch: str) -> RefState | None:
        cand = st.partial + ch
        if self.extends(st.ip, cand):
            return RefState(st.ip, cand)
        if not st.partial:
            return None
        ip = self.feed_lexeme(st.ip, st.partial)
        if ip is None or not self.extends(ip, ch):
            return None
        return RefState(ip, ch)

    def feed(self, st: RefState, data: bytes) -> RefState | None:
        """Feed bytes; a trailing incomplete UTF-8 character is kept in ``tail``."""
        buf = st.tail + data
        n = len(buf)
        # split off an incomplete final character
        cut = n
        for k in range(1, min(4, n) + 1):
            b = buf[n - k]
            if b & 0xC0 != 0x80:
                need = 1 if b < 0x80 else 2 if b >> 5 == 6 else 3 if b >> 4 == 14 else 4 if b >> 3 == 30 else 0
                if need > k:
                    cut = n - k
                break
        try:
            text = buf[:cut].decode("utf-8")
        except UnicodeDecodeError:
            return None
        tail = buf[cut:]
        if tail:
            try:  # a tail that no codepoint starts with
                lead = tail[0]
                need = 2 if lead >> 5 == 6 else 3 if lead >> 4 == 14 else 4 if lead >> 3 == 30 else 0
                if need == 0 or any(b & 0xC0 != 0x80 for b in tail[1:]):
                    return None
            except IndexError:
                return None
        cur = RefState(st.ip, st.partial)
        for ch in text:
            cur = self.step_char(cur, ch)
            if cur is None:
                return None
        return RefState(cur.ip, cur.partial, tail)

    # -- completeness and viability
    def complete(self, st: RefState) -> bool:
        if st.tail:
            return False
        ip = st.ip
        if st.partial:
            ip = self.feed_lexeme(ip, st.partial)
            if ip is None:
                return False
        key = tuple(ip.parser_state.state_stack)
        hit = self._eof.get(key)
        if hit is None:
            try:
                ip.copy().feed_eof()
                hit = True
            except UnexpectedInput:
                hit = False
            self._eof[key] = hit
        return hit

    def _tail_chars(self, tail: bytes) -> list[str]:
        if tail not in _TAIL_CHARS:
            _TAIL_CHARS[tail] = list(self._tail_chars_uncached(tail))
        return _TAIL_CHARS[tail]

    def _tail_chars_uncached(self, tail: bytes):
        lead = tail[0]
        need = 2 if lead >> 5 == 6 else 3 if lead >> 4 == 14 else 4
        lo = {2: 0x80, 3: 0x800, 4: 0x10000}[need]
        hi = {2: 0x7FF, 3: 0xFFFF, 4: 0x10FFFF}[need]
        for cp in range(lo, hi + 1):
            if 0xD800 <= cp <= 0xDFFF:
                continue
            c = chr(cp)
            if c.encode("utf-8").startswith(tail):
                yield c

    def viable(self, st: RefState, depth: int = 10, budget: int = 4000) -> bool | None:
        """True: a completing witness exists; False: none within ``depth`` chars; None: budget."""
        if st.tail:
            unknown = False
            for c in self._tail_chars(st.tail):
                nxt = self.step_char(RefState(st.ip, st.partial), c)
                if nxt is None:
                    continue
                r = self.viable(nxt, depth, budget)
                if r:
                    return True
                unknown |= r is None
            return None if unknown else False
        self._budget = budget
        r = self._search(st, depth)
        if r is False and self._budget <= 0:
            self.gave_up += 1
            return None
        return r

    def _search(self, st: RefState, depth: int) -> bool:
        if self.complete(st):
            return True
        if depth == 0 or self._budget <= 0:
            return False
        key = (st.key(), depth)
        if key in self._memo:
            return self._memo[key]
        self._budget -= 1
        res = False
        for ch in self.alphabet:
            nxt = self.step_char(st, ch)
            if nxt is not None and self._search(nxt, depth - 1):
                res = True
                break
        if res or self._budget > 0:
            self._memo[key] = res
        return res


# ----------------------------------------------------------------------------- generators


@dataclass
class Generator:
    """Random sentences of a Lark grammar: random derivations + per-terminal samplers."""

    lark_obj: lark.Lark
    samplers: dict  # terminal name -> callable(random.Random) -> str
    max_depth: int = 6
    ws: tuple[str, ...] = ("", " ")
    _min_h: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        rules = self.lark_obj.rules
        self.by_origin: dict[str, list] = {}
        for r in rules:
            self.by_origin.setdefault(r.origin.name, []).append(r)
        h = {}
        changed = True
        while changed:
            changed = False
            for name, rs in self.by_origin.items():
                for r in rs:
                    if all(s.is_term or s.name in h for s in r.expansion):
                        v = 1 + max([h[s.name] for s in r.expansion if not s.is_term], default=0)
                        if v < h.get(name, 1 << 30):
                            h[name] = v
                            changed = True
        self._min_h = h
        self.terms = {t.name: t for t in self.lark_obj.terminals}

    def _rule_h(self, r) -> int:
        return 1 + max([self._min_h[s.name] for s in r.expansion if not s.is_term], default=0)

    def terminals(self, rng: random.Random, sym: str = "start", depth: int = 0) -> list[str]:
        rs = self.by_origin[sym]
        if depth >= self.max_depth:
            best = min(self._rule_h(r) for r in rs)
            rs = [r for r in rs if self._rule_h(r) == best]
        r = rng.choice(rs)
        out: list[str] = []
        for s in r.expansion:
            if s.is_term:
                out.append(s.name)
            else:
                out.extend(self.terminals(rng, s.name, depth + 1))
        return out

    def render(self, rng: random.Random, names: list[str]) -> str:
        parts = []
        for i, n in enumerate(names):
            t = self.terms[n]
            if type(t.pattern).__name__ == "PatternStr":
                v = t.pattern.value
                if "i" in t.pattern.flags:
                    v = "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in v)
            else:
                v = self.samplers[n](rng)
            if i and self.ws:
                parts.append(rng.choice(self.ws))
            parts.append(v)
        if self.ws and rng.random() < 0.3:
            parts.insert(0, rng.choice(self.ws))
        return "".join(parts)

    def sentence(self, rng: random.Random, tries: int = 50) -> str:
        for _ in range(tries):
            s = self.render(rng, self.terminals(rng))
            try:
                self.lark_obj.parse(s)
            except UnexpectedInput:
                continue
            return s
        raise RuntimeError("could not generate a sentence")
