"""llama.cpp GBNF -> Lark, the parsed form: the node types of a GBNF rule body.

And what the reading and writing stages both ask of them.

``Lit``, ``Chars``, ``Ref``, ``Repeat``, ``Seq``, ``Alt`` (GBNF itself), ``Tok`` (a token element)
and ``Lazy`` (xgrammar's ``lazy`` rule body); ``MacroValue`` (an xgrammar macro's argument);
``linear_to_star`` (edge recursion as a repeat), ``ungrouped``, ``text_only``, ``matches_empty`` and
``from_regex_ast`` (an ``xgrammar_regex`` AST as nodes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from trellis.constrain.frontends import xgrammar_regex
from trellis.constrain.terminal_kinds import TokenRef

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


@dataclass(frozen=True)
class Tok:
    """One token by id (``terminal_kinds.py``): xgrammar's ``Token(...)`` / ``ExcludeToken(...)``,
    llama.cpp's ``<[id]>`` / ``!<[id]>`` / ``<text>``. Not text: never fused into a terminal."""
    ref: TokenRef


@dataclass(frozen=True)
class Lazy:
    """xgrammar's ``name[lazy] ::= body`` (``max_chars`` None), or ``name[max_chars=N] ::= body``: a
    rule option over a regular ``body``, one terminal of its own, never fused with its neighbours
    (``gbnf.py`` names it ``_TRELLIS_LAZY_k`` / ``_TRELLIS_CHARS_N_k``; the IR cuts its DFA,
    ``dfa_minimise.shortest`` / ``char_budget``: ``terminal_kinds.py`` says what each means)."""
    body: "Node"
    max_chars: int | None = None


Node = Union[Lit, Chars, Ref, Repeat, Seq, Alt, Tok, Lazy]

@dataclass(frozen=True)
class MacroValue:
    """One argument of an xgrammar macro call: kind "str", "int", "bool", "name" or "tuple"."""
    kind: str
    value: object
    pos: int = field(compare=False)



def linear_to_star(name: str, body: Node, regular) -> Node:
    """``body`` of rule ``name`` with self-recursion at the edge made a repeat, where every other
    part is rule-free: ``X ::= a X | b`` is ``a* b`` and ``X ::= X a | b`` is ``b a*`` (the least
    solution of the equation; the same language). ``characters ::= "" | character characters``,
    how JSON strings are often written in GBNF (xgrammar's and vLLM users' JSON grammars), then
    fuses into one terminal instead of a terminal per character: a mask in such a string stepped
    thousands of token rests through the chart byte by byte (~270 ms a mask, issue 58).
    ``regular(node)``: whether a part may stand in the repeat (refers to no rule)."""
    if not isinstance(body, Alt) or len(body.options) < 2:
        return body
    right, left, base = [], [], []
    for o in body.options:
        items = o.items
        if items and items[-1] == Ref(name) and all(regular(x) for x in items[:-1]):
            right.append(Seq(items[:-1]))
        elif items and items[0] == Ref(name) and all(regular(x) for x in items[1:]):
            left.append(Seq(items[1:]))
        elif regular(o):
            base.append(o)
        else:
            return body  # another reference (to X, or to a rule not inlined): left as written
    if not base or (right and left) or not (right or left):
        return body
    loop = Repeat(Alt(tuple(right or left)), 0, None)
    rest = Alt(tuple(base))
    return Alt((Seq((loop, rest) if right else (rest, loop)),))



def ungrouped(node: Node) -> Node:
    """``node`` without redundant groups: a one-option group inside a sequence is spliced into
    it, and an option that is one group contributes that group's options (the same language):
    ``(([a-z] r) | ([a-z]))`` is ``[a-z] r | [a-z]``, so ``linear_to_star`` sees the recursion."""
    if isinstance(node, Alt):
        options: list[Seq] = []
        for o in node.options:
            f = ungrouped(o)
            if len(f.items) == 1 and isinstance(f.items[0], Alt):
                options.extend(f.items[0].options)
            else:
                options.append(f)
        return Alt(tuple(options))
    if isinstance(node, Seq):
        items: list[Node] = []
        for x in node.items:
            f = ungrouped(x)
            if isinstance(f, Alt) and len(f.options) == 1:
                items.extend(f.options[0].items)
            else:
                items.append(f)
        return Seq(tuple(items))
    if isinstance(node, Repeat):
        return Repeat(ungrouped(node.item), node.min, node.max)
    return node


def text_only(node: Node) -> bool:
    """Whether ``node`` is text alone: no reference, token element or lazy part."""
    if isinstance(node, (Ref, Tok, Lazy)):
        return False
    if isinstance(node, Repeat):
        return text_only(node.item)
    if isinstance(node, (Seq, Alt)):
        return all(text_only(x) for x in (node.items if isinstance(node, Seq) else node.options))
    return True


def matches_empty(node: Node) -> bool:
    if isinstance(node, Lit):
        return not node.text
    if isinstance(node, Repeat):
        return node.min == 0 or node.max == 0 or matches_empty(node.item)
    if isinstance(node, Seq):
        return all(matches_empty(x) for x in node.items)
    if isinstance(node, Alt):
        return any(matches_empty(x) for x in node.options)
    return False  # a class, a reference (inlined before this is asked), a token element


def from_regex_ast(ast: tuple) -> Node:
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
        return Repeat(from_regex_ast(ast[1]), ast[2], ast[3])
    if kind == "cat":
        items = [from_regex_ast(x) for x in ast[1]]
        return Seq(tuple(items)) if items else Lit("")
    return Alt(tuple(x if isinstance(x, Seq) else Seq((x,)) for x in map(from_regex_ast, ast[1])))
