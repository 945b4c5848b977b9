"""Terminal patterns of trellis' own grammar readers without importing Lark: ``PatternStr`` /
``PatternRE`` are twins of ``lark.lexer``'s (the same fields, the same ``to_regexp()`` text and
widths, the same equality within their own family), made from a literal's text as Lark reads it
(``plain_pattern``: Lark's escapes; its own ``_literal_to_pattern`` for the rare literals that need
it) and joined as Lark's ``TerminalTreeToPattern`` joins them (``sequence``, ``alternatives``,
``repeat``: the same regex text, alternation order included, which matters for lazy terminals).
The plain-BNF reader (``grammar_ir.load_bnf``, the JSON Schema path) and the Lark-file reader
(``lark_reader.read``, what GBNF and most ``.lark`` files go through) use them; Lark's own loader,
for what those readers hand on, keeps Lark's classes.

Why: ``import lark`` (its grammar loader builds its own tables at import) was 20-45 ms of a new
process's first schema compile after ``trellis.load()`` (3 maskbench schemas, one process each, Intel
VM: the compile itself 3.3 / 9.9 / 26.2 ms beside it): the wait a CLI user meets on every run.

Consumers read ``type`` ("str" / "re"), ``value``, ``flags``, ``to_regexp()`` and the widths, which
both families have. ``tests/constrain/test_grammar_ir.py`` compares them with Lark's."""

from __future__ import annotations

import importlib.util
import re
import sys
from typing import Collection

if sys.version_info >= (3, 11):
    import re._constants as sre_constants
    import re._parser as sre_parse
else:  # pragma: no cover - the CI's Python is 3.11
    import sre_constants
    import sre_parse


def _with_flags(value: str, flags: frozenset) -> str:
    for f in flags:  # in the frozenset's order, as Lark's Pattern._get_flags
        value = "(?%s:%s)" % (f, value)
    return value


class _Pattern:
    __slots__ = ("value", "flags", "raw")
    type = ""

    def __init__(self, value: str, flags: Collection[str] = (), raw: str | None = None) -> None:
        self.value = value
        self.flags = frozenset(flags)
        self.raw = raw

    def __repr__(self) -> str:
        return repr(self.to_regexp())

    def __hash__(self) -> int:
        return hash((type(self), self.value, self.flags))

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.value == other.value and self.flags == other.flags  # type: ignore[attr-defined]

    def to_regexp(self) -> str:
        raise NotImplementedError


class PatternStr(_Pattern):
    """A string literal (``lark.lexer.PatternStr``'s twin)."""

    __slots__ = ()
    type = "str"

    def to_regexp(self) -> str:
        return _with_flags(re.escape(self.value), self.flags)

    @property
    def min_width(self) -> int:
        return len(self.value)

    @property
    def max_width(self) -> int:
        return len(self.value)


class PatternRE(_Pattern):
    """A regex literal (``lark.lexer.PatternRE``'s twin; its widths are Lark's, computed once on
    first use, as Lark caches them: ``alternatives`` reads them per sort, and memoised patterns
    are shared by every grammar)."""

    __slots__ = ("_width",)
    type = "re"

    def to_regexp(self) -> str:
        return _with_flags(self.value, self.flags)

    def _widths(self) -> tuple[int, int]:
        try:
            return self._width
        except AttributeError:
            self._width = regexp_width(self.to_regexp())
            return self._width

    @property
    def min_width(self) -> int:
        return self._widths()[0]

    @property
    def max_width(self) -> int:
        return self._widths()[1]


_CATEG = re.compile(r"\\p{[A-Za-z_]+}")
_HAS_REGEX = importlib.util.find_spec("regex") is not None  # (as Lark looks it up at its import)


def regexp_width(expr: str) -> tuple[int, int]:
    """(min, max) length of ``expr``'s matches as Lark's ``lark.utils.get_regexp_width`` reckons it:
    ``re``'s parser, ``\\p{..}`` categories as one letter when the ``regex`` module is there, and
    where ``re`` cannot parse it, ``regex``'s answer to whether it matches the empty string."""
    if _HAS_REGEX:
        final = _CATEG.sub("A", expr)
    else:
        if _CATEG.search(expr):
            raise ImportError("`regex` module must be installed in order to use Unicode categories.", expr)
        final = expr
    try:
        lo, hi = sre_parse.parse(final).getwidth()
        return int(lo), int(hi)
    except sre_constants.error:
        if not _HAS_REGEX:
            raise ValueError(expr) from None
        import regex

        c = regex.compile(final)
        widest = int(getattr(sre_parse, "MAXWIDTH", sre_constants.MAXREPEAT))
        return (1, widest) if c.match("") is None else (0, widest)


