"""xgrammar's regex dialect (its EBNF macro ``Regex("...", flags=..., json_string=...)``) -> a
small regular-expression AST of the same language, every escape spelled out as an explicit class
(the GBNF reader turns it into rule nodes, ``gbnf_reader._node``).

xgrammar compiles ``Regex`` with its own parser (``cpp/fsm_builder.cc``, ``ParseRegexToIR`` and
``ParseRegexEscape``, snapshot 53da3ff; checked against the installed 0.2.9 by
``benchmarks/crosscheck_xgrammar_ebnf.py``), whose meaning differs from Python's ``re`` in ways
that change the language, so the pattern is parsed here the way xgrammar parses it:

* ``\\d`` is ``[0-9]``, ``\\w`` ``[0-9A-Z_a-z]``, ``\\s`` ``[\\t-\\r ]`` (ASCII; Python's are Unicode);
* ``.`` is any code point, newline included, unless the macro has ``flags`` (then ``.`` is
  ``[^\\n]`` without ``s``); ``(?i)`` (only at the very start, or ``flags="i"``) folds ASCII
  letters only (Python's ``re.I`` also folds ``ſ``/``s``, ``K``/``k``);
* ``^`` and ``$`` anywhere outside a class are ignored, and a lookahead ``(?=...)`` / ``(?!...)``
  matches the empty string (xgrammar logs a warning and drops it): the language is xgrammar's;
* lazy quantifiers are greedy (the same set of strings); ``(?<name>...)`` / ``(?P<name>...)`` are
  plain groups; quantifiers may stack (``a**`` is ``(a*)*``);
* escapes ``\\n \\t \\r \\f \\v \\a \\e \\0``, ``\\b`` (backspace, in a class only), ``\\xHH``,
  ``\\uHHHH``, ``\\u{H..}``, ``\\cX``; any other escaped character stands for itself;
* ``json_string=true`` removes U+0000-U+001F, ``"`` and ``\\`` from every character the pattern
  matches (xgrammar removes those bytes from every edge of the automaton).

Refused with ``RegexDialectError`` (a message; the GBNF reader locates it), as xgrammar refuses
them: word boundaries, backreferences, ``\\p{...}``, lookbehind, other group modifiers, an
unclosed or empty class, a reversed range, a bad repetition count, nothing to repeat,
unbalanced parentheses.
"""

from __future__ import annotations

from typing import Union

from trellis.constrain.automata.charsets import MAXC, Ranges, cs, cs_diff, cs_neg

# AST: ("set", ranges) one code point; ("cat", nodes); ("alt", nodes); ("rep", node, lo, hi|None)
RNode = Union[tuple]
EPS: tuple = ("cat", ())
NOTHING: tuple = ("set", ())

_DIGIT: Ranges = ((0x30, 0x39),)
_WORDC: Ranges = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_SPACE: Ranges = ((0x09, 0x0D), (0x20, 0x20))
_CLASS_ESCAPES = {"d": (_DIGIT, False), "D": (_DIGIT, True), "w": (_WORDC, False), "W": (_WORDC, True),
                  "s": (_SPACE, False), "S": (_SPACE, True)}
_SINGLE = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B, "a": 0x07, "e": 0x1B, "0": 0x00}
JSON_FORBIDDEN: Ranges = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))
_MAX_REPEAT_DIGITS = 9


