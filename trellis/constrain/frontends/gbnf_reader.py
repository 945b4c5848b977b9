"""llama.cpp GBNF -> Lark, reading stage: GBNF text -> rule bodies (``Alt`` trees).

The node types (``Lit``, ``Chars``, ``Ref``, ``Repeat``, ``Seq``, ``Alt``) and ``GbnfParser``,
a recursive descent that tokenises and parses GBNF the way llama.cpp's ``llama_grammar_parser``
does, plus the xgrammar EBNF extensions listed in ``gbnf.py``'s module docstring (each only where
llama.cpp refuses the text), refusing what that docstring lists with a located ``GrammarError``.
The Lark text is written by ``gbnf.py`` (with ``gbnf_fusion.py``).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Union

from trellis.constrain.frontends import xgrammar_regex, xgrammar_tags
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

_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")  # llama.cpp: no '_'; xgrammar: '_' too
_HEX = frozenset("0123456789abcdefABCDEF")
_SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-",
                   # xgrammar's (ParseNextEscaped; llama.cpp refuses them): in literals and classes
                   "/": "/", "?": "?", "'": "'", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "0": "\0",
                   "e": "\x1b"}
_CLASS_ESCAPES = {c: c for c in "^$.*+(){}|"}  # xgrammar's regex escapes, in character classes only
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
POSTFIX = {"*": (0, None), "+": (1, None), "?": (0, 1)}
# xgrammar's macros (grammar_parser.cc kMacroFunctions): no GBNF meaning, refused by name
MACROS = ("TagDispatch", "TokenTagDispatch", "Token", "ExcludeToken", "Regex", "Substring")
_MACRO_WHY = {"TokenTagDispatch": "it dispatches on token ids", "Token": "it matches a token id, not text",
              "ExcludeToken": "it matches token ids, not text"}
# xgrammar's rule options (docs/defining_structures/ebnf_grammar.md, "Rule Options"): the capture
# ones only say which span a matcher records
_CAPTURE_OPTIONS = frozenset({"capture", "capture_hidden_suffix_bytes", "capture_hidden_stop_bytes",
                              "capture_hidden_body_rule_id", "capture_hidden_marker_rule_id", "stop_capture"})
_ATTRIBUTE_WHY = {"max_tokens": "a budget of tokens per occurrence (not a language of text)",
                  "max_chars": "a best-effort budget of characters per occurrence",
                  "lazy": "committed-shortest matching (it changes the rule's language)",
                  "temperature": "a per-rule sampling temperature"}
_ATTRIBUTES = re.compile(r'\[(?:[^\]"\n]|"(?:[^"\\\n]|\\.)*")*\]')  # name[max_tokens=4, capture="x"]


@dataclass(frozen=True)
class MacroValue:
    """One argument of an xgrammar macro call: kind "str", "int", "bool", "name" or "tuple"."""
    kind: str
    value: object
    pos: int = field(compare=False)


_SUBSTRING_MAX = 200_000


class GbnfParser:
    """Recursive descent mirroring llama.cpp's parse_rule / parse_alternates / parse_sequence, with
    xgrammar's extensions where llama.cpp refuses the text (``gbnf.py``'s module docstring)."""

    def __init__(self, text: str, source: str, root: str = "root") -> None:
        self.text, self.source, self.root = text, source, root
        self.rules: dict[str, Alt] = {}
        self.defined_at: dict[str, int] = {}
        self.refs: list[Ref] = []
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        # names defined the llama.cpp way (at a line's start, before ::=): a macro name defined as a
        # rule keeps llama.cpp's meaning (a reference), any other use of one is xgrammar's macro
        self.declared = set(re.findall(r"(?m)^[ \t]*([A-Za-z0-9_-]+)[ \t]*::=", text))

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
        """Skip blanks and comments, and newlines where ``newline_ok`` (llama.cpp: after ``::=`` and
        ``|`` and inside parentheses). Elsewhere a newline ends the rule when a new rule (or the end)
        follows, as in llama.cpp; when anything else follows, llama.cpp refuses the text and it is
        read as xgrammar reads it: the rule goes on (``"a"\\n  | "b"``, ``"a"\\n  "b"``)."""
        t = self.text
        while pos < len(t):
            c = t[pos]
            if c == "#":
                while pos < len(t) and t[pos] not in "\r\n":
                    pos += 1
            elif c in " \t" or (newline_ok and c in "\r\n"):
                pos += 1
            elif c in "\r\n":
                after = self.space(pos, True)
                if after >= len(t) or self.rule_start(after):
                    break
                pos = after
            else:
                break
        return pos

    def rule_start(self, pos: int) -> bool:
        """Whether a rule definition starts at ``pos``: a name, then ``::=`` (blanks, comments and
        newlines between them, as xgrammar allows; llama.cpp only blanks), or xgrammar's rule
        attributes ``name[...] ::=`` (refused by ``rule``)."""
        end = self.name_end(pos)
        if end == pos:
            return False
        m = _ATTRIBUTES.match(self.text, end)
        return self.text.startswith("::=", self.space(m.end() if m else end, True))

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
        if self.root not in self.rules:
            raise self.error(f"no {self.root!r} rule: a GBNF grammar starts at the rule named {self.root}",
                             min(self.defined_at.values(), default=0))
        return self.rules

    def rule(self, pos: int) -> int:
        start, end = pos, self.name_end(pos)
        if end == pos:
            raise self.error(f"expecting a rule name, got {self.peek(pos)!r}", pos)
        name = self.text[start:end]
        if name in self.rules:
            line, _ = self.where(self.defined_at[name])
            raise self.error(f"rule {name!r} is defined twice (first at line {line})", start)
        attrs = _ATTRIBUTES.match(self.text, end)
        if attrs and self.rule_start(start):
            self.attributes(name, attrs.group(), end)
            end = attrs.end()
        pos = self.space(end, False)
        if not self.text.startswith("::=", pos):
            raise self.error(f"expecting '::=' after rule name {name!r}", pos)
        body, pos = self.alternates(self.space(pos + 3, True), nested=False)
        if self.text.startswith("(=", pos):
            pos = self.lookahead(pos)  # checked, then left out of the language
            if self.text.startswith("(=", pos):
                raise self.error(f"rule {name!r} has a second lookahead assertion (= ...): at most one, "
                                 "at the end of the rule", pos)
            if self.peek(pos) not in ("", "\r", "\n"):
                raise self.error(f"unexpected {self.peek(pos)!r} after the lookahead assertion (= ...): it ends "
                                 "its rule, after all the alternatives", pos)
        self.rules[name], self.defined_at[name] = body, start
        c = self.peek(pos)
        if c == "\r":
            pos += 2 if self.peek(pos + 1) == "\n" else 1
        elif c == "\n":
            pos += 1
        elif c:
            hint = " (no matching '(')" if c == ")" else " (a rule is defined with 'name ::=')" if c in ":=" else ""
            raise self.error(f"unexpected {c!r}{hint}", pos)
        return self.space(pos, True)

    def attributes(self, name: str, text: str, pos: int) -> None:
        """xgrammar's rule options ``name[capture, max_tokens=32, ...] ::=``: the capture options
        (what span a matcher records) leave the language as it is and are accepted (trellis records
        no captures); the others change it or the sampling and are refused by name."""
        for m in re.finditer(r'\s*([A-Za-z_]\w*)\s*(?:=\s*("(?:[^"\\\n]|\\.)*"|[^,\]]*))?\s*(?:,|\])', text[1:]):
            key = m.group(1)
            if key in _CAPTURE_OPTIONS:
                continue
            why = _ATTRIBUTE_WHY.get(key, "an unknown rule option")
            raise self.error(f"xgrammar rule attributes ({name}[{key}...]) are not supported: {key} is {why}",
                             pos + 1 + m.start(1))

    def lookahead(self, pos: int) -> int:
        """xgrammar's ``(= ...)`` at ``pos`` (the end of a rule): parsed and checked as xgrammar does
        (its normaliser refuses choices and an empty assertion), then left out of the language."""
        start = pos
        body, pos = self.alternates(self.space(pos + 2, True), nested=True)
        self.close_group(start, pos)
        inner = body
        while len(inner.options) == 1 and len(inner.options[0].items) == 1 \
                and isinstance(inner.options[0].items[0], Alt):
            inner = inner.options[0].items[0]  # ((...)) is (...)
        if len(inner.options) > 1:
            raise self.error("choices in a lookahead assertion (= a | b) are not supported (as in xgrammar): "
                             "assert a rule instead, (= name)", start)
        items = inner.options[0].items
        if not items or items == (Lit(""),):
            raise self.error("empty lookahead assertion", start)
        return self.space(pos + 1, False)

    def close_group(self, start: int, pos: int) -> None:
        """Check the ')' that closes the group (or lookahead) opened at ``start``."""
        if self.peek(pos) == ")":
            return
        if pos >= len(self.text):
            raise self.error("unclosed '(='" if self.peek(start + 1) == "=" else "unclosed '('", start)
        if self.text.startswith("(=", pos):
            raise self.error("a lookahead assertion (= ...) may only end a rule, after all its alternatives", pos)
        raise self.error(f"expecting ')', got {self.peek(pos)!r}", pos)

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
                name = self.text[start:pos]
                if name in MACROS and name not in self.declared:
                    if name not in _MACRO_READERS:
                        raise self.error(f"xgrammar macro {name} is not supported: {_MACRO_WHY[name]}", start)
                    call = self.space(pos, True)
                    if self.peek(call) != "(":
                        raise self.error(f"expecting '(' after the xgrammar macro {name}", call)
                    args, named, pos = self.macro_args(call)
                    items.append(_MACRO_READERS[name](self, start, args, named))
                    repeatable = True
                    pos = self.space(pos, nested)
                    continue
                ref = Ref(name, *self.where(start))
                self.refs.append(ref)
                items.append(ref)
                repeatable = True
            elif c == "(" and self.peek(pos + 1) == "=":  # xgrammar's lookahead: ends the rule body
                break
            elif c == "(":
                group, pos = self.alternates(self.space(pos + 1, True), nested=True)
                self.close_group(start, pos)
                items.append(group)
                pos += 1
                repeatable = True
            elif c == ".":
                items.append(ANY)
                pos += 1
                repeatable = True
            elif c in POSTFIX or c == "{":
                if c == "{":
                    lo, hi, pos = self.braces(pos, nested)
                else:
                    (lo, hi), pos = POSTFIX[c], pos + 1
                if not repeatable:
                    raise self.error(f"nothing before {c!r} to repeat", start)
                items[-1] = Repeat(items[-1], lo, hi)
            else:
                break
            pos = self.space(pos, nested)
        return Seq(tuple(items)), pos

    def macro_args(self, pos: int) -> tuple[list[MacroValue], dict[str, MacroValue], int]:
        """xgrammar's macro arguments at ``pos`` (its ``(``): positional values and ``name=value``
        pairs, comma-separated, no trailing comma; returns them and the offset past ``)``."""
        start = pos
        pos = self.space(pos + 1, True)
        args: list[MacroValue] = []
        named: dict[str, MacroValue] = {}
        if self.peek(pos) == ")":
            return args, named, pos + 1
        while True:
            end = self.name_end(pos)
            eq = self.space(end, True)
            if end > pos and self.peek(eq) == "=" and self.peek(pos) not in "0123456789":
                key = self.text[pos:end]
                if key in named:
                    raise self.error(f"macro argument {key!r} given twice", pos)
                named[key], pos = self.macro_value(self.space(eq + 1, True))
            else:
                value, pos = self.macro_value(pos)
                args.append(value)
            pos = self.space(pos, True)
            if self.peek(pos) == ",":
                pos = self.space(pos + 1, True)
                if self.peek(pos) == ")":
                    raise self.error("a trailing ',' in a macro call", pos)
                continue
            if self.peek(pos) == ")":
                return args, named, pos + 1
            if pos >= len(self.text):
                raise self.error("unclosed '(' of a macro call", start)
            raise self.error(f"expecting ',' or ')' in a macro call, got {self.peek(pos)!r}", pos)

    def macro_value(self, pos: int) -> tuple["MacroValue", int]:
        """A string, integer, ``true``/``false``, rule name or tuple ``(v, ...)`` at ``pos``."""
        c = self.peek(pos)
        if c == '"':
            text, end = self.literal(pos)
            return MacroValue("str", text, pos), end
        if c.isascii() and c.isdigit():
            number, end = self.integer(pos, True)
            return MacroValue("int", number, pos), end
        if c == "(":
            items: list[MacroValue] = []
            p = self.space(pos + 1, True)
            while self.peek(p) != ")":
                v, p = self.macro_value(p)
                items.append(v)
                p = self.space(p, True)
                if self.peek(p) == ",":
                    p = self.space(p + 1, True)
                elif self.peek(p) != ")":
                    raise self.error(f"expecting ',' or ')' in a tuple, got {self.peek(p)!r}", p)
            return MacroValue("tuple", tuple(items), pos), p + 1
        end = self.name_end(pos)
        if end == pos:
            raise self.error(f"expecting a macro argument (a string, integer, true/false, rule name or tuple), "
                             f"got {c!r}", pos)
        word = self.text[pos:end]
        if word in ("true", "false"):
            return MacroValue("bool", word == "true", pos), end
        return MacroValue("name", word, pos), end

    def regex_macro(self, start: int, args: list["MacroValue"], named: dict[str, "MacroValue"]) -> Node:
        """``Regex("pattern", flags="isu", json_string=bool)``: xgrammar's regex dialect
        (``xgrammar_regex.py``)."""
        if len(args) != 1 or args[0].kind != "str":
            raise self.error("Regex expects exactly one string argument", start)
        for key, v in named.items():
            want = {"json_string": "bool", "flags": "str"}.get(key)
            if want is None:
                raise self.error(f"Regex does not support the named argument {key}", v.pos)
            if v.kind != want:
                raise self.error(f"Regex's {key} must be a {'boolean' if want == 'bool' else 'string'}", v.pos)
        flags = named["flags"].value if "flags" in named else None
        json_string = bool(named["json_string"].value) if "json_string" in named else False
        try:
            node = xgrammar_regex.translate(args[0].value, flags=flags, json_string=json_string)
        except xgrammar_regex.RegexDialectError as e:
            failed = e  # raised outside the handler: the located error alone, no chained traceback
        else:
            return self.pattern(node, start, f"Regex({args[0].value!r})")
        raise self.error(f"Regex({args[0].value!r}): {failed.message} (at offset {failed.pos})", args[0].pos)

    def substring_macro(self, start: int, args: list["MacroValue"], named: dict[str, "MacroValue"]) -> Node:
        """``Substring("c1", "c2", ...)``: every run of consecutive whole chunks, the empty one
        included (xgrammar compiles a suffix automaton; here: for each first chunk, the chain of
        the following ones, each optional in turn)."""
        if named:
            raise self.error("Substring() does not accept named arguments", start)
        if any(a.kind != "str" for a in args):
            raise self.error("Substring() arguments must be strings", start)
        chunks = [xgrammar_regex.literal(a.value) for a in args]
        if sum(len(a.value) for a in args) * max(len(args), 1) > _SUBSTRING_MAX:
            raise self.error(f"Substring() of {len(args)} chunks is too large (its regex would have over "
                             f"{_SUBSTRING_MAX} characters)", start)
        chains: list = []
        tail: tuple | None = None
        for chunk in reversed(chunks):  # chain(i) = chunk_i chain(i+1)?
            tail = chunk if tail is None else ("cat", (chunk, ("rep", tail, 0, 1)))
            chains.append(tail)
        node = xgrammar_regex.simplify(("alt", (xgrammar_regex.EPS, *chains)))
        return self.pattern(node, start, "Substring(...)")

    def tag_dispatch_macro(self, start: int, args: list["MacroValue"], named: dict[str, "MacroValue"]) -> Node:
        """``TagDispatch(("tag", rule), ..., loop_after_dispatch=true, excludes=("s", ...))``: free
        text, a tag, its rule, and again (``xgrammar_tags.py``): ``(lead_1 rule_1 | ...)* free``,
        or ``free | lead_1 rule_1 | ...`` without the loop."""
        for key, v in named.items():
            if key not in ("loop_after_dispatch", "excludes"):
                raise self.error(f"Unknown named argument for TagDispatch: {key}", v.pos)
        pairs: list[tuple[str, Ref]] = []
        for a in args:
            if a.kind != "tuple" or len(a.value) != 2:
                raise self.error("Each tag dispatch element must be a pair (tag, rule)", a.pos)
            tag, rule = a.value
            if tag.kind != "str" or not tag.value:
                raise self.error("Tag must be a non-empty string literal", tag.pos)
            if rule.kind != "name":
                raise self.error("Rule reference must be an identifier", rule.pos)
            ref = Ref(rule.value, *self.where(rule.pos))
            self.refs.append(ref)
            pairs.append((tag.value, ref))
        loop = named.get("loop_after_dispatch")
        if loop is not None and loop.kind != "bool":
            raise self.error("loop_after_dispatch must be a boolean literal", loop.pos)
        excl = named.get("excludes")
        excludes: list[str] = []
        if excl is not None:
            if excl.kind != "tuple":
                raise self.error("excludes must be a tuple", excl.pos)
            for x in excl.value:
                if x.kind != "str" or not x.value:
                    raise self.error("Exclude must be a non-empty string literal", x.pos)
                if any(t.startswith(x.value) for t, _ in pairs):
                    raise self.error(f"Exclude string must not be a prefix of trigger string: {x.value}", x.pos)
                excludes.append(x.value)
        try:
            free, lead = xgrammar_tags.languages([t for t, _ in pairs], excludes)
        except xgrammar_tags.TagDispatchTooLarge as e:
            too_large = str(e)
        else:
            too_large = ""
        if too_large:
            raise self.error(f"TagDispatch is too large for trellis: {too_large}", start)
        steps = [Seq((_node(lead[i]), ref)) for i, (_, ref) in enumerate(pairs) if lead[i] != xgrammar_regex.NOTHING]
        free_node = None if free == xgrammar_regex.NOTHING else _node(free)
        if loop is None or loop.value:
            if free_node is None:  # (xgrammar: the root is always final, so free has "" at least)
                raise self.error("TagDispatch matches no string", start)
            return Seq(((Repeat(Alt(tuple(steps)), 0, None),) if steps else ()) + (free_node,))
        options = ([Seq((free_node,))] if free_node is not None else []) + steps
        if not options:
            raise self.error("TagDispatch matches no string", start)
        return Alt(tuple(options))

    def pattern(self, node: tuple, start: int, what: str) -> Node:
        """A macro's language (an ``xgrammar_regex`` AST) as GBNF nodes: the writer then treats it
        like GBNF text (fused into one terminal where small; a large counted repeat in helper
        rules, as ``x{2,50000}`` would be, not unrolled into one automaton)."""
        if node == xgrammar_regex.NOTHING:
            raise self.error(f"{what} matches no string", start)
        return _node(node)

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
        if e in _CLASS_ESCAPES and what == "character class":
            return e, pos + 2
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
        if not ranges and negated:  # xgrammar's [^]: any character (llama.cpp: an empty string)
            return ANY, pos + 1
        if not ranges:
            raise self.error("empty character class", start)
        return Chars(tuple(ranges), negated), pos + 1

    def braces(self, pos: int, nested: bool) -> tuple[int, int | None, int]:
        start = pos
        lo, pos = self.integer(self.space(pos + 1, nested), nested)
        if self.peek(pos) == "}" and lo is not None:
            hi: int | None = lo
        elif self.peek(pos) == ",":
            pos = self.space(pos + 1, nested)
            minus_one = (lo is not None and self.text.startswith("-1", pos)  # xgrammar's {n,-1}: {n,}
                         and self.peek(pos + 2) not in _WORD and self.peek(pos + 2) != ".")
            hi, pos = (None, self.space(pos + 2, nested)) if minus_one else self.integer(pos, nested)
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


_MACRO_READERS = {"Regex": GbnfParser.regex_macro, "Substring": GbnfParser.substring_macro,
                  "TagDispatch": GbnfParser.tag_dispatch_macro}


def _node(ast: tuple) -> Node:
    """An ``xgrammar_regex`` AST (simplified: no empty set in it) as GBNF nodes."""
    kind = ast[0]
    if kind == "set":
        rs = ast[1]
        if rs == ((0, xgrammar_regex.MAXC),):
            return ANY
        if len(rs) == 1 and rs[0][0] == rs[0][1]:
            return Lit(chr(rs[0][0]))
        return Chars(tuple(rs))
    if kind == "rep":
        return Repeat(_node(ast[1]), ast[2], ast[3])
    if kind == "cat":
        items = [_node(x) for x in ast[1]]
        return Seq(tuple(items)) if items else Lit("")
    return Alt(tuple(x if isinstance(x, Seq) else Seq((x,)) for x in map(_node, ast[1])))
