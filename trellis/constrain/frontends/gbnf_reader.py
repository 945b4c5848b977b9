"""llama.cpp GBNF -> Lark, reading stage: GBNF text -> rule bodies (``Alt`` trees).

``GbnfParser``, a recursive descent that tokenises and parses GBNF the way llama.cpp's ``llama_grammar_parser``
does, plus the xgrammar EBNF extensions listed in ``gbnf.py``'s module docstring (each only where
llama.cpp refuses the text), refusing what that docstring lists with a located ``GrammarError``.
The node types are in ``gbnf_nodes.py`` (re-exported here), xgrammar's macros in ``gbnf_macros.py``;
the Lark text is written by ``gbnf.py`` (with ``gbnf_fusion.py``).
"""

from __future__ import annotations

import bisect
import re

from trellis.constrain.errors import GrammarError
from trellis.constrain.frontends.gbnf_macros import MACRO_READERS, lazy_body
from trellis.constrain.frontends.gbnf_nodes import (ANY, MAX_REPETITION, Alt, Chars, Lazy, Lit, MacroValue, Node, Ref,
                                                    Repeat, Seq, Tok, linear_to_star)
from trellis.constrain.terminal_kinds import TokenRef


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
# xgrammar's rule options (docs/defining_structures/ebnf_grammar.md, "Rule Options"): the capture
# ones only say which span a matcher records
_CAPTURE_OPTIONS = frozenset({"capture", "capture_hidden_suffix_bytes", "capture_hidden_stop_bytes",
                              "capture_hidden_body_rule_id", "capture_hidden_marker_rule_id", "stop_capture"})
_ATTRIBUTE_WHY = {"max_tokens": "a budget of tokens per occurrence (not a language of text)",
                  "temperature": "a per-rule sampling temperature"}
_ATTRIBUTES = re.compile(r'\[(?:[^\]"\n]|"(?:[^"\\\n]|\\.)*")*\]')  # name[max_tokens=4, capture="x"]


class GbnfParser:
    """Recursive descent mirroring llama.cpp's parse_rule / parse_alternates / parse_sequence, with
    xgrammar's extensions where llama.cpp refuses the text (``gbnf.py``'s module docstring)."""

    def __init__(self, text: str, source: str, root: str = "root") -> None:
        self.text, self.source, self.root = text, source, root
        self.rules: dict[str, Alt] = {}
        self.defined_at: dict[str, int] = {}
        self.refs: list[Ref] = []
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.lazy: dict[str, int] = {}  # rules with xgrammar's ``lazy`` option -> where it is written
        self.max_chars: dict[str, tuple[int, int]] = {}  # ... with ``max_chars=N`` -> (N, where)
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
        bodies = {name: lazy_body(self, name) for name in {**self.max_chars, **self.lazy}}
        for name, body in bodies.items():
            self.rules[name] = Alt((Seq((body,)),))
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
            if key == "lazy":
                self.lazy[name] = pos + 1 + m.start(1)
                continue
            if key == "max_chars":
                value = (m.group(2) or "").strip()
                if not (value.isascii() and value.isdigit()) or int(value) > 2**31 - 1:
                    raise self.error(f"max_chars must be an integer from 0 to 2147483647, got {value!r}",
                                     pos + 1 + m.start(1))
                self.max_chars[name] = (int(value), pos + 1 + m.start(1))
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
            elif c == "<" or c == "!":
                node, pos = self.token_ref(pos)
                items.append(node)
                repeatable = True
            elif c in _WORD:
                pos = self.name_end(pos)
                name = self.text[start:pos]
                if name in MACROS and name not in self.declared:
                    call = self.space(pos, True)
                    if self.peek(call) != "(":
                        raise self.error(f"expecting '(' after the xgrammar macro {name}", call)
                    args, named, pos = self.macro_args(call)
                    items.append(MACRO_READERS[name](self, start, args, named))
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

    def token_ref(self, pos: int) -> tuple["Tok", int]:
        """llama.cpp's token references at ``pos``: ``<[id]>`` (the token of that id), ``<text>`` (the
        one token whose text that is, found in the vocabulary at compile time), and ``!<...>`` (one
        token that is not it)."""
        start, exclude = pos, self.peek(pos) == "!"
        if exclude:
            pos += 1
            if self.peek(pos) != "<":
                raise self.error(f"expecting '<' after '!' (a token reference !<...>), got {self.peek(pos)!r}", pos)
        end = self.text.find(">", pos + 1)
        newline = self.text.find("\n", pos + 1)
        if end < 0 or 0 <= newline < end:
            raise self.error("unclosed '<' of a token reference <...>", start)
        inner = self.text[pos + 1:end]
        if inner.startswith("["):
            digits = inner[1:-1] if inner.endswith("]") else ""
            if not (digits.isascii() and digits.isdigit()):
                raise self.error(f"expecting a token id in <[...]>, got <{inner}>", start)
            ref = TokenRef.of([int(digits)], exclude=exclude)
        elif not inner:
            raise self.error("empty token reference <>", start)
        else:
            ref = TokenRef.of(texts=[inner], exclude=exclude)
        return Tok(ref), end + 1

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


# the node types, for the stages after this one
__all__ = ["ANY", "MAX_REPETITION", "POSTFIX", "Alt", "Chars", "GbnfParser", "Lazy", "Lit", "MacroValue", "Node", "Ref",
           "Repeat", "Seq", "Tok", "linear_to_star"]
