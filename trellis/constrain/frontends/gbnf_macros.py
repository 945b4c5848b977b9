"""llama.cpp GBNF -> Lark, reading stage: xgrammar's macros and rule options as GBNF nodes.

Each macro reader takes the parser (``gbnf_reader.GbnfParser``: its ``error``, ``where``, ``refs``,
``rules``), where the macro's name began, and its parsed arguments, and returns the node of the
language xgrammar's matcher gives the macro: ``Regex`` (``xgrammar_regex.py``), ``Substring``,
``TagDispatch`` (``xgrammar_tags.py``), ``Token``, ``ExcludeToken`` and ``TokenTagDispatch``
(token elements, ``terminal_kinds.py``). ``lazy_body`` reads a rule with the ``lazy`` option.
"""

from __future__ import annotations

from typing import Any

from trellis.constrain.frontends import xgrammar_regex, xgrammar_tags
from trellis.constrain.frontends.gbnf_nodes import (Alt, Lazy, Lit, MacroValue, Node, Ref, Repeat, Seq, Tok,
                                                    from_regex_ast, linear_to_star, matches_empty, text_only,
                                                    ungrouped)
from trellis.constrain.terminal_kinds import TokenRef

SUBSTRING_MAX = 200_000


def pattern(p: Any, node: tuple, start: int, what: str) -> Node:
    """A macro's language (an ``xgrammar_regex`` AST) as GBNF nodes: the writer then treats it
    like GBNF text (fused into one terminal where small; a large counted repeat in helper
    rules, as ``x{2,50000}`` would be, not unrolled into one automaton)."""
    if node == xgrammar_regex.NOTHING:
        raise p.error(f"{what} matches no string", start)
    return from_regex_ast(node)


def regex_macro(p: Any, start: int, args: list["MacroValue"], named: dict[str, "MacroValue"]) -> Node:
    """``Regex("pattern", flags="isu", json_string=bool)``: xgrammar's regex dialect
    (``xgrammar_regex.py``)."""
    if len(args) != 1 or args[0].kind != "str":
        raise p.error("Regex expects exactly one string argument", start)
    for key, v in named.items():
        want = {"json_string": "bool", "flags": "str"}.get(key)
        if want is None:
            raise p.error(f"Regex does not support the named argument {key}", v.pos)
        if v.kind != want:
            raise p.error(f"Regex's {key} must be a {'boolean' if want == 'bool' else 'string'}", v.pos)
    flags = named["flags"].value if "flags" in named else None
    json_string = bool(named["json_string"].value) if "json_string" in named else False
    try:
        node = xgrammar_regex.translate(args[0].value, flags=flags, json_string=json_string)
    except xgrammar_regex.RegexDialectError as e:
        failed = e  # raised outside the handler: the located error alone, no chained traceback
    else:
        return pattern(p, node, start, f"Regex({args[0].value!r})")
    raise p.error(f"Regex({args[0].value!r}): {failed.message} (at offset {failed.pos})", args[0].pos)


def substring_macro(p: Any, start: int, args: list["MacroValue"], named: dict[str, "MacroValue"]) -> Node:
    """``Substring("c1", "c2", ...)``: every run of consecutive whole chunks, the empty one
    included (xgrammar compiles a suffix automaton; here: for each first chunk, the chain of
    the following ones, each optional in turn)."""
    if named:
        raise p.error("Substring() does not accept named arguments", start)
    if any(a.kind != "str" for a in args):
        raise p.error("Substring() arguments must be strings", start)
    chunks = [xgrammar_regex.literal(a.value) for a in args]
    if sum(len(a.value) for a in args) * max(len(args), 1) > SUBSTRING_MAX:
        raise p.error(f"Substring() of {len(args)} chunks is too large (its regex would have over "
                         f"{SUBSTRING_MAX} characters)", start)
    chains: list = []
    tail: tuple | None = None
    for chunk in reversed(chunks):  # chain(i) = chunk_i chain(i+1)?
        tail = chunk if tail is None else ("cat", (chunk, ("rep", tail, 0, 1)))
        chains.append(tail)
    node = xgrammar_regex.simplify(("alt", (xgrammar_regex.EPS, *chains)))
    return pattern(p, node, start, "Substring(...)")


