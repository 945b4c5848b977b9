"""llama.cpp GBNF grammars -> Lark grammar text.

``Gbnf(text).to_lark()`` reads a grammar in llama.cpp's GBNF format (``grammars/README.md`` of
llama.cpp) and writes a Lark grammar for the same language of Unicode strings, read the way a
scannerless engine reads Lark: every terminal stands for its regular language, there is no
``%ignore`` (GBNF spells all whitespace out), and terminals may overlap freely.

Supported GBNF (parsed the way llama.cpp's ``llama_grammar_parser`` parses it)
------------------------------------------------------------------------------
* rules ``name ::= body``; names are ``[a-zA-Z0-9-]+``; ``root`` is the start rule;
* sequences, alternation ``|``, grouping ``( )``, postfix ``*`` ``+`` ``?`` ``{m}`` ``{m,}``
  ``{m,n}``; postfixes stack (``x*?`` is ``(x*)?``); bounds are at most 2000 (llama.cpp's limit);
  ``{,n}`` (= ``{0,n}``) is accepted as an extension (llama.cpp rejects it);
* string literals ``"..."`` (``""`` is the empty string), character classes ``[...]`` and
  ``[^...]`` with ranges ``a-z``, and ``.`` (any code point, newline included); escapes
  ``\\n \\r \\t \\\\ \\" \\[ \\] \\- \\xHH \\uHHHH \\UHHHHHHHH``; any other character stands for itself;
* ``#`` comments to the end of the line. A newline ends a rule unless it comes right after
  ``::=`` or ``|``, or inside parentheses (a line starting with ``|`` is an error, as in llama.cpp).

Refused with ``GrammarError`` (file:line:col): syntax errors, undefined rules, a rule defined
twice (llama.cpp silently keeps the last one), no ``root`` rule, empty or reversed character
classes (``[]`` is silently epsilon in llama.cpp), ``{m,n}`` with ``n < m`` or a bound over 2000
(llama.cpp reads a larger maximum as unbounded), and token references ``<...>`` / ``!<...>``
(they match tokenizer tokens, not text).

Mapping to Lark
---------------
``start: r_root``. A GBNF name without capitals becomes ``r_`` + the name with ``-`` -> ``_``;
one with capitals becomes ``c_`` + the name with ``-`` -> ``__`` and ``X`` -> ``_x`` (so the map
is injective: Lark rule names are lowercase and GBNF names have no ``_``). Literals become Lark
strings, classes and ``.`` become regex terminals (``/[^...]/``, ``/./s``), all written in ASCII
with escapes. Epsilon alternatives become ``(...)?``. Counted repetition ``x{m,n}``: ``x ~ m`` for
the required copies (Lark expands it linearly, or in factored rules for m >= 50), then ``x*`` or
0..n-m more copies in O(log(n-m)) helper rules following the binary digits of n-m (unambiguous;
Lark's own ``x ~ m..n`` writes n-m+1 alternatives, and a chain of n-m optional rules is slow for
Lark to compile). A group repeated in counted copies becomes a helper rule first. Helper rules
start with ``_`` and cannot collide with mapped names.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

from trellis.constrain.errors import GrammarError

MAX_REPETITION = 2000  # llama.cpp's MAX_REPETITION_THRESHOLD


@dataclass(frozen=True)
class Lit:
    """A string literal; ``""`` is epsilon."""
    text: str


@dataclass(frozen=True)
class Chars:
    """One code point in (or, negated, not in) the inclusive ranges; ``ANY`` is ``.``."""
    ranges: tuple[tuple[int, int], ...]
    negated: bool = False


ANY = Chars((), negated=True)


@dataclass(frozen=True)
class Ref:
    name: str
    line: int = field(default=0, compare=False)
    column: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Repeat:
    item: "Node"
    min: int
    max: int | None  # None: unbounded


@dataclass(frozen=True)
class Seq:
    items: tuple["Node", ...]


@dataclass(frozen=True)
class Alt:
    """A rule body or a parenthesised group."""
    options: tuple[Seq, ...]


Node = Union[Lit, Chars, Ref, Repeat, Seq, Alt]

_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
_HEX = frozenset("0123456789abcdefABCDEF")
_SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_POSTFIX = {"*": (0, None), "+": (1, None), "?": (0, 1)}


class Gbnf:
    """GBNF grammar source: ``Gbnf(text, source="<gbnf>")`` or ``Gbnf.from_file(path)``."""

    def __init__(self, text: str, source: str = "<gbnf>") -> None:
        self.text, self.source = text, source

    @classmethod
    def from_file(cls, path: str | Path) -> "Gbnf":
        return cls(Path(path).read_text(encoding="utf-8"), source=str(path))

    def rules(self) -> dict[str, Alt]:
        """The parsed rules in source order (GBNF names); raises ``GrammarError``."""
        return _Parser(self.text, self.source).parse()

    def to_lark(self, *, fuse: bool = False) -> str:
        """Lark grammar text for the same language, with start rule ``start``.

        ``fuse=True`` (what ``compile`` uses) writes every part of a rule that refers to no rule
        as one regex terminal (see "regular fusion" below): the same regular language, which a
        scannerless engine reads exactly, but Lark's own Earley parser matches a regex terminal
        leftmost-first (``/[0-9]|[1-9][0-9]*/`` never reads ``85``), so hand Lark the default,
        character-level text."""
        return _LarkWriter(self.rules(), fuse=fuse).write()

    def __repr__(self) -> str:
        return f"Gbnf(source={self.source!r})"


def lark_name(name: str) -> str:
    """The Lark rule name of GBNF rule ``name`` (injective, see the module docstring)."""
    if name.lower() == name:
        return "r_" + name.replace("-", "_")
    return "c_" + "".join("__" if c == "-" else "_" + c.lower() if c.isupper() else c for c in name)


class _Parser:
    """Recursive descent mirroring llama.cpp's parse_rule / parse_alternates / parse_sequence."""

    def __init__(self, text: str, source: str) -> None:
        self.text, self.source = text, source
        self.rules: dict[str, Alt] = {}
        self.defined_at: dict[str, int] = {}
        self.refs: list[Ref] = []
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def where(self, pos: int) -> tuple[int, int]:
        """1-based (line, column) of offset ``pos``."""
        line = bisect.bisect_right(self.line_starts, pos)
        return line, pos - self.line_starts[line - 1] + 1

    def error(self, message: str, pos: int) -> GrammarError:
        line, column = self.where(pos)
        return GrammarError(message, source=self.source, text=self.text, line=line, column=column)

    def peek(self, pos: int) -> str:
        return self.text[pos] if pos < len(self.text) else ""

    def space(self, pos: int, newline_ok: bool) -> int:
        t = self.text
        while pos < len(t):
            if t[pos] == "#":
                while pos < len(t) and t[pos] not in "\r\n":
                    pos += 1
            elif t[pos] in " \t" or (newline_ok and t[pos] in "\r\n"):
                pos += 1
            else:
                break
        return pos

    def name_end(self, pos: int) -> int:
        while self.peek(pos) in _WORD:
            pos += 1
        return pos

    def parse(self) -> dict[str, Alt]:
        pos = self.space(0, True)
        while pos < len(self.text):
            pos = self.rule(pos)
        undefined = [r for r in self.refs if r.name not in self.rules]
        if undefined:
            first = min(undefined, key=lambda r: (r.line, r.column))
            names = sorted({r.name for r in undefined} - {first.name})
            more = f" (also undefined: {', '.join(names)})" if names else ""
            raise GrammarError(f"undefined rule {first.name!r}{more}", source=self.source, text=self.text,
                               line=first.line, column=first.column)
        if "root" not in self.rules:
            raise self.error("no 'root' rule: a GBNF grammar starts at the rule named root",
                             min(self.defined_at.values(), default=0))
        return self.rules

    def rule(self, pos: int) -> int:
        start, end = pos, self.name_end(pos)
        if end == pos:
            hint = (" (a newline ends a rule unless it follows '|' or '::=' or is inside parentheses)"
                    if self.peek(pos) == "|" else "")
            raise self.error(f"expecting a rule name, got {self.peek(pos)!r}{hint}", pos)
        name = self.text[start:end]
        if name in self.rules:
            line, _ = self.where(self.defined_at[name])
            raise self.error(f"rule {name!r} is defined twice (first at line {line})", start)
        pos = self.space(end, False)
        if not self.text.startswith("::=", pos):
            raise self.error(f"expecting '::=' after rule name {name!r}", pos)
        body, pos = self.alternates(self.space(pos + 3, True), nested=False)
        self.rules[name], self.defined_at[name] = body, start
        c = self.peek(pos)
        if c == "\r":
            pos += 2 if self.peek(pos + 1) == "\n" else 1
        elif c == "\n":
            pos += 1
        elif c:
            raise self.error(f"unexpected {c!r}" + (" (no matching '(')" if c == ")" else ""), pos)
        return self.space(pos, True)

    def alternates(self, pos: int, nested: bool) -> tuple[Alt, int]:
        seq, pos = self.sequence(pos, nested)
        options = [seq]
        while self.peek(pos) == "|":
            seq, pos = self.sequence(self.space(pos + 1, True), nested)
            options.append(seq)
        return Alt(tuple(options)), pos

    def sequence(self, pos: int, nested: bool) -> tuple[Seq, int]:
        items: list[Node] = []
        repeatable = False  # llama.cpp: a postfix needs a preceding element ("" pushes none)
        while pos < len(self.text):
            c, start = self.text[pos], pos
            if c == '"':
                text, pos = self.literal(pos)
                items.append(Lit(text))
                repeatable = bool(text)
            elif c == "[":
                node, pos = self.char_class(pos)
                items.append(node)
                repeatable = True
            elif c in "<!":
                raise self.error("token references (<...>, !<...>) are not supported: they match "
                                 "tokenizer tokens, not text", pos)
            elif c in _WORD:
                pos = self.name_end(pos)
                ref = Ref(self.text[start:pos], *self.where(start))
                self.refs.append(ref)
                items.append(ref)
                repeatable = True
            elif c == "(":
                group, pos = self.alternates(self.space(pos + 1, True), nested=True)
                if self.peek(pos) != ")":
                    raise self.error("unclosed '('", start) if pos >= len(self.text) else \
                        self.error(f"expecting ')', got {self.peek(pos)!r}", pos)
                items.append(group)
                pos += 1
                repeatable = True
            elif c == ".":
                items.append(ANY)
                pos += 1
                repeatable = True
            elif c in _POSTFIX or c == "{":
                if c == "{":
                    lo, hi, pos = self.braces(pos, nested)
                else:
                    (lo, hi), pos = _POSTFIX[c], pos + 1
                if not repeatable:
                    raise self.error(f"nothing before {c!r} to repeat", start)
                items[-1] = Repeat(items[-1], lo, hi)
            else:
                break
            pos = self.space(pos, nested)
        return Seq(tuple(items)), pos

    def char(self, pos: int, what: str, start: int) -> tuple[str, int]:
        """One (possibly escaped) character of a literal or class that began at ``start``."""
        t = self.text
        if pos >= len(t):
            raise self.error(f"unterminated {what}", start)
        if t[pos] != "\\":
            return t[pos], pos + 1
        e = self.peek(pos + 1)
        if e in _HEX_ESCAPES:
            n = _HEX_ESCAPES[e]
            digits = t[pos + 2:pos + 2 + n]
            if len(digits) != n or not set(digits) <= _HEX:
                raise self.error(f"expecting {n} hex digits after '\\{e}'", pos)
            if int(digits, 16) > 0x10FFFF:
                raise self.error(f"code point {digits} is beyond U+10FFFF", pos)
            return chr(int(digits, 16)), pos + 2 + n
        if e in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[e], pos + 2
        if not e:
            raise self.error(f"unterminated {what}", start)
        raise self.error(f"unknown escape '\\{e}'", pos)

    def literal(self, pos: int) -> tuple[str, int]:
        start, pos, out = pos, pos + 1, []
        while self.peek(pos) != '"':
            c, pos = self.char(pos, "string literal", start)
            out.append(c)
        return "".join(out), pos + 1

    def char_class(self, pos: int) -> tuple[Chars, int]:
        start, pos = pos, pos + 1
        negated = self.peek(pos) == "^"
        pos += 1 if negated else 0
        ranges: list[tuple[int, int]] = []
        while self.peek(pos) != "]":
            lo_at = pos
            lo, pos = self.char(pos, "character class", start)
            hi = lo
            if self.peek(pos) == "-" and self.peek(pos + 1) != "]":  # llama.cpp: "-]" is a literal '-'
                hi, pos = self.char(pos + 1, "character class", start)
                if hi < lo:
                    raise self.error(f"reversed range {lo!r}-{hi!r} in character class", lo_at)
            ranges.append((ord(lo), ord(hi)))
        if not ranges:
            raise self.error("empty character class", start)
        return Chars(tuple(ranges), negated), pos + 1

    def braces(self, pos: int, nested: bool) -> tuple[int, int | None, int]:
        start = pos
        lo, pos = self.integer(self.space(pos + 1, nested), nested)
        if self.peek(pos) == "}" and lo is not None:
            hi: int | None = lo
        elif self.peek(pos) == ",":
            hi, pos = self.integer(self.space(pos + 1, nested), nested)
            if self.peek(pos) != "}":
                raise self.error(f"expecting '}}' in repetition, got {self.peek(pos)!r}", pos)
            if lo is None and hi is None:
                raise self.error("repetition '{,}' needs a bound", start)
            lo = lo or 0
        else:
            wanted = "an integer" if lo is None else "',' or '}'"
            raise self.error(f"expecting {wanted} in repetition, got {self.peek(pos)!r}", pos)
        if hi is not None and hi < lo:
            raise self.error(f"repetition {{{lo},{hi}}} has max < min", start)
        if max(lo, hi or 0) > MAX_REPETITION:
            raise self.error(f"repetition bound over llama.cpp's limit of {MAX_REPETITION}", start)
        return lo, hi, pos + 1

    def integer(self, pos: int, nested: bool) -> tuple[int | None, int]:
        end = pos
        while self.peek(end).isascii() and self.peek(end).isdigit():
            end += 1
        return (int(self.text[pos:end]) if end > pos else None), self.space(end, nested)


