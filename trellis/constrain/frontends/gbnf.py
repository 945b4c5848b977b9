"""llama.cpp GBNF grammars (and xgrammar's EBNF, as vLLM users write it) -> Lark grammar text.

``Gbnf(text).to_lark()`` reads a grammar in llama.cpp's GBNF format (``grammars/README.md`` of
llama.cpp) and writes a Lark grammar for the same language of Unicode strings, read the way a
scannerless engine reads Lark: every terminal stands for its regular language, there is no
``%ignore`` (GBNF spells all whitespace out), and terminals may overlap freely. Stages:
``gbnf_reader.py`` reads GBNF into rule bodies, ``gbnf_fusion.py`` spells rule-free nodes in Lark
and fuses or inlines regular parts, and this module's writer puts the Lark text together.

Supported GBNF (parsed the way llama.cpp's ``llama_grammar_parser`` parses it)
------------------------------------------------------------------------------
* rules ``name ::= body``; names are ``[a-zA-Z0-9_-]+`` (llama.cpp refuses ``_``; xgrammar, the
  default structured-output backend of vLLM and SGLang, and llguidance accept it, and grammars
  written for vLLM use it: ``select_statement ::= ...``); ``root`` is the start rule
  (``Gbnf(text, root="name")`` picks another, like xgrammar's ``root_rule_name``);
* sequences, alternation ``|``, grouping ``( )``, postfix ``*`` ``+`` ``?`` ``{m}`` ``{m,}``
  ``{m,n}``; postfixes stack (``x*?`` is ``(x*)?``); bounds are at most 2000 (llama.cpp's limit);
  ``{,n}`` (= ``{0,n}``) is accepted as an extension (llama.cpp rejects it);
* string literals ``"..."`` (``""`` is the empty string), character classes ``[...]`` and
  ``[^...]`` with ranges ``a-z``, and ``.`` (any code point, newline included); escapes
  ``\\n \\r \\t \\\\ \\" \\[ \\] \\- \\xHH \\uHHHH \\UHHHHHHHH``; any other character stands for itself;
* ``#`` comments to the end of the line. A newline ends a rule when the next rule (``name ::=``)
  or the end of the text follows; newlines right after ``::=`` or ``|`` and inside parentheses
  are blanks (see below for the other newlines).

xgrammar's EBNF extensions (accepted only where llama.cpp refuses the text)
---------------------------------------------------------------------------
vLLM's default backend, xgrammar, reads GBNF with extensions (its ``cpp/grammar_parser.cc``;
``benchmarks/data/xgrammar_ebnf/DIALECT.md`` compares the two dialects). Each extension below is
text llama.cpp refuses, so every grammar llama.cpp accepts keeps its llama.cpp meaning (the one
exception, ``[^]``, is noted), and each is given the language xgrammar's matcher gives it:

* more escapes, in literals and classes: ``\\/ \\? \\' \\a \\b \\f \\v \\0 \\e`` (``/ ? '``, U+0007,
  U+0008, U+000C, U+000B, U+0000, U+001B; ``\\0`` is one NUL, not an octal escape: ``"\\01"`` is
  NUL then ``1``), and in classes also ``\\^ \\$ \\. \\* \\+ \\( \\) \\{ \\} \\|`` (the character itself).
  ``\\x`` stays llama.cpp's: exactly two hex digits. xgrammar reads ``\\x`` greedily (any number of
  hex digits: its ``"\\x41BC"`` is U+41BC, trellis' is ``ABC``); write ``\\u00HH`` for text both
  read alike;
* rules continue across lines: a newline followed by anything other than the next rule or the
  end of the text is a blank (xgrammar's newlines are insignificant; llama.cpp refuses these),
  so ``root ::= "a"\\n  | "b"`` is ``"a" | "b"`` and ``root ::= "a"\\n  "b"`` is ``"a" "b"``. A
  rule starts at a name followed by ``::=`` (xgrammar: the name must begin its line; blanks,
  comments and newlines may stand between the two);
* ``[^]`` is any character, newline included (xgrammar's spelling of ``.``; llama.cpp parses it
  as an empty class that pushes nothing, i.e. the empty string, an artifact trellis refused until
  it followed xgrammar here). ``[]`` (xgrammar: no character; llama.cpp: the empty string) stays
  refused;
* ``x{n,-1}`` (also ``{ n , -1 }``) is ``x{n,}``, the way xgrammar prints unbounded repetition;
* the lookahead assertion ``(= ...)``: at most one per rule, at the very end of the rule body
  after all its alternatives (``r ::= "a" | "b" (= "c")`` asserts for the whole rule), written
  ``(=`` without a blank. It is parsed and checked like xgrammar (refused: one anywhere else, in
  a group, followed by anything but the next rule, a second one, an empty one ``(=)`` / ``(= "")``,
  choices at its top ``(= "a" | "b")``, an undefined rule in it) and then **deleted**: the
  language is the grammar's without its lookaheads (``Gbnf.rules()`` leaves them out). That is the language of xgrammar's own matcher:
  ``GrammarMatcher.accept_string`` / ``accept_token`` (its Earley parser) never read the
  assertion; only the precomputation of its token masks does, trusting it to prune (and, for a
  rule used once, to pre-accept) tokens that run past the rule's end. A true assertion changes
  nothing; a false one makes xgrammar's masks disagree with its own matcher (DIALECT.md section 6:
  ``r ::= "a" | "a" r (= "b")`` used as ``"x" r "c"`` masks out ``ac`` after ``x`` though its
  matcher accepts ``xac``), while trellis' masks follow the grammar without the lookahead;
* the macros ``Regex("pattern", flags="isu", json_string=bool)`` (xgrammar's regex dialect, read
  by ``xgrammar_regex.py``: ASCII ``\\d \\w \\s``, ASCII-only ``(?i)``, ``.`` any code point unless
  ``flags`` is given, anchors and lookaheads ignored as xgrammar ignores them), ``Substring("c1",
  ...)`` (every run of consecutive whole chunks, the empty one included) and ``TagDispatch(("tag",
  rule), ..., loop_after_dispatch=true, excludes=("s", ...))`` (free text until a tag, the tag's
  rule, again: ``xgrammar_tags.py`` builds xgrammar's automaton and reads its languages off it).
  Each becomes GBNF nodes, so it is fused into terminals or kept in rules like GBNF text (a large
  counted repeat ``(ab){2,50000}`` in helper rules). xgrammar's TagDispatch free text runs over raw
  bytes and also admits byte strings that are not UTF-8; trellis' languages are text, so those are
  left out. A grammar that defines a rule of a macro's name keeps llama.cpp's meaning (a
  reference);
* the token elements ``Token(id, ...)`` (one token among these ids), ``ExcludeToken(id, ...)`` (one
  token not among them) and ``TokenTagDispatch((id, rule), ..., loop_after_dispatch=true,
  excludes=(id, ...))`` (free tokens, ``ExcludeToken(triggers + excludes)``, until a trigger token,
  then its rule: ``(free | Token(id_1) rule_1 | ...)*``, or ``free* (Token(id_i) rule_i)?`` without
  the loop): terminals matched by token id, not text (``terminal_kinds.py``; the compiled
  constraint resolves the ids against its vocabulary). A token is read whole, as text or as one
  element: where ``ExcludeToken`` can follow text, xgrammar's matcher also takes a token whose
  first bytes end the text as the ExcludeToken (``"aa" ExcludeToken(3) "dd"`` accepts tokens
  ``a``, ``a>)``, ``dd``), one token read twice, which its docs' "matches exactly one token" rules
  out; trellis does not. xgrammar also lets its stop token match ``ExcludeToken``; trellis' EOS
  ends the output and is allowed where the grammar can end;
* the capture rule options ``name[capture, capture="x", capture_hidden_..., stop_capture="x"] ::=``
  (they say which span xgrammar's matcher records, not what it accepts; trellis records none);
* the rule options ``lazy`` (committed-shortest: the strings of the rule's regular body that no
  shorter one begins) and ``max_chars=N`` (the body's strings of at most N code points, and longer
  ones only where the body could not end at N, up to its first end after: xgrammar's "earliest
  valid boundary"; exact, as an automaton of up to ``dfa_minimise.MAX_BUDGET_STATES`` states, a
  larger one refused by name); a rule with either is one terminal (``terminal_kinds.py``), and its
  body must be regular text (references inlined, recursion and token elements refused by name);
* refused by name with a located error: the rule options ``max_tokens`` (a token budget) and
  ``temperature`` (sampling).

llama.cpp's token references (its ``llama_grammar_parser``): ``<[id]>`` is the token of that id,
``<text>`` the one token of the vocabulary whose text that is (a special token has no text in a
trellis ``Vocabulary``: name it by id), and ``!<[id]>`` / ``!<text>`` one token that is not it: the
same token elements.

Not taken from xgrammar (llama.cpp's reading wins where it accepts the text, or the feature is
unsafe): ``\\x`` with more than two digits (above), repetition bounds over 2000 (llama.cpp reads a
larger maximum as unbounded, xgrammar as the number), ``.`` in rule names (``.`` is any
character in GBNF), and xgrammar's refusals of things llama.cpp accepts (empty alternatives, raw
newlines in literals and classes, ``\\[ \\] \\-`` in literals, stacked postfixes) do not apply.

Refused with ``GrammarError`` (file:line:col): syntax errors, undefined rules, a rule defined
twice (llama.cpp silently keeps the last one), no ``root`` rule, empty or reversed character
classes (``[]`` is silently epsilon in llama.cpp), ``{m,n}`` with ``n < m`` or a bound over 2000
(llama.cpp reads a larger maximum as unbounded), malformed token references (``<[x]>``, an
unclosed ``<``), and the xgrammar constructs above that are refused or malformed.

Mapping to Lark
---------------
``start: r_root``. A GBNF name without capitals or ``_`` becomes ``r_`` + the name with ``-`` ->
``_``; one without capitals or ``-`` becomes ``u_`` + the name; any other becomes ``c_`` + the
name with ``-`` -> ``__``, ``_`` -> ``_0`` and ``X`` -> ``_x`` (so the map is injective: Lark rule
names are lowercase, and after ``c_`` every ``_`` is followed by ``_``, ``0`` or a letter that
says which character it stands for). Literals become Lark
strings, classes and ``.`` become regex terminals (``/[^...]/``, ``/./s``), all written in ASCII
with escapes. Epsilon alternatives become ``(...)?``. Counted repetition ``x{m,n}``: ``x ~ m`` for
the required copies (Lark expands it linearly, or in factored rules for m >= 50), then ``x*`` or
0..n-m more copies in O(log(n-m)) helper rules following the binary digits of n-m (unambiguous;
Lark's own ``x ~ m..n`` writes n-m+1 alternatives, and a chain of n-m optional rules is slow for
Lark to compile). A group repeated in counted copies becomes a helper rule first. Helper rules
start with ``_`` and cannot collide with mapped names. A token element is a ``%declare``d
terminal with a reserved name (``_TRELLIS_TOKEN_2_4``, ``terminal_kinds.py``).
"""