class RegexDialectError(ValueError):
    """A pattern xgrammar refuses; ``pos`` is the 0-based offset in the pattern."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.message, self.pos = message, pos


def fold_ascii(rs: Ranges) -> Ranges:
    """``rs`` with the other ASCII case of every ASCII letter in it (xgrammar's FoldAsciiCaseRanges)."""
    extra = []
    for lo, hi in rs:
        a, b = max(lo, 0x61), min(hi, 0x7A)
        if a <= b:
            extra.append((a - 32, b - 32))
        a, b = max(lo, 0x41), min(hi, 0x5A)
        if a <= b:
            extra.append((a + 32, b + 32))
    return cs(*rs, *extra)


def rewrite_dots(pattern: str, dot_all: bool) -> str:
    """xgrammar's RewriteRegexDots: with ``flags`` given, ``.`` outside classes is ``[^\\n]``
    unless ``s`` is among them."""
    if dot_all:
        return pattern
    out, escaped, in_class = [], False, False
    for c in pattern:
        if escaped:
            out.append(c)
            escaped = False
        elif c == "\\":
            out.append(c)
            escaped = True
        elif c == "[":
            out.append(c)
            in_class = True
        elif c == "]" and in_class:
            out.append(c)
            in_class = False
        elif c == "." and not in_class:
            out.append("[^\\n]")
        else:
            out.append(c)
    return "".join(out)


def macro_pattern(pattern: str, flags: str | None) -> str:
    """The pattern xgrammar compiles for ``Regex(pattern, flags=flags)`` (ParseRegexMacro)."""
    if flags is None:
        return pattern
    bad = [f for f in flags if f not in "isu"]
    if bad:
        raise RegexDialectError(f"regular-expression flag {bad[0]!r} is not supported", 0)
    pattern = rewrite_dots(pattern, "s" in flags)
    if "i" in flags and not pattern.startswith("(?i)"):
        pattern = "(?i)" + pattern
    return pattern


class _Parser:
    def __init__(self, text: str) -> None:
        self.fold = text.startswith("(?i)")
        self.off = 4 if self.fold else 0  # error positions count the (?i) prefix, as xgrammar's do
        self.t = text[self.off:]

    def err(self, message: str, i: int) -> RegexDialectError:
        return RegexDialectError(message, i + self.off)

    # ---------------------------------------------------------------- escapes and classes
    def escape(self, i: int, in_class: bool) -> tuple[int | None, Ranges, bool, int]:
        """The escape at ``t[i] == '\\'``: (code point or None, class ranges, negated, next i)."""
        t = self.t
        if i + 1 >= len(t):
            raise self.err("Regex ends with a trailing backslash", i)
        e, j = t[i + 1], i + 2
        if e in _SINGLE:
            return _SINGLE[e], (), False, j
        if e == "b":
            if in_class:
                return 0x08, (), False, j
            raise self.err("Word boundary assertion \\b is not supported in regex", i)
        if e == "B":
            raise self.err("Word boundary assertion \\B is not supported in regex", i)
        if e in "pP":
            raise self.err("Unicode property escape \\p / \\P is not supported in regex", i)
        if e == "k" or e in "123456789":
            raise self.err(f"Backreference \\{e} is not supported in regex", i)
        if e in _CLASS_ESCAPES:
            rs, neg = _CLASS_ESCAPES[e]
            return None, rs, neg, j
        if e == "x":
            h = t[j:j + 2]
            if len(h) != 2 or not _is_hex(h):
                raise self.err("\\x must be followed by two hexadecimal digits in regex", i)
            return int(h, 16), (), False, j + 2
        if e == "u":
            if t[j:j + 1] == "{":
                close = t.find("}", j + 1)
                h = t[j + 1:close] if close >= 0 else ""
                if close < 0 or not 1 <= len(h) <= 6 or not _is_hex(h):
                    raise self.err("\\u{...} must contain one to six hexadecimal digits in regex", i)
                if int(h, 16) > MAXC:
                    raise self.err("\\u{...} escape is beyond the Unicode range in regex", i)
                return int(h, 16), (), False, close + 1
            h = t[j:j + 4]
            if len(h) != 4 or not _is_hex(h):
                raise self.err("\\u must be followed by four hexadecimal digits in regex", i)
            return int(h, 16), (), False, j + 4
        if e == "c":
            if j >= len(t) or not (t[j].isascii() and t[j].isalpha()):
                raise self.err("\\c must be followed by a letter in regex", i)
            return ord(t[j]) & 0x1F, (), False, j + 1
        return ord(e), (), False, j  # any other character stands for itself

    def char_set(self, cp: int | None, rs: Ranges, neg: bool) -> Ranges:
        if cp is not None:
            rs, neg = ((cp, cp),), False
        if self.fold:
            rs = fold_ascii(rs)
        return cs_neg(cs(*rs)) if neg else cs(*rs)

    def skip_class(self, i: int) -> int:
        """Offset just past the class that starts at ``t[i] == '['`` (xgrammar's SkipCharacterClass)."""
        t, j = self.t, i + 1
        if j < len(t) and t[j] == "^":
            j += 1
        while j < len(t):
            if t[j] == "\\":
                j += 2
                continue
            if t[j] == "]":
                return j + 1
            j += 1
        raise self.err("Unclosed '['", i)

    def char_class(self, i: int, end: int) -> Ranges:
        """The class ``t[i:end]`` (ParseCharacterClassLeaf): case folding before negation."""
        t, j = self.t, i + 1
        content_end = end - 1
        neg = j < content_end and t[j] == "^"
        j += 1 if neg else 0
        if j == content_end:
            raise self.err(f"Empty character class {t[i:end]} is not allowed in regex", i)

        def unit(j: int) -> tuple[int | None, Ranges, bool, int]:
            if t[j] == "\\":
                return self.escape(j, True)
            return ord(t[j]), (), False, j + 1

        parts: list[tuple[int, int]] = []
        while j < content_end:
            cp, rs, uneg, j = unit(j)
            if cp is None:  # \d etc.: never a range endpoint; a following '-' is literal
                parts.extend(cs_neg(cs(*rs)) if uneg else rs)
                continue
            if j < content_end and t[j] == "-" and j + 1 < content_end:
                hi, hrs, _, j = unit(j + 1)
                if hi is None:
                    raise self.err(f"Invalid character range endpoint in regex character class {t[i:end]}", i)
                if hi < cp:
                    raise self.err("Invalid character range (lower bound exceeds upper bound) in regex "
                                   f"character class {t[i:end]}", i)
                parts.append((cp, hi))
            else:
                parts.append((cp, cp))
        rs = cs(*parts)
        if self.fold:
            rs = fold_ascii(rs)
        return cs_neg(rs) if neg else rs

    # ---------------------------------------------------------------- structure
    def parse(self) -> RNode:
        """ParseRegexToIR: a stack of atoms and markers, folded at ')' and at the end."""
        t = self.t
        stack: list = []  # atoms (tuples) and markers ("(", pos) / ("|", pos) as lists
        i = 0

        def last_atom(what: str, at: int) -> RNode:
            if not stack or isinstance(stack[-1], list):
                raise self.err(what, at)
            return stack.pop()

        def lazy(j: int) -> int:  # a non-greedy '?' after a quantifier: the same language
            return j + 1 if j < len(t) and t[j] == "?" else j

        while i < len(t):
            c = t[i]
            if c in "^$":
                i += 1
            elif c == "[":
                end = self.skip_class(i)
                stack.append(("set", self.char_class(i, end)))
                i = end
            elif c == "]":
                raise self.err("Unmatched ']'", i)
            elif c in "+*?":
                atom = last_atom(f"There is nothing to repeat before '{c}'", i)
                lo, hi = {"+": (1, None), "*": (0, None), "?": (0, 1)}[c]
                stack.append(("rep", atom, lo, hi))
                i = lazy(i + 1)
            elif c == "(":
                if t[i + 1:i + 2] == "?":
                    if i + 2 >= len(t):
                        raise self.err("Group modifier is not finished", i)
                    m = t[i + 2]
                    if m == ":":
                        stack.append(["(", i])
                        i += 3
                    elif m in "=!":
                        stack.append(EPS)  # xgrammar ignores lookaheads: the empty string
                        i = self.skip_group(i)
                    elif m == "<" or (m == "P" and t[i + 3:i + 4] == "<"):
                        j = i + 3 if m == "<" else i + 4
                        if t[j:j + 1] in ("=", "!"):
                            raise self.err("Lookbehind assertion is not supported in regex", i)
                        k = j
                        while k < len(t) and (t[k].isascii() and t[k].isalnum() or t[k] == "_"):
                            k += 1
                        if k == j or t[k:k + 1] != ">":
                            raise self.err("Invalid named capturing group", i)
                        stack.append(["(", i])
                        i = k + 1
                    else:
                        raise self.err(f"Unsupported group modifier '(?{m}'", i)
                else:
                    stack.append(["(", i])
                    i += 1
            elif c == "|":
                stack.append(["|", i])
                i += 1
            elif c == ")":
                branches: list[list] = [[]]
                while stack and not (isinstance(stack[-1], list) and stack[-1][0] == "("):
                    e = stack.pop()
                    if isinstance(e, list):
                        branches.append([])
                    else:
                        branches[-1].append(e)
                if not stack:
                    raise self.err("Unmatched ')'", i)
                stack.pop()
                stack.append(_alt([("cat", tuple(reversed(b))) for b in reversed(branches)]))
                i += 1
            elif c == "{":
                atom = last_atom("There is nothing to repeat before the repetition", i)
                lo, hi, i = self.repeat(i)
                stack.append(("rep", atom, lo, hi))
                i = lazy(i)
            elif c == "\\":
                cp, rs, neg, i = self.escape(i, False)
                stack.append(("set", self.char_set(cp, rs, neg)))
            elif c == ".":
                stack.append(("set", ((0, MAXC),)))
                i += 1
            else:
                stack.append(("set", self.char_set(ord(c), (), False)))
                i += 1
        branches = [[]]
        for e in stack:
            if isinstance(e, list):
                if e[0] == "(":
                    raise self.err("The parenthesis is not closed", e[1])
                branches.append([])
            else:
                branches[-1].append(e)
        return _alt([("cat", tuple(b)) for b in branches])

    def skip_group(self, i: int) -> int:
        """Offset past the lookahead group at ``t[i:]`` (skipped, as xgrammar skips it)."""
        t, depth, j = self.t, 1, i + 3
        while j < len(t) and depth:
            if t[j] == "\\":
                j += 2
                continue
            if t[j] == "[":
                j = self.skip_class(j)
                continue
            depth += t[j] == "("
            depth -= t[j] == ")"
            j += 1
        if depth:
            raise self.err("The parenthesis is not closed", i)
        return j

    def repeat(self, i: int) -> tuple[int, int | None, int]:
        """``{n}``, ``{n,}``, ``{n,m}`` at ``t[i]`` (CheckRepeat: blanks allowed around the numbers);
        returns (lo, hi, offset past '}')."""
        t, j = self.t, i + 1

        def blanks(j: int) -> int:
            while j < len(t) and t[j] == " ":
                j += 1
            return j

        def number(j: int, what: str) -> tuple[int, int]:
            k = j
            while k < len(t) and t[k].isascii() and t[k].isdigit():
                k += 1
            if k == j:
                raise self.err(f"Invalid repetition count: expected {what}", i)
            if k - j > _MAX_REPEAT_DIGITS:
                raise self.err(f"Invalid repetition count: the count {t[j:k]} is too large", i)
            return int(t[j:k]), k

        lo, j = number(blanks(j), "a number after '{'")
        j = blanks(j)
        if t[j:j + 1] == "}":
            return lo, lo, j + 1
        if t[j:j + 1] != ",":
            raise self.err("Invalid repetition count: expected ',' or '}' after the lower bound", i)
        j = blanks(j + 1)
        if t[j:j + 1] == "}":
            return lo, None, j + 1
        hi, j = number(j, "a number or '}' after ','")
        if hi < lo:
            raise self.err(f"Invalid repetition count: the lower bound {lo} is larger than the upper bound {hi}", i)
        j = blanks(j)
        if t[j:j + 1] != "}":
            raise self.err("Invalid repetition count: expected '}' after the upper bound", i)
        return lo, hi, j + 1


def _is_hex(s: str) -> bool:
    return all(c in "0123456789abcdefABCDEF" for c in s)


def _alt(options: list) -> RNode:
    return options[0] if len(options) == 1 else ("alt", tuple(options))


# ------------------------------------------------------------------- language transformations
def restrict(node: RNode, forbidden: Ranges) -> RNode:
    """``node`` with ``forbidden`` removed from every character it matches (``json_string``)."""
    kind = node[0]
    if kind == "set":
        return ("set", cs_diff(node[1], forbidden))
    if kind == "rep":
        return ("rep", restrict(node[1], forbidden), node[2], node[3])
    return (kind, tuple(restrict(x, forbidden) for x in node[1]))


def simplify(node: RNode) -> RNode:
    """The same language, with empty sets propagated (NOTHING) and empty sequences dropped."""
    kind = node[0]
    if kind == "set":
        return node
    if kind == "rep":
        item, lo, hi = simplify(node[1]), node[2], node[3]
        if hi == 0 or item == EPS:
            return EPS
        if item == NOTHING:
            return EPS if lo == 0 else NOTHING
        return ("rep", item, lo, hi)
    parts = [simplify(x) for x in node[1]]
    if kind == "cat":
        if NOTHING in parts:
            return NOTHING
        parts = [p for p in parts if p != EPS]
        return parts[0] if len(parts) == 1 else ("cat", tuple(parts))
    parts = [p for p in parts if p != NOTHING]
    if not parts:
        return NOTHING
    uniq = list(dict.fromkeys(parts))
    return uniq[0] if len(uniq) == 1 else ("alt", tuple(uniq))


def translate(pattern: str, *, flags: str | None = None, json_string: bool = False) -> RNode:
    """The language of xgrammar's ``Regex(pattern, flags=flags, json_string=json_string)`` as an
    AST (``simplify``-ed: NOTHING when it matches no string); ``RegexDialectError`` where
    xgrammar refuses the pattern."""
    node = _Parser(macro_pattern(pattern, flags)).parse()
    if json_string:
        node = restrict(node, JSON_FORBIDDEN)
    return simplify(node)


def literal(text: str) -> RNode:
    """The string ``text`` as an AST."""
    return ("cat", tuple(("set", ((ord(c), ord(c)),)) for c in text))
