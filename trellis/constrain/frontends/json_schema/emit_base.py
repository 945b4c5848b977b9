"""The emitter's shared part: its data (``KeyCell`` key classes, determinised ``Automaton``s,
``Val`` values), the state every emission stage fills (``EmitterBase``), refusals (``fail``,
``soften``) and terminal naming. The stages are ``keys`` (object key classes), ``scalars``
(string and number values), ``automata`` (object/array automata) and ``emit`` (``LarkEmitter``:
classes, productivity, the text)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from trellis.constrain.errors import SchemaError
from trellis.constrain.frontends.json_schema.limits import CHUNK
from trellis.constrain.frontends.json_schema.nodes import IgnoredKeyword, NodeTable
from trellis.constrain.frontends.json_schema.specs import Shallow


@dataclass(frozen=True)
class KeyCell:
    """A class of object keys: one declared key, or the other keys matching pattern/name classes
    ``mask`` of ``langs``; with the value node per ObjSpec alternative (NEVER_ID: not allowed)."""

    key: str | None
    langs: tuple
    mask: int
    values: tuple


_UNIONS = ("oneOf", "dependentSchemas", "dependencies", "dependentRequired", "not", "type", "enum", "$ref")
START = 0
Val = tuple  # ("c", class) | ("lit", "null"|"true"|"false") | ("S"|"N", regex) | ("SC", (lo, hi[, unit])) | ("SR", rule) | ("O"|"A", class)


@dataclass
class Automaton:
    """A determinised object/array automaton: edges (src, cell index or -1, Val, dst); state 0 starts."""

    edges: list
    accepting: set
    n: int


class EmitterBase:
    """The emitter's state (filled by the stages), its refusals and its terminals."""

    def __init__(self, b: NodeTable, *, whitespace: str, max_ws: int, shared_sources: bool = False,
                 string_chunk: int = CHUNK) -> None:
        self.b = b
        self.string_chunk = string_chunk  # ScalarRules._chunk_rules: characters per chunk terminal
        self.flex = whitespace == "flexible"
        self.max_ws = max_ws
        self.shared_sources = shared_sources  # LarkEmitter._edge_rules: one union per source set
        self.cells: dict[int, list[KeyCell]] = {}
        self._cell_memo: dict[tuple, list[KeyCell]] = {}
        self._regions: dict[tuple, tuple | None] = {}
        self._region_rx: dict[tuple, str | None] = {}
        self._key_terms: dict[str, str] = {}
        self.cls: dict[int, int] = {}
        self.rep: dict[int, int] = {}
        self.parts: dict[tuple[int, str], Any] = {}
        self.autos: dict[tuple[str, int], Automaton] = {}
        self._scalars: dict[tuple[int, str], Val | None] = {}
        self._chunks: set[str] = set()
        self._units: dict[str, int] = {}  # ScalarRules._chunk_rules: a class unit's number in rule names
        self._extra_rules: list[tuple[str, str]] = []
        self.terms: dict[tuple[str, str], str] = {}
        self.ptr = ""

    # -- errors
    def fail(self, msg: str) -> None:
        raise SchemaError(msg, pointer=self.ptr)

    def soften(self, keyword: str, reason: str, at: str | None = None) -> None:
        """Lenient fallback to a looser (superset) construction, or SchemaError in strict mode.
        The pointer is where ``keyword`` is, in the node's schema (``at``, default the node being
        emitted) or in a subschema merged into it (``SchemaDocument.locate``). A union (``anyOf``)
        may come from other keywords: the first of them found is named."""
        at = self.ptr if at is None else at
        for kw in (keyword,) + (_UNIONS if keyword == "anyOf" else ()):
            ptr = self.b.doc.locate(at, kw)
            if ptr != at:
                keyword = kw
                break
        if not self.b.lenient:
            raise SchemaError(f"{keyword}: {reason}", pointer=ptr)
        self.b.ignored.append(IgnoredKeyword(keyword, ptr, reason))

    # -- terminals and classes
    def _term(self, kind: str, text: str, priority: int = 0) -> str:
        """Name of the terminal ("lit": literal text, "re": Python regex), defined once."""
        name = self.terms.get((kind, text, priority))
        if name is None:
            name = self.terms[(kind, text, priority)] = f"T{len(self.terms)}" + (f".{priority}" if priority else "")
        return name.split(".")[0]

    def _shallow_c(self, c: int) -> Shallow:
        return self.b.shallow(self.rep[c])


def lark_regex(rx: str) -> str:
    """A Python regex as the body of a Lark /.../ literal (Lark unescapes \\uXXXX itself):
    ``/`` escaped, ``"`` spelled ``\\u0022`` (Lark's unescaping turns ``\\"`` into ``\"``, losing
    the backslash), everything outside printable ASCII as ``\\uXXXX`` / ``\\UXXXXXXXX``. One
    ``re.sub`` instead of a Python loop per character: that loop was ~0.1 ms of a median maskbench
    schema's ~0.9 ms translation (50 schemas, line_profiler; a schema's regexes run to kilobytes)."""
    return rx if _LARK_PLAIN.fullmatch(rx) else _LARK_SPECIAL.sub(_lark_escape, rx)


_LARK_PLAIN = re.compile(r'[ !#-.0-~]*')  # printable ASCII but '"' and '/': kept as they are
_LARK_SPECIAL = re.compile(r'[^ !#-.0-~]')


def _lark_escape(m: "re.Match[str]") -> str:
    c = m.group()
    if c == "/":
        return "\\/"
    o = ord(c)
    return f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}"