from __future__ import annotations

from pathlib import Path

from trellis.constrain.frontends.gbnf_fusion import (PREC_ALT, PREC_ATOM, PREC_POST, PREC_SEQ, fuse_runs, fused_terminal,
                                           inline_regular, lark_class, lark_string, regex_text)
from trellis.constrain.frontends.gbnf_reader import (ANY, MAX_REPETITION, POSTFIX, Alt, Chars, GbnfParser, Lazy, Lit,
                                           Node, Ref, Repeat, Seq, Tok)
from trellis.constrain.terminal_kinds import option_terminal_name


class Gbnf:
    """GBNF grammar source: ``Gbnf(text, source="<gbnf>", root="root")`` or ``Gbnf.from_file(path)``.

    ``root`` names the start rule (xgrammar's ``root_rule_name``; llama.cpp always starts at
    ``root``). Other rules may use any name, ``root`` included."""

    def __init__(self, text: str, source: str = "<gbnf>", root: str = "root") -> None:
        self.text, self.source, self.root = text, source, root

    @classmethod
    def from_file(cls, path: str | Path, root: str = "root") -> "Gbnf":
        return cls(Path(path).read_text(encoding="utf-8"), source=str(path), root=root)

    def rules(self) -> dict[str, Alt]:
        """The parsed rules in source order (GBNF names), lookahead assertions left out; raises
        ``GrammarError``."""
        return GbnfParser(self.text, self.source, self.root).parse()

    def to_lark(self, *, fuse: bool = False) -> str:
        """Lark grammar text for the same language, with start rule ``start``.

        ``fuse=True`` (what ``compile`` uses) writes every part of a rule that refers to no rule
        as one regex terminal (see "regular fusion" in ``gbnf_fusion.py``): the same regular
        language, which a scannerless engine reads exactly, but Lark's own Earley parser matches a
        regex terminal leftmost-first (``/[0-9]|[1-9][0-9]*/`` never reads ``85``), so hand Lark
        the default, character-level text."""
        return write_lark(self.rules(), root=self.root, fuse=fuse)

    def __repr__(self) -> str:
        return f"Gbnf(source={self.source!r}" + (f", root={self.root!r})" if self.root != "root" else ")")


