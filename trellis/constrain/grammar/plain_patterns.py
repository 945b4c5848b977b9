"""Terminal patterns of the plain-BNF reader (``grammar_ir.load_bnf``, the JSON Schema path) without
importing Lark: ``PatternStr`` / ``PatternRE`` are twins of ``lark.lexer``'s (the same fields, the
same ``to_regexp()`` text, the same equality within their own family), made from a literal's
text as Lark reads it (``lark_reader.literal_fields``; Lark's own ``_literal_to_pattern`` for the
rare literals that reader hands on).

Why: ``import lark`` (its grammar loader builds its own tables at import) was 20-45 ms of a new
process's first schema compile after ``trellis.load()`` (3 maskbench schemas, one process each, Intel
VM: the compile itself 3.3 / 9.9 / 26.2 ms beside it): the wait a CLI user meets on every run. The
plain-BNF reader needs no Lark parser, only the patterns; the Lark-file reader
(``lark_reader.read``) keeps Lark's classes, since it hands them to Lark's own pattern builder.

Consumers read ``type`` ("str" / "re"), ``value``, ``flags`` and ``to_regexp()``, which both
families have."""

from __future__ import annotations

import re
from typing import Collection

from trellis.constrain.grammar.lark_reader import literal_fields


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
    """A regex literal (``lark.lexer.PatternRE``'s twin; its widths are Lark's, computed on demand)."""

    __slots__ = ()
    type = "re"

    def to_regexp(self) -> str:
        return _with_flags(self.value, self.flags)

    @property
    def min_width(self) -> int:
        from lark.utils import get_regexp_width

        return get_regexp_width(self.to_regexp())[0]

    @property
    def max_width(self) -> int:
        from lark.utils import get_regexp_width

        return get_regexp_width(self.to_regexp())[1]


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


# Read-only patterns by literal text, shared by every schema grammar; bounded by entries.
PLAIN_MEMO: dict[str, PatternStr | PatternRE] = {}
PLAIN_MEMO_MAX = 1 << 15