# Precedence of emitted Lark expressions: what may stand where without parentheses.
_ALT, _SEQ, _POST, _ATOM = 1, 2, 3, 4


def _escape(cp: int, special: str) -> str:
    """Code point -> ASCII Lark literal text. Lark evaluates \\x \\u \\U itself, so those are used
    only for characters that are not special once evaluated; ``special`` ones get a backslash."""
    c = chr(cp)
    if c in special:
        return "\\" + c
    if 0x20 <= cp < 0x7F:
        return c
    if c in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[c]
    return f"\\x{cp:02x}" if cp <= 0xFF else f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


_SHORT_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
_RE_SPECIAL = "".join(chr(c) for c in range(0x21, 0x7F) if not chr(c).isalnum())  # all ASCII punctuation


def _lark_string(text: str) -> str:
    return '"' + "".join(_escape(ord(c), '"\\') for c in text) + '"'


def _lark_class(node: Chars) -> str:
    if not node.ranges:
        return "/./s"
    body = "".join(_escape(lo, _RE_SPECIAL) + ("" if lo == hi else "-" + _escape(hi, _RE_SPECIAL))
                   for lo, hi in node.ranges)
    return f"/[{'^' if node.negated else ''}{body}]/"


class _LarkWriter:
    def __init__(self, rules: dict[str, Alt], fuse: bool = False) -> None:
        self.rules = _inline_regular(rules) if fuse else rules
        self.fuse = fuse
        self.helpers: dict[str, str] = {}  # body -> name; identical bodies share one rule

    def write(self) -> str:
        lines = ["start: " + lark_name("root")]
        for name, body in self.rules.items():
            lines.append(f"{lark_name(name)}: {self.expr(body)[0]}".rstrip())
        lines += [f"{name}: {body}" for body, name in self.helpers.items()]
        return "\n".join(lines) + "\n"

    def helper(self, body: str, kind: str) -> str:
        if body not in self.helpers:
            self.helpers[body] = f"_{kind}{len(self.helpers) + 1}"
        return self.helpers[body]

    @staticmethod
    def wrap(text: str, prec: int, need: int) -> str:
        return f"({text})" if text and prec < need else text

    def expr(self, node: Node) -> tuple[str, int]:
        """Lark text of ``node`` and its precedence; ``""`` is epsilon."""
        fused = _fused(node) if self.fuse else None
        if fused is not None:
            return fused
        if isinstance(node, Lit):
            return (_lark_string(node.text) if node.text else ""), _ATOM
        if isinstance(node, Chars):
            return _lark_class(node), _ATOM
        if isinstance(node, Ref):
            return lark_name(node.name), _ATOM
        if isinstance(node, Repeat):
            return self.repeat(node)
        if isinstance(node, Seq):
            parts = [(t, p) for t, p in map(self.expr, _fuse_runs(node.items) if self.fuse else node.items) if t]
            if len(parts) <= 1:
                return parts[0] if parts else ("", _ATOM)
            return " ".join(self.wrap(t, p, _SEQ) for t, p in parts), _SEQ
        options = [self.expr(s) for s in node.options]
        nonempty = list({t: (t, p) for t, p in options if t}.values())  # drop duplicates, keep order
        if not nonempty:
            return "", _ATOM
        text, prec = nonempty[0] if len(nonempty) == 1 else (" | ".join(t for t, _ in nonempty), _ALT)
        if any(not t for t, _ in options):
            return self.wrap(text, prec, _ATOM) + "?", _POST  # an empty alternative: optional
        return text, prec

    def repeat(self, node: Repeat) -> tuple[str, int]:
        text, prec = self.expr(node.item)
        lo, hi = node.min, node.max
        if not text or hi == 0:
            return "", _ATOM
        if (lo, hi) == (1, 1):
            return text, prec
        atom = self.wrap(text, prec, _ATOM)
        for op, bounds in _POSTFIX.items():
            if (lo, hi) == bounds:
                return atom + op, _POST
        if prec < _ATOM:  # counted copies of a group: name it once instead of copying its text
            atom = self.helper(text, "grp")
        parts = [atom if lo == 1 else f"{atom} ~ {lo}"] if lo else []
        if hi is None:
            parts.append(atom + "*")
        elif hi > lo:
            parts.append(self.at_most(atom, hi - lo))
        return " ".join(parts), (_POST if len(parts) == 1 else _SEQ)

    def at_most(self, atom: str, k: int) -> str:
        """0..k copies of ``atom`` in O(log k) helper rules, unambiguously, by the binary digits of
        k: ``at_most(k) = below(t) | power(t) at_most(k - 2**t)`` with ``2**t <= k < 2**(t+1)``.
        (A chain of k rules ``_r: atom _r'?`` is as good a language but costs Lark O(k^2) to
        compile: 9 s at k = 1000.)"""

        def power(j: int) -> str:  # exactly 2**j copies
            if j == 0:
                return atom
            half = power(j - 1)
            return self.helper(f"{half} {half}", "pow")

        def below(t: int) -> str:  # 0 .. 2**t - 1 copies (t >= 1): the top power or not, then the rest
            return f"{atom}?" if t == 1 else self.helper(f"{power(t - 1)}? {below(t - 1)}", "upto")

        t = k.bit_length() - 1
        if k == 2 ** (t + 1) - 1:
            return below(t + 1)
        rest = self.at_most(atom, k - 2 ** t) if k > 2 ** t else ""
        return self.helper(f"{below(t)} | {power(t)} {rest}".rstrip(), "upto")