_PAIR = {"str": "Each tag dispatch element must be a pair (tag, rule)",
         "int": "Each token tag dispatch element must be a pair (token id, rule)"}
_TRIGGER = {"str": "Tag must be a non-empty string literal", "int": "A trigger must be a non-negative integer token id"}


def _dispatch_pairs(p: Any, macro: str, args: list["MacroValue"], named: dict[str, "MacroValue"],
                    trigger: str) -> tuple[list[tuple[Any, Ref]], bool]:
    """The (trigger, rule) pairs and ``loop_after_dispatch`` of ``TagDispatch`` (``trigger``
    "str") or ``TokenTagDispatch`` ("int"), checked as xgrammar checks them."""
    for key, v in named.items():
        if key not in ("loop_after_dispatch", "excludes"):
            raise p.error(f"Unknown named argument for {macro}: {key}", v.pos)
    pairs: list[tuple[Any, Ref]] = []
    for a in args:
        if a.kind != "tuple" or len(a.value) != 2:
            raise p.error(_PAIR[trigger], a.pos)
        tag, rule = a.value
        if tag.kind != trigger or (trigger == "str" and not tag.value):
            raise p.error(_TRIGGER[trigger], tag.pos)
        if rule.kind != "name":
            raise p.error("Rule reference must be an identifier", rule.pos)
        ref = Ref(rule.value, *p.where(rule.pos))
        p.refs.append(ref)
        pairs.append((tag.value, ref))
    loop = named.get("loop_after_dispatch")
    if loop is not None and loop.kind != "bool":
        raise p.error("loop_after_dispatch must be a boolean literal", loop.pos)
    return pairs, loop is None or bool(loop.value)


def tag_dispatch_macro(p: Any, start: int, args: list["MacroValue"], named: dict[str, "MacroValue"]) -> Node:
    """``TagDispatch(("tag", rule), ..., loop_after_dispatch=true, excludes=("s", ...))``: free
    text, a tag, its rule, and again (``xgrammar_tags.py``): ``(lead_1 rule_1 | ...)* free``,
    or ``free | lead_1 rule_1 | ...`` without the loop."""
    pairs, loop = _dispatch_pairs(p, "TagDispatch", args, named, "str")
    excl = named.get("excludes")
    excludes: list[str] = []
    if excl is not None:
        if excl.kind != "tuple":
            raise p.error("excludes must be a tuple", excl.pos)
        for x in excl.value:
            if x.kind != "str" or not x.value:
                raise p.error("Exclude must be a non-empty string literal", x.pos)
            if any(t.startswith(x.value) for t, _ in pairs):
                raise p.error(f"Exclude string must not be a prefix of trigger string: {x.value}", x.pos)
            excludes.append(x.value)
    try:
        free, lead = xgrammar_tags.languages([t for t, _ in pairs], excludes)
    except xgrammar_tags.TagDispatchTooLarge as e:
        too_large = str(e)
    else:
        too_large = ""
    if too_large:
        raise p.error(f"TagDispatch is too large for trellis: {too_large}", start)
    steps = [Seq((from_regex_ast(lead[i]), ref)) for i, (_, ref) in enumerate(pairs) if lead[i] != xgrammar_regex.NOTHING]
    free_node = None if free == xgrammar_regex.NOTHING else from_regex_ast(free)
    if loop:
        if free_node is None:  # (xgrammar: the root is always final, so free has "" at least)
            raise p.error("TagDispatch matches no string", start)
        return Seq(((Repeat(Alt(tuple(steps)), 0, None),) if steps else ()) + (free_node,))
    options = ([Seq((free_node,))] if free_node is not None else []) + steps
    if not options:
        raise p.error("TagDispatch matches no string", start)
    return Alt(tuple(options))