# -- a terminal's expansion tree joined into one pattern, as Lark's TerminalTreeToPattern does

def sequence(items: list) -> "PatternStr | PatternRE":
    """The patterns of ``items`` one after another (``TerminalTreeToPattern.expansion``)."""
    if not items:
        return PatternStr("")
    if len(items) == 1:
        return items[0]
    return PatternRE("".join(i.to_regexp() for i in items), ())


def alternatives(exps: list) -> "PatternStr | PatternRE":
    """Any one of ``exps`` (``TerminalTreeToPattern.expansions``: the widest first, so that ``re``'s
    first match is the longest; sorts ``exps`` in place, as Lark does)."""
    if len(exps) == 1:
        return exps[0]
    exps.sort(key=lambda x: (-x.max_width, -x.min_width, -len(x.value)))
    return PatternRE("(?:%s)" % "|".join(i.to_regexp() for i in exps), ())


def repeat(args: list) -> PatternRE:
    """``inner`` with an operator ``?`` ``*`` ``+``, or ``~`` n / n m (``TerminalTreeToPattern.expr``)."""
    inner, op = args[:2]
    if op == "~":
        if len(args) == 3:
            op = "{%d}" % int(args[2])
        else:
            mn, mx = map(int, args[2:])
            if mx < mn:
                raise ValueError("Bad Range for %s (%d..%d isn't allowed)" % (inner, mn, mx))
            op = "{%d,%d}" % (mn, mx)
    elif len(args) != 2:
        raise ValueError("an operator takes no count")
    return PatternRE("(?:%s)%s" % (inner.to_regexp(), op), inner.flags)


_ESCAPE = re.compile(r"\\(.)", re.S)


def _lark_escaped(m: "re.Match[str]") -> str:
    c = m.group(1)
    return "\\\\\\\\" if c == "\\" else "\\" + c if c in "Uuxnftr" else "\\\\" + c


def literal_fields(literal: str) -> tuple[str, str, str] | None:
    """(kind "str" / "re", value, flags) of a ``"string"flags`` or ``/regex/flags`` literal as
    Lark's ``_literal_to_pattern`` reads it, without its per-character loop and ``ast.literal_eval``
    (0.4 ms for a schema's 1 KB length-bounded string regex; a schema grammar has dozens of
    literals): Lark's ``eval_escaping`` rules applied with one ``re.sub`` and decoded with
    ``unicode_escape``. None for what only Lark's function should read (a newline, an empty body,
    a trailing backslash, an escape that does not decode): it raises Lark's own errors there."""
    flag_start = max(literal.rfind('"'), literal.rfind("/")) + 1
    flags, body = literal[flag_start:], literal[1:flag_start - 1]
    if "\n" in literal or not body or body.endswith("\\"):
        return None
    if "\\" in body or "'" in body:
        w = _ESCAPE.sub(_lark_escaped, body).replace('\\"', '"').replace("'", "\\'")
        try:
            value = w.encode("latin-1", "backslashreplace").decode("unicode_escape")
        except (UnicodeDecodeError, UnicodeEncodeError):
            return None
    else:
        value = body
    if literal[0] == '"':
        return "str", value.replace("\\\\", "\\"), flags
    return "re", value, flags


def plain_pattern(literal: str) -> PatternStr | PatternRE:
    """The pattern of a ``"string"flags`` or ``/regex/flags`` literal, as Lark reads it (memoised:
    a schema grammar's punctuation, keys and value regexes recur across schemas). Bad literals
    raise what Lark raises."""
    hit = PLAIN_MEMO.get(literal)
    if hit is None:
        fields = literal_fields(literal)
        if fields is None:  # an unusual literal: Lark's own reading (and its errors)
            from lark import Token
            from lark.load_grammar import _literal_to_pattern

            p = _literal_to_pattern(Token("STRING" if literal[0] == '"' else "REGEXP", literal))
            fields = (p.type, p.value, "".join(sorted(p.flags)))
        kind, value, flags = fields
        hit = (PatternStr if kind == "str" else PatternRE)(value, flags, raw=literal)
        if len(PLAIN_MEMO) >= PLAIN_MEMO_MAX:
            PLAIN_MEMO.clear()
        PLAIN_MEMO[literal] = hit
    return hit


# Read-only patterns by literal text, shared by every grammar either reader reads; bounded by entries.
PLAIN_MEMO: dict[str, PatternStr | PatternRE] = {}
PLAIN_MEMO_MAX = 1 << 15