# ----------------------------------------------------------------------------- regular fusion
#
# GBNF spells lexical structure character by character (``"\"" [^"\\]* "\""``, ``[0-9]{1,15}``).
# As Lark rules each character would be a terminal of its own, and a scannerless engine that
# walks the vocabulary per terminal would split every token at every character (list.gbnf's
# ``[^\r\n...]+``: 137k-236k token suffixes per mask, 50-80 ms). A part of a rule that refers to
# no rule is a regular expression, and GBNF has no ``%ignore`` between terminals, so writing that
# part as ONE regex terminal keeps the language exactly (concatenation, union and repetition of
# terminals mean the same as in the regex). A fused terminal never matches the empty string (Lark
# refuses zero-width terminals): a nullable part is written ``/nonempty/?`` or left unfused.

_FUSE_MAX_COUNT = 64  # counted repetitions above this stay helper rules (DFA size ~ count)


def _rule_free(node: Node) -> bool:
    if isinstance(node, Ref):
        return False
    if isinstance(node, Repeat):
        return (node.max is None or node.max <= _FUSE_MAX_COUNT) and _rule_free(node.item)
    if isinstance(node, Seq):
        return all(_rule_free(x) for x in node.items)
    if isinstance(node, Alt):
        return all(_rule_free(x) for x in node.options)
    return True


