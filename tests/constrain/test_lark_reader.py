"""``lark_reader``: the fast reader of common Lark grammars gives the grammar Lark's loader gives.

For every grammar it reads (the shipped ones, the corpus, llama.cpp's GBNF files as the Lark text
``compile`` reads, the small stress grammars of test_earley and the syntax cases below), the
engine built from it and the engine built from Lark's own loader allow the same tokens at every
step of random walks; the texts it does not read still compile (through Lark) or fail with
Lark's errors.
"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from tests.constrain.test_earley import CORPUS, SMALL, first_rule, random_vocab
from trellis.constrain import Gbnf, GrammarError
from trellis.constrain.grammar import lark_reader
from trellis.constrain.compile import load_grammar_text
from trellis.constrain.grammar.grammar_ir import load_lark
from trellis.constrain.earley.scannerless import EarleyConstraint

# Syntax a reader must get right: comments (// and #), continuation lines, ranges, ~, [ ],
# priorities, aliases, modifiers, imports with aliases and lists, %ignore of a literal and of an
# expansion, terminals built from terminals and flags, nested groups, empty alternatives.
SYNTAX = {
    "comments": ('// a grammar\nstart: a+  // trailing\n# hash comment\na: "x" # after\n  // between\n  | "y"\n', "xy"),
    "ranges_tilde": ('start: D~2 ("-" D~1..3)*\nD: "0".."9"\n', "0123-"),
    "maybe_prio_alias": ('?start.2: item ["," item] -> pair\n!item: NAME | NUM\nNAME.3: /[a-z]+/i\nNUM: /[0-9]+/\n'
                         '%ignore " "\n', "aB1, "),
    "imports": ('start: WORD (_SEP NUMBER)*\n_SEP: ","\n%import common.WORD\n%import common (NUMBER)\n'
                '%import common.WS_INLINE -> BLANK\n%ignore BLANK\n', "ab1,.5 "),
    "ignore_expansion": ('start: "a" "b"\n%ignore " " | "\\t"\n%ignore /#[^\\n]*\\n/\n', "ab \t#\n"),
    "terminal_of_terminals": ('start: PAIR+\nPAIR: KEY "=" VAL ";"\nKEY: /[a-z]/ DIGIT?\nVAL: ("yes"i | "no") DIGIT*\n'
                              'DIGIT: "0".."9"\n', "a1=yesNO;"),
    "nested_groups_empty": ('start: (("a" | "b" ("c" | )) [x])* "d"\nx: | "e" x\n', "abcde"),
    "line_continuation": ('start: "a" \\\n  "b"\n', "ab"),
}


def _cases() -> list[tuple[str, str, str]]:
    out = [(f"shipped/{n}", load_grammar_text(n)[0], "start") for n in
           ["json.lark", "arithmetic.lark", "python_call.lark", "sql_select.lark", "csv.lark", "yaml_flat.lark",
            "json_object.lark"]]
    out += [(f"small/{k}", t, "start") for k, (t, _) in sorted(SMALL.items())]
    out += [(f"syntax/{k}", t, "start") for k, (t, _) in sorted(SYNTAX.items())]
    if CORPUS.is_dir():
        for p in sorted((CORPUS / "lark").glob("*.lark")) + sorted((CORPUS / "outlines").glob("*.lark")):
            text = p.read_text(encoding="utf-8")
            start = "start" if re.search(r"^start\s*:", text, re.M) else first_rule(text)
            out.append((f"{p.parent.name}/{p.name}", text, start))
        for p in sorted((CORPUS / "llama.cpp").glob("*.gbnf")):
            out.append((f"llama.cpp/{p.name}", Gbnf.from_file(p).to_lark(fuse=True), "start"))
    return out


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c[0])
def test_the_reader_reads_the_grammar_lark_reads(case) -> None:
    name, text, start = case
    try:
        slow = load_lark(text, start=start, fast=False)
    except GrammarError as e:
        with pytest.raises(GrammarError) as fast_err:  # refused the same way, with Lark's message
            load_lark(text, start=start)
        assert str(fast_err.value) == str(e)
        return
    read = lark_reader.read(text, start=start)
    if name.startswith(("shipped/", "syntax/", "small/", "llama.cpp/")):
        assert read is not None, f"{name}: the common subset should be read without Lark"
    if read is None:
        return
    fast = load_lark(text, start=start)
    rng = random.Random(name)
    lits = sorted(set(re.findall(r'"((?:[^"\\\n]|\\.){1,6})"', text)))
    pieces = [x.encode() for x in lits if "\\" not in x]
    alphabet = bytes(sorted(set(b"".join(pieces)) | set(b" \n\t0123456789abcxyzAB(),.:;[]{}\"'-+*/_=#|?")))
    v = random_vocab(alphabet, rng, 150)
    toks = list(v.tokens)
    a, b = EarleyConstraint(fast, v, share=False), EarleyConstraint(slow, v, share=False)
    for _ in range(6):
        sa, sb = a.start(), b.start()
        for _ in range(14):
            ma, mb = a.mask_array(sa), b.mask_array(sb)
            assert np.array_equal(ma, mb), (name, [toks[i] for i in np.flatnonzero(
                np.unpackbits((ma ^ mb).view(np.uint8), bitorder="little")[:len(toks)])][:6])
            allowed = np.flatnonzero(np.unpackbits(ma.view(np.uint8), bitorder="little")[:len(toks)])
            if not len(allowed):
                break
            t = int(rng.choice(allowed))
            if t in v.eos:
                break
            sa, sb = a.advance(sa, t), b.advance(sb, t)


@pytest.mark.parametrize("text", [
    'start: x{"a"}\nx{p}: p p\n',  # a template
    'start: A\n%declare A\n',
    'start: a\n%import .other.a\n',
    'start: B\nB: /x?/\n',  # an empty terminal: Lark says so
    'start: a\n',  # a rule used but not defined
    'start: "a"\n%override start: "b"\n',
    'start: A\nA: "a" -> b\n',  # an alias inside a terminal
    'start: a\na: "x"\n |\nb: "y"\n',  # "|" then a line break
])
def test_outside_the_subset_lark_reads_it(text: str) -> None:
    assert lark_reader.read(text) is None


def test_errors_keep_their_locations() -> None:
    with pytest.raises(GrammarError, match="start rule 'start' is not defined"):
        load_lark('expr: "a"\n')
    with pytest.raises(GrammarError) as e:
        load_lark('start: A\nA: /a(?!bc)/\n')
    assert e.value.line == 2


def test_corpus_is_read_without_lark_where_it_can_be() -> None:
    """Most corpus grammars are in the subset (the speed-up is real for them)."""
    if not CORPUS.is_dir():
        pytest.skip("shared grammar corpus not present")
    read = [c[0] for c in _cases() if c[0].startswith(("lark/", "outlines/"))
            and lark_reader.read(c[1], start=c[2]) is not None]
    assert len(read) >= 8, read


def test_compile_takes_the_reader_without_lark_loading(monkeypatch, tmp_path) -> None:
    """``compile`` of a grammar file in the subset never calls Lark's loader (the speed-up is on the
    user's path), and the grammar means what it says."""
    import lark.load_grammar

    from trellis.constrain import compile
    from trellis.tokens import Vocabulary

    def refuse(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("Lark's loader was called")

    monkeypatch.setattr(lark.load_grammar, "load_grammar", refuse)
    path = tmp_path / "pairs.lark"
    path.write_text('start: pair ("," pair)*\npair: WORD "=" NUMBER\n%import common (WORD, NUMBER)\n')
    toks = tuple(bytes([b]) for b in range(128)) + (b"",)
    v = Vocabulary(toks, eos=frozenset([128]))
    c = compile(str(path), v, cache=False)
    s = c.start()
    for ch in b"ab=1,c=2.5":
        s = c.advance(s, ch)
    assert s is not None and c.is_accepting(s)
    assert c.advance(c.start(), ord("=")) is None