def token_macro(p: Any, start: int, args: list["MacroValue"], named: dict[str, "MacroValue"],
                exclude: bool = False) -> Node:
    """xgrammar's ``Token(id, ...)`` (one token among these ids) and ``ExcludeToken(id, ...)``
    (one token not among them): ``terminal_kinds.py``."""
    name = "ExcludeToken" if exclude else "Token"
    if named:
        raise p.error(f"{name}() does not accept named arguments", next(iter(named.values())).pos)
    if not args:
        raise p.error(f"{name}() needs at least one token id", start)
    for a in args:
        if a.kind != "int":
            raise p.error(f"{name}() arguments must be non-negative integer token ids", a.pos)
    return Tok(TokenRef.of([a.value for a in args], exclude=exclude))


def exclude_token_macro(p: Any, start: int, args: list["MacroValue"], named: dict[str, "MacroValue"]) -> Node:
    return token_macro(p, start, args, named, exclude=True)


def token_tag_dispatch_macro(p: Any, start: int, args: list["MacroValue"], named: dict[str, "MacroValue"]) -> Node:
    """``TokenTagDispatch((id, rule), ..., loop_after_dispatch=true, excludes=(id, ...))``: free
    tokens (any token but a trigger or an exclude), a trigger token, its rule, and again:
    ``(free | Token(id_1) rule_1 | ...)*``; without the loop ``free* (Token(id_i) rule_i)?``."""
    pairs, loop = _dispatch_pairs(p, "TokenTagDispatch", args, named, "int")
    excl = named.get("excludes")
    excludes: list[int] = []
    if excl is not None:
        if excl.kind != "tuple" or any(x.kind != "int" for x in excl.value):
            raise p.error("excludes must be a tuple of token ids", excl.pos)
        excludes = [x.value for x in excl.value]
    free = Tok(TokenRef.of([i for i, _ in pairs] + excludes, exclude=True))
    steps = [Seq((Tok(TokenRef.of([i])), ref)) for i, ref in pairs]
    if loop:
        return Repeat(Alt((Seq((free,)), *steps)), 0, None)
    any_free = Repeat(free, 0, None)
    return Seq((any_free, Repeat(Alt(tuple(steps)), 0, 1))) if steps else any_free


def lazy_body(p: Any, name: str) -> Node:
    """The ``Lazy`` node of rule ``name`` (xgrammar's ``lazy`` option, or ``max_chars``): its body
    with every reference replaced by that rule's body, which must end (xgrammar: "a single
    terminal-like form"; recursion and token elements refused by name). A lazy body that matches
    the empty string commits to it: the rule is ``""``. With both options the rule is lazy: a
    language no string of which begins another keeps all its strings under a budget."""
    lazy = name in p.lazy
    option, where = ("lazy", p.lazy[name]) if lazy else (f"max_chars={p.max_chars[name][0]}", p.max_chars[name][1])

    def inline(node: Node, busy: tuple) -> Node:
        if isinstance(node, Ref):
            if node.name in busy:
                raise p.error(f"rule {name!r} with {option} must be regular (one terminal), but rule "
                              f"{node.name!r} is recursive", where)
            # a rule that only repeats itself at one edge is a repeat (xgrammar's normaliser too)
            body = linear_to_star(node.name, ungrouped(p.rules[node.name]), text_only)
            return inline(body, busy + (node.name,))
        if isinstance(node, (Tok, Lazy)):
            raise p.error(f"rule {name!r} with {option} must be regular text (one terminal): it uses "
                          f"{'a token element' if isinstance(node, Tok) else 'a rule with a lazy or max_chars option'}",
                          where)
        if isinstance(node, Repeat):
            return Repeat(inline(node.item, busy), node.min, node.max)
        if isinstance(node, Seq):
            return Seq(tuple(inline(x, busy) for x in node.items))
        if isinstance(node, Alt):
            return Alt(tuple(Seq(tuple(inline(x, busy) for x in o.items)) for o in node.options))
        return node

    body = inline(p.rules[name], (name,))
    if lazy:
        return Lit("") if matches_empty(body) else Lazy(body)
    return Lazy(body, max_chars=p.max_chars[name][0])


MACRO_READERS = {"Regex": regex_macro, "Substring": substring_macro,
                  "TagDispatch": tag_dispatch_macro, "Token": token_macro,
                  "ExcludeToken": exclude_token_macro,
                  "TokenTagDispatch": token_tag_dispatch_macro}