def _nullable(node: Node) -> bool:
    if isinstance(node, Lit):
        return not node.text
    if isinstance(node, Chars):
        return False
    if isinstance(node, Repeat):
        return node.min == 0 or node.max == 0 or _nullable(node.item)
    if isinstance(node, Seq):
        return all(_nullable(x) for x in node.items)
    if isinstance(node, Alt):
        return any(_nullable(x) for x in node.options)
    return False


def _rx(node: Node) -> str:
    """Python-regex text (Lark ``/.../`` escaping) of a rule-free node, as a group-safe atom or
    sequence (alternations are wrapped)."""
    if isinstance(node, Lit):
        return "".join(_escape(ord(c), _RE_SPECIAL) for c in node.text)
    if isinstance(node, Chars):
        return "(?s:.)" if not node.ranges else _lark_class(node)[1:-1]
    if isinstance(node, Seq):
        return "".join(_rx(x) for x in node.items)
    if isinstance(node, Alt):
        return "(?:" + "|".join(_rx(x) for x in node.options) + ")"
    assert isinstance(node, Repeat)
    inner = f"(?:{_rx(node.item)})"
    lo, hi = node.min, node.max
    if (lo, hi) == (1, 1):
        return inner
    op = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((lo, hi))
    return inner + (op or (f"{{{lo},}}" if hi is None else f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}"))


def _simple(node: Node) -> bool:
    """A literal or one character class: already one terminal as it is."""
    return isinstance(node, (Lit, Chars)) or isinstance(node, Seq) and len(node.items) == 1 and _simple(node.items[0])


def _fused(node: Node) -> tuple[str, int] | None:
    """``node`` as one regex terminal (Lark text, precedence) when it refers to no rule and is
    more than a literal or a class; None otherwise."""
    if _simple(node) or not _rule_free(node):
        return None
    if not _nullable(node):
        return f"/{_rx(node)}/", _ATOM
    # nullable: X? with X the non-empty part, where that part is easy to write
    if isinstance(node, Repeat) and not _nullable(node.item) and (node.max is None or node.max >= 1):
        lo = max(node.min, 1)
        body = _rx(Repeat(node.item, lo, node.max))
        return f"/{body}/?", _POST
    if isinstance(node, Alt):  # (a | b | ""): X? when the nullable options are empty text only
        rest = tuple(o for o in node.options if not _nullable(o))
        eps = [o for o in node.options if _nullable(o)]
        if rest and all(isinstance(x, Lit) and not x.text for o in eps for x in o.items):
            return f"/{_rx(Alt(rest))}/?", _POST
    return None


# A rule that refers, directly or through other rules, to no recursive rule is a regular language
# too, and a small one (a character class, an operator, an optional space) is replaced by its body
# where it is used, so whole rule-free stretches become one terminal: english.gbnf's ``en-char+ ([
# \t\n] en-char+)*`` over ``en-char ::= letter | digit | punctuation`` was a scan per character,
# so every token split at every character (84 -> 5 ms a document on Gemma). Substituting a
# non-recursive nonterminal by its definition keeps a context-free language, and the result is
# fused as above. Only small rules: a big one copied into each of its uses makes big terminals,
# slow to compile, whose walks no other use shares (inlining every regular rule took chess.gbnf's
# compile 2.3 -> 6.1 ms and its document 7 -> 15 ms; json.gbnf's ``ws`` with ``[ \t]{0,20}``, 22
# positions, compile 4.8 -> 13 ms). Size: positions of the regex (characters of its literals and
# classes, counted repetitions multiplied out), the states of its Glushkov automaton.
_INLINE_POSITIONS = 8


def _positions(node: Node) -> int:
    if isinstance(node, Lit):
        return len(node.text)
    if isinstance(node, Chars):
        return 1
    if isinstance(node, Repeat):
        return _positions(node.item) * max(node.min, 1 if node.max is None else node.max)
    if isinstance(node, Seq):
        return sum(_positions(x) for x in node.items)
    if isinstance(node, Alt):
        return sum(_positions(x) for x in node.options)
    return _INLINE_POSITIONS + 1  # a reference


def _inline_regular(rules: dict[str, Alt]) -> dict[str, Alt]:
    """The rules reachable from ``root`` with every reference to a rule whose expansion is
    rule-free (after the same substitution: not recursive) and at most ``_INLINE_POSITIONS``
    positions replaced by that expansion."""
    # name -> its body with references substituted, and whether that body is inlined where used
    # (a reference to a rule on ``visiting`` is to a recursive rule, which is never inlined, so a
    # body made during another rule's visit is the same as one made later)
    bodies: dict[str, Node] = {}
    inlined: dict[str, bool] = {}
    visiting: set[str] = set()

    def body_of(name: str) -> Node | None:
        if name not in bodies:
            if name in visiting:  # recursive: stays a rule (the cycle's rules learn it on return)
                return None
            visiting.add(name)
            b = bodies[name] = subst(rules[name])
            visiting.discard(name)
            inlined[name] = _rule_free(b) and _positions(b) <= _INLINE_POSITIONS
        return bodies[name]

    def expansion(name: str) -> Node | None:
        b = body_of(name)
        return b if b is not None and inlined[name] else None

    def subst(node: Node) -> Node:
        if isinstance(node, Ref):
            e = expansion(node.name)
            return node if e is None else e
        if isinstance(node, Repeat):
            return Repeat(subst(node.item), node.min, node.max)
        if isinstance(node, Seq):
            return Seq(tuple(subst(x) for x in node.items))
        if isinstance(node, Alt):
            return Alt(tuple(Seq(tuple(subst(x) for x in o.items)) for o in node.options))
        return node

    out: dict[str, Alt] = {}
    todo = ["root"]
    while todo:
        name = todo.pop()
        if name in out:
            continue
        body = body_of(name)
        assert body is not None  # nothing is being visited here
        out[name] = body if isinstance(body, Alt) else Alt((Seq((body,)),))
        todo.extend(_refs(body))
    return {name: out[name] for name in rules if name in out}  # source order


def _refs(node: Node) -> list[str]:
    if isinstance(node, Ref):
        return [node.name]
    if isinstance(node, Repeat):
        return _refs(node.item)
    if isinstance(node, (Seq, Alt)):
        return [r for x in (node.items if isinstance(node, Seq) else node.options) for r in _refs(x)]
    return []


def _fuse_runs(items: tuple) -> list:
    """The items of a sequence with each run of two or more consecutive rule-free items (not all
    nullable) replaced by one ``Seq`` node, which ``_fused`` writes as a single terminal."""
    out: list = []
    run: list = []

    def flush() -> None:
        if len(run) >= 2 and not all(_nullable(x) for x in run):
            out.append(Seq(tuple(run)))
        else:
            out.extend(run)
        run.clear()

    for it in items:
        if _rule_free(it):
            run.append(it)
        else:
            flush()
            out.append(it)
    flush()
    return out