def write_lark(rules: dict[str, Alt], *, root: str = "root", fuse: bool = False) -> str:
    """Lark text of parsed rules (``Gbnf.rules()``, possibly rewritten), start rule ``start``."""
    return _LarkWriter(rules, fuse=fuse, root=root).write()


def lark_name(name: str) -> str:
    """The Lark rule name of GBNF rule ``name`` (injective, see the module docstring)."""
    if name.lower() == name and "_" not in name:
        return "r_" + name.replace("-", "_")
    if name.lower() == name and "-" not in name:
        return "u_" + name
    return "c_" + "".join("__" if c == "-" else "_0" if c == "_" else "_" + c.lower() if c.isupper() else c
                          for c in name)

class _LarkWriter:
    def __init__(self, rules: dict[str, Alt], fuse: bool = False, root: str = "root") -> None:
        self.rules = inline_regular(rules, root) if fuse else rules
        self.fuse, self.root = fuse, root
        self.helpers: dict[str, str] = {}  # body -> name; identical bodies share one rule
        self.tokens: dict[str, None] = {}  # the token elements' reserved terminal names (terminal_kinds.py)
        self.lazy: dict[tuple, str] = {}  # a lazy or budgeted body's (regex, max_chars) -> its terminal's name

    def write(self) -> str:
        lines = ["start: " + lark_name(self.root)]
        for name, body in self.rules.items():
            lines.append(f"{lark_name(name)}: {self.expr(body)[0]}".rstrip())
        lines += [f"{name}: {body}" for body, name in self.helpers.items()]
        # (the comment keeps Lark from reading an equal anonymous regex elsewhere as this terminal)
        lines += [f"{name}: /(?#{name}){rx}/" for (rx, _), name in self.lazy.items()]
        if self.tokens:
            lines.append("%declare " + " ".join(self.tokens))
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
        fused = fused_terminal(node) if self.fuse else None
        if fused is not None:
            return fused
        if isinstance(node, Lit):
            return (lark_string(node.text) if node.text else ""), PREC_ATOM
        if isinstance(node, Chars):
            return lark_class(node), PREC_ATOM
        if isinstance(node, Ref):
            return lark_name(node.name), PREC_ATOM
        if isinstance(node, Tok):
            self.tokens[node.ref.name] = None
            return node.ref.name, PREC_ATOM
        if isinstance(node, Lazy):
            key = (regex_text(node.body), node.max_chars)
            return self.lazy.setdefault(key, option_terminal_name(len(self.lazy) + 1, node.max_chars)), PREC_ATOM
        if isinstance(node, Repeat):
            return self.repeat(node)
        if isinstance(node, Seq):
            parts = [(t, p) for t, p in map(self.expr, fuse_runs(node.items) if self.fuse else node.items) if t]
            if len(parts) <= 1:
                return parts[0] if parts else ("", PREC_ATOM)
            return " ".join(self.wrap(t, p, PREC_SEQ) for t, p in parts), PREC_SEQ
        options = [self.expr(s) for s in node.options]
        nonempty = list({t: (t, p) for t, p in options if t}.values())  # drop duplicates, keep order
        if not nonempty:
            return "", PREC_ATOM
        text, prec = nonempty[0] if len(nonempty) == 1 else (" | ".join(t for t, _ in nonempty), PREC_ALT)
        if any(not t for t, _ in options):
            return self.wrap(text, prec, PREC_ATOM) + "?", PREC_POST  # an empty alternative: optional
        return text, prec

    def repeat(self, node: Repeat) -> tuple[str, int]:
        text, prec = self.expr(node.item)
        lo, hi = node.min, node.max
        if not text or hi == 0:
            return "", PREC_ATOM
        if (lo, hi) == (1, 1):
            return text, prec
        atom = self.wrap(text, prec, PREC_ATOM)
        for op, bounds in POSTFIX.items():
            if (lo, hi) == bounds:
                return atom + op, PREC_POST
        if prec < PREC_ATOM:  # counted copies of a group: name it once instead of copying its text
            atom = self.helper(text, "grp")
        parts = [atom if lo == 1 else f"{atom} ~ {lo}"] if lo else []
        if hi is None:
            parts.append(atom + "*")
        elif hi > lo:
            parts.append(self.at_most(atom, hi - lo))
        return " ".join(parts), (PREC_POST if len(parts) == 1 else PREC_SEQ)

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


# this module's names and the re-exported ones of gbnf_reader.py (the parsed rules' node types)
__all__ = ["ANY", "MAX_REPETITION", "Alt", "Chars", "Gbnf", "Lazy", "Lit", "Node", "Ref", "Repeat", "Seq", "Tok",
           "lark_name", "write_lark"]
