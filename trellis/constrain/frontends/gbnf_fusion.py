"""llama.cpp GBNF -> Lark, translation stage: Lark text of rule-free nodes, fusion and inlining.

How literals, character classes and rule-free parts are spelled in Lark (ASCII escapes,
precedences), and the rewriting that ``Gbnf.to_lark(fuse=True)`` applies before writing:
rule-free parts of a rule fused into one regex terminal, and small non-recursive rules inlined
where they are used (``gbnf.py``'s writer puts the rules together).
"""

from __future__ import annotations

from trellis.constrain.frontends.gbnf_nodes import matches_empty
from trellis.constrain.frontends.gbnf_reader import Alt, Chars, Lazy, Lit, Node, Ref, Repeat, Seq, Tok, linear_to_star

# Precedence of emitted Lark expressions: what may stand where without parentheses.
PREC_ALT, PREC_SEQ, PREC_POST, PREC_ATOM = 1, 2, 3, 4


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


def lark_string(text: str) -> str:
    return '"' + "".join(_escape(ord(c), '"\\') for c in text) + '"'


def lark_class(node: Chars) -> str:
    if not node.ranges:
        return "/./s"
    body = "".join(_escape(lo, _RE_SPECIAL) + ("" if lo == hi else "-" + _escape(hi, _RE_SPECIAL))
                   for lo, hi in node.ranges)
    return f"/[{'^' if node.negated else ''}{body}]/"


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
    if isinstance(node, (Ref, Tok, Lazy)):  # (a token element is not text, a lazy one is its own terminal)
        return False
    if isinstance(node, Repeat):
        return (node.max is None or node.max <= _FUSE_MAX_COUNT) and _rule_free(node.item)
    if isinstance(node, Seq):
        return all(_rule_free(x) for x in node.items)
    if isinstance(node, Alt):
        return all(_rule_free(x) for x in node.options)
    return True


def regex_text(node: Node) -> str:
    """Python-regex text (Lark ``/.../`` escaping) of a rule-free node, as a group-safe atom or
    sequence (alternations are wrapped)."""
    return _rx(node)


def _rx(node: Node) -> str:
    if isinstance(node, Lit):
        return "".join(_escape(ord(c), _RE_SPECIAL) for c in node.text)
    if isinstance(node, Chars):
        return "(?s:.)" if not node.ranges else lark_class(node)[1:-1]
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


def fused_terminal(node: Node) -> tuple[str, int] | None:
    """``node`` as one regex terminal (Lark text, precedence) when it refers to no rule and is
    more than a literal or a class; None otherwise."""
    if _simple(node) or not _rule_free(node):
        return None
    if not matches_empty(node):
        return f"/{_rx(node)}/", PREC_ATOM
    # nullable: X? with X the non-empty part, where that part is easy to write
    if isinstance(node, Repeat) and not matches_empty(node.item) and (node.max is None or node.max >= 1):
        lo = max(node.min, 1)
        body = _rx(Repeat(node.item, lo, node.max))
        return f"/{body}/?", PREC_POST
    if isinstance(node, Alt):  # (a | b | ""): X? when the nullable options are empty text only
        rest = tuple(o for o in node.options if not matches_empty(o))
        eps = [o for o in node.options if matches_empty(o)]
        if rest and all(isinstance(x, Lit) and not x.text for o in eps for x in o.items):
            return f"/{_rx(Alt(rest))}/?", PREC_POST
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
# Inside an unbounded repeat that then becomes rule-free (one terminal), a reference is inlined up
# to this size: left a rule, each iteration is a terminal of its own, and a token spanning many
# iterations crosses a terminal at every one of them (xml_simple.gbnf's names and attribute values, ``NameStartChar (NameChar)*`` with
# 14-alternative classes: 9 of 10 walks ended by the mask work bound; none with this).
_INLINE_IN_LOOP = 64


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


def inline_regular(rules: dict[str, Alt], root: str = "root") -> dict[str, Alt]:
    """The rules reachable from ``root`` (the start rule) with every reference to a rule whose
    expansion is rule-free (after the same substitution: not recursive) and at most
    ``_INLINE_POSITIONS`` positions (used once: any size; inside an unbounded repeat that it makes
    rule-free: ``_INLINE_IN_LOOP``) replaced by that expansion."""
    # (name, looped) -> its body with references substituted (inside an unbounded repeat: looped,
    # its own references too) and whether that body is inlined where used. A reference to a rule on
    # ``visiting`` is to a recursive rule, which is never inlined, so a body made during another
    # rule's visit is the same as one made later.
    bodies: dict[tuple[str, bool], tuple[Node, bool]] = {}
    visiting: set[str] = set()
    # A rule used once is inlined whatever its size (nothing is duplicated): a JSON string's
    # ``character ::= [^"\\] | "\\" escape`` takes in its ``escape``, and the string becomes one
    # terminal.
    uses: dict[str, int] = {}
    for user, b in rules.items():
        for r in _refs(b):
            if r != user:
                uses[r] = uses.get(r, 0) + 1

    def body_of(name: str, looped: bool = False) -> tuple[Node, bool] | None:
        key = (name, looped)
        if key not in bodies:
            if name in visiting:  # recursive: stays a rule (the cycle's rules learn it on return)
                return None
            visiting.add(name)
            b = linear_to_star(name, subst(rules[name], looped), _rule_free)
            visiting.discard(name)
            size = _positions(b)
            bodies[key] = b, _rule_free(b) and (size <= _INLINE_IN_LOOP if looped else
                                                size <= _INLINE_POSITIONS or uses.get(name, 0) == 1)
        return bodies[key]

    def expansion(name: str, looped: bool) -> Node | None:
        got = body_of(name)
        if got is not None and not got[1] and looped:
            got = body_of(name, True)
        return got[0] if got is not None and got[1] else None

    def subst(node: Node, looped: bool = False) -> Node:
        if isinstance(node, Ref):
            e = expansion(node.name, looped)
            return node if e is None else e
        if isinstance(node, Repeat):
            item = subst(node.item, looped)
            if node.max is None and not looped and not _rule_free(item):
                # the loop fuses into one terminal if its references inline (up to _INLINE_IN_LOOP)
                trial = subst(node.item, True)
                item = trial if _rule_free(trial) else item
            return Repeat(item, node.min, node.max)
        if isinstance(node, Seq):
            return Seq(tuple(subst(x, looped) for x in node.items))
        if isinstance(node, Alt):
            return Alt(tuple(Seq(tuple(subst(x, looped) for x in o.items)) for o in node.options))
        return node

    out: dict[str, Alt] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        if name in out:
            continue
        got = body_of(name)
        assert got is not None  # nothing is being visited here
        body = got[0]
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


def fuse_runs(items: tuple) -> list:
    """The items of a sequence with each run of two or more consecutive rule-free items (not all
    nullable) replaced by one ``Seq`` node, which ``fused_terminal`` writes as a single terminal."""
    out: list = []
    run: list = []

    def flush() -> None:
        if len(run) >= 2 and not all(matches_empty(x) for x in run):
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
