"""The scannerless Earley engine (``compile(..., engine="earley")``, the default for Lark/GBNF).

Checks, from the inside out:
* the recogniser's language equals Lark's Earley parser (``lexer="dynamic_complete"``) on every
  string up to a length over a small alphabet, for grammars the LALR engine refuses (ambiguity,
  LALR conflicts, colliding terminals, left/right recursion, empty rules, %ignore);
* masks equal stepping every token through the recogniser (the vectorised walks and the boundary
  recursion against the byte-by-byte chart), and finished walks parse with Lark;
* the corpus grammars a user brings compile, and the ones that cannot be compiled exactly are
  refused with a GrammarError that names the place and the feature.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import shutil
from pathlib import Path

import lark
import numpy as np
import pytest

from tests.constrain.test_grammars import accepts, byte_vocab
from trellis.constrain import EarleyConstraint, Gbnf, GrammarError, compile, tree_masks
from trellis.constrain.compile import load_grammar_text
from trellis.tokens import TokenTree, Vocabulary

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "data" / "grammars"

# Grammars the LALR engine refuses (conflicts, collisions) or that need Earley's generality.
SMALL = {
    # The issue's arithmetic, written as Lark users write it: "Shift/Reduce conflict for WS" in LALR.
    "arith_ws": ('start: expr\nexpr: term (WS? ADDOP WS? term)*\nterm: factor (WS? MULOP WS? factor)*\n'
                 'factor: NUMBER | "(" WS? expr WS? ")"\nADDOP: "+" | "-"\nMULOP: "*" | "/"\nWS: / +/\n'
                 'NUMBER: /[0-9]+/\n', "12+( )*"),
    # keyword vs identifier: "Collision between Terminals AGG and IDENT" in LALR.
    "sql_agg": ('start: "S " item ("," item)*\nitem: AGG "(" IDENT ")" | IDENT\nAGG: "SUM" | "MAX"\n'
                'IDENT: /[A-Z]+/\n', "S ,()MAXU"),
    "ambiguous": ('start: e\ne: e "+" e | e e | "a"\n', "a+"),
    "left_right_empty": ('start: l r\nl: l "a" | \nr: "b" r | "c" | \n', "abc"),
    "ignore": ('start: "a" ("b" | "bc")* "c"?\n%ignore " "\n', "abc "),
    "overlap": ('start: A B\nA: /a+/\nB: /a*b/\n', "ab"),
    # A lookahead past the end of a terminal sees the next character of the document (lark.lark's OP).
    "follow_guard": ('start: x+\nx: OP | NAME\nOP: /[+*]|[?](?![a-z])/\nNAME: /[a-z]+/\n%ignore " "\n', "?a +"),
    "follow_guard_positive": ('start: (F | N)+\nF: /[a-z]+(?=\\()/\nN: /[a-z(]/\n', "ab("),
    # End anchors, as re.match reads them in the document: `$` is the end of the text or a newline
    # that ends it, `$` under `m` any line's end, `\Z` the end (issue 58).
    "dollar_comment": ('start: COMMENT+\nCOMMENT: "#" /[ab]*/ ("\\n" | /$/)\n', "#a\n"),
    "dollar_then_newline": ('start: A+ "\\n"?\nA: /a+$/\n', "a\n"),
    "dollar_ignore": ('start: A ("," A)*\nA: /[ab]+$/\n%ignore /\\n/\n', "ab,\n"),
    "dollar_multiline": ('start: L ("\\n" L)* "\\n"?\nL: /[ab]+$/m\n', "ab\n"),
    "dollar_inside": ('start: A B?\nA: /a$\\n/\nB: /b/\n', "ab\n"),
    "end_of_text": ('start: (A | B)+\nA: /a\\Z/\nB: /b/\n', "ab\n"),
    # A lazy regex means what re.match finds (lark.lark's REGEXP keeps its flags).
    "lazy_regexp": ('start: R (" " R)*\nR: /\\/(?!\\/)(\\\\\\/|\\\\\\\\|[^\\/])*?\\/[imslux]*/\n', "/\\ai "),
}


def lark_accepts(lk: lark.Lark, s: str) -> bool:
    try:
        lk.parse(s)
        return True
    except lark.exceptions.LarkError:
        return False


@pytest.mark.parametrize("name", sorted(SMALL))
def test_language_equals_lark_earley_on_every_short_string(name: str) -> None:
    text, alphabet = SMALL[name]
    lk = lark.Lark(text, parser="earley", lexer="dynamic_complete")
    c = compile(text, byte_vocab(), cache=False)
    assert isinstance(c, EarleyConstraint)
    n_acc = 0
    for n in range(0, 6):
        for chars in itertools.product(alphabet, repeat=n):
            s = "".join(chars)
            mine = accepts(c, s.encode())
            assert mine == lark_accepts(lk, s), (name, s, mine)
            n_acc += mine
    assert n_acc > 0


@pytest.mark.parametrize("name", sorted(SMALL))
def test_viable_prefixes_have_completions(name: str) -> None:
    """Every prefix the engine keeps alive is completed within a few bytes to a sentence Lark
    accepts, and every prefix it rejects is not the prefix of any short sentence (bounded check
    both ways: the grammars here complete in <= 4 bytes)."""
    text, alphabet = SMALL[name]
    lk = lark.Lark(text, parser="earley", lexer="dynamic_complete")
    c = compile(text, byte_vocab(), cache=False)
    sentences = {"".join(ch) for n in range(0, 8) for ch in itertools.product(alphabet, repeat=n)
                 if lark_accepts(lk, "".join(ch))} if len(alphabet) <= 5 else None
    for n in range(0, 4):
        for chars in itertools.product(alphabet, repeat=n):
            s = "".join(chars)
            st = c.start()
            for b in s.encode():
                st = st and c.advance(st, b)
            if sentences is not None:
                assert (st is not None) == any(x.startswith(s) for x in sentences), (name, s)


END_ANCHORS = sorted(k for k in SMALL if k.startswith("dollar") or k == "end_of_text")


@pytest.mark.parametrize("name", END_ANCHORS)
def test_end_anchor_masks_equal_lark_on_tokens_across_the_anchor(name: str) -> None:
    """The end anchors' masks for tokens of up to three characters, which cross the anchored
    terminal's end (``a`` and ``\n`` in one token, ``\n`` then more text): after every viable
    prefix, a token is allowed iff some sentence Lark accepts (all of them up to 7 characters)
    starts with prefix + token, and EOS iff Lark accepts the prefix. (``lark_oracle`` models
    one-character lookaheads only, so the oracle test leaves these grammars to this one.)"""
    from trellis.mask import allocate_bitmask, allowed_ids

    text, alphabet = SMALL[name]
    lk = lark.Lark(text, parser="earley", lexer="dynamic_complete")
    sentences = ["".join(ch) for n in range(0, 8) for ch in itertools.product(alphabet, repeat=n)]
    sentences = [x for x in sentences if lark_accepts(lk, x)]
    toks = ["".join(ch) for n in (1, 2, 3) for ch in itertools.product(alphabet, repeat=n)]
    eos = len(toks)
    v = Vocabulary(tuple(t.encode() for t in toks) + (b"",), eos=frozenset([eos]))
    c = compile(text, v, cache=False)
    checked = 0
    for n in range(0, 4):
        for chars in itertools.product(alphabet, repeat=n):
            s = "".join(chars)
            if not any(x.startswith(s) for x in sentences):
                continue
            st = c.start()
            for ch in chars:  # one-character tokens come first, in the alphabet's order
                st = c.advance(st, toks.index(ch))
                assert st is not None, (name, s)
            m = allocate_bitmask(1, len(v))
            c.fill_mask(st, m[0])
            got = set(allowed_ids(m[0], len(v)))
            want = {i for i, t in enumerate(toks) if any(x.startswith(s + t) for x in sentences)}
            want |= {eos} if s in sentences else set()
            assert got == want, (name, s, sorted(toks[i] if i < eos else "EOS" for i in got ^ want))
            checked += 1
    assert checked >= 3


def test_issue_grammars_compile_and_mean_what_they_say() -> None:
    v = byte_vocab()
    arith = compile(SMALL["arith_ws"][0], v, cache=False)
    assert accepts(arith, b"1 + 2*(3 - 4)") and accepts(arith, b"1+2") and not accepts(arith, b"1 +")
    sql = compile(SMALL["sql_agg"][0], v, cache=False)
    assert accepts(sql, b"S SUM(X),SUMX,MAX") and not accepts(sql, b"S SUM(SUM(X))")
    assert accepts(sql, b"S SUM")  # an identifier that is also a keyword: both readings exist


def random_vocab(alphabet: bytes, rng: random.Random, n: int = 300) -> Vocabulary:
    """Every single byte (ids 0..255, so any text can be spelled and ``accepts`` works), then
    ``n`` random strings over ``alphabet`` and a whole UTF-8 character."""
    toks = [bytes([b]) for b in range(256)]
    toks += [bytes(rng.choice(alphabet) for _ in range(rng.randint(2, 6))) for _ in range(n)]
    toks += ["é".encode()]
    toks = list(dict.fromkeys(toks)) + [b""]
    return Vocabulary(tuple(toks), eos=frozenset([len(toks) - 1]))


def check_masks_along_walks(c: EarleyConstraint, lk: lark.Lark | None, rng: random.Random, walks: int,
                            steps: int) -> int:
    """Masks equal the recogniser token by token; finished walks parse with ``lk``. Returns the
    number of finished walks."""
    toks = c.vocab.tokens
    eos = next(iter(c.vocab.eos))
    finished = 0
    for _ in range(walks):
        s, doc = c.start(), b""
        for _ in range(steps):
            m = c.mask_array(s)
            bits = np.unpackbits(m.view(np.uint8), bitorder="little")[:len(toks)].astype(bool)
            brute = np.array([bool(t) and c.earley.walk(s, t) is not None for t in toks])
            brute[eos] = c.is_accepting(s)
            wrong = np.flatnonzero(bits != brute)
            assert not len(wrong), (doc, [toks[i] for i in wrong[:10]])
            allowed = np.flatnonzero(bits)
            assert len(allowed), f"empty mask after {doc!r}"
            t = int(rng.choice(allowed))
            if t == eos:
                if lk is not None:
                    lk.parse(doc.decode("utf-8"))
                finished += 1
                break
            s = c.advance(s, t)
            doc += toks[t]
    return finished


@pytest.mark.parametrize("name", ["json.lark", "arithmetic.lark", "python_call.lark", "sql_select.lark",
                                  "csv.lark", "yaml_flat.lark", "json_object.lark"])
def test_shipped_grammar_masks_equal_the_recogniser(name: str) -> None:
    text, _ = load_grammar_text(name)
    lk = lark.Lark(text, parser="earley", lexer="dynamic_complete")
    rng = random.Random(0)
    alphabet = bytes(sorted(set(text.encode()) - {ord("/"), ord("%")} | set(b" \n0123456789abcxyz\"")))
    c = compile(name, random_vocab(alphabet, rng), cache=False)
    check_masks_along_walks(c, lk, rng, walks=12, steps=30)


@pytest.mark.parametrize("name", ["json.lark", "sql_select.lark"])
def test_masks_are_unchanged_when_the_item_set_memos_are_dropped(name: str, monkeypatch) -> None:
    """Memory bounds (earley.MAX_SETS, STEP_CACHE_SCANS, scannerless.MEMO_SCANS): with tiny limits
    the memos are dropped every few steps, and every mask, advance and EOS verdict along random
    walks equals an unbounded constraint's. States made before a drop stay usable after it."""
    import trellis.constrain.earley.earley as earley
    import trellis.constrain.earley.scannerless as scannerless

    text, _ = load_grammar_text(name)
    rng = random.Random(1)
    alphabet = bytes(sorted(set(text.encode()) - {ord("/"), ord("%")} | set(b" \n0123456789abcxyz\"")))
    vocab = random_vocab(alphabet, rng)
    ref = compile(name, vocab, cache=False)
    monkeypatch.setattr(earley, "MAX_SETS", 3)
    monkeypatch.setattr(earley, "STEP_CACHE_SCANS", 20)
    monkeypatch.setattr(scannerless, "MEMO_SCANS", 20)
    from trellis.constrain.compile import clear_caches

    clear_caches()  # a second constraint, not the memoised first one
    forgets = []
    real_forget = earley.Earley._forget
    monkeypatch.setattr(earley.Earley, "_forget", lambda self: (forgets.append(1), real_forget(self)))
    small = compile(name, vocab, cache=False)
    assert small is not ref
    for _ in range(8):
        a, b = ref.start(), small.start()
        for _ in range(25):
            ma, mb = ref.mask_array(a), small.mask_array(b)
            assert np.array_equal(ma, mb)
            assert ref.is_accepting(a) == small.is_accepting(b)
            allowed = [t for t in range(len(vocab.tokens)) if ma[t >> 5] >> (t & 31) & 1 and t not in vocab.eos]
            if not allowed:
                break
            t = rng.choice(allowed)
            a, b = ref.advance(a, t), small.advance(b, t)
            assert (a is None) == (b is None) and a is not None
    assert len(forgets) >= 5, len(forgets)  # the memos really were dropped along the way


def corpus_lark() -> list[Path]:
    return sorted((CORPUS / "lark").glob("*.lark")) + sorted((CORPUS / "outlines").glob("*.lark"))


def first_rule(text: str) -> str:
    m = re.search(r"^[?!]?([a-z_][a-z_0-9]*)\s*(?:\{[^}]*\})?\s*:", text, re.M)
    return m.group(1) if m else "start"  # a file of terminals only: no rule to start from


@pytest.mark.skipif(not CORPUS.is_dir(), reason="shared grammar corpus not present")
@pytest.mark.parametrize("path", corpus_lark(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_lark_grammars_compile_or_are_refused_by_name(path: Path) -> None:
    """Every corpus grammar that Lark's Earley parser accepts compiles (with the start rule Lark
    would need: the first rule where there is no ``start``), except the ones with a lookaround
    that can see outside its terminal's match or with ``%declare`` (refused by name, with
    file:line:col); grammars Lark refuses are refused too, with a location or the rule name."""
    text = path.read_text(encoding="utf-8")
    start = "start" if re.search(r"^start\s*:", text, re.M) else first_rule(text)
    try:
        lark.Lark(text, parser="earley", lexer="dynamic_complete", start=start, source_path=str(path))
        lark_ok = True
    except Exception:
        lark_ok = False
    v = random_vocab(b"abc (){}[],:;\"'0123456789\n", random.Random(1), 60)
    try:
        c = compile(path, v, cache=False, start=start)
    except GrammarError as e:
        msg = str(e)
        if lark_ok:
            # a lookaround that sees past its terminal (the neighbouring text decides it); %declare:
            # terminals of a postlexer (Python's indenter), which Lark's Earley accepts as
            # matching nothing: refused by name instead.
            assert "that can see" in msg or "%declare" in msg, msg
            assert e.line is not None and e.source == str(path), msg
        else:
            assert e.line is not None or "start rule" in msg or "%import" in msg, msg
        return
    assert lark_ok, f"{path.name}: compiled although Lark refuses it"
    lk = lark.Lark(text, parser="earley", lexer="dynamic_complete", start=start, source_path=str(path))
    check_masks_along_walks(c, lk, random.Random(2), walks=4, steps=20)


@pytest.mark.skipif(not CORPUS.is_dir(), reason="shared grammar corpus not present")
def test_relative_import_from_the_grammar_folder(tmp_path: Path) -> None:
    """composition_storage.lark imports ``.csv`` and ``.json`` from its folder (in Lark's repo they
    sit beside it as csv.lark/json.lark; the corpus flattened the names)."""
    for name in ("csv", "json", "storage"):
        shutil.copy(CORPUS / "lark" / f"composition_{name}.lark", tmp_path / f"{name}.lark")
    c = compile(str(tmp_path / "storage.lark"), byte_vocab(), cache=False)
    assert accepts(c, b'{"a": [1, 2]}') and accepts(c, b"# a b\nc,1\n") and not accepts(c, b"a,b\n")
    with pytest.raises(GrammarError, match=r"%import: grammar file csv.lark not found") as e:
        compile((tmp_path / "storage.lark").read_text(), byte_vocab(), cache=False)
    assert e.value.line == 5


def test_refusals_are_typed_and_located() -> None:
    v = byte_vocab()
    with pytest.raises(GrammarError, match="%declare is not supported") as e:
        compile('start: A\n%declare A\n', v, cache=False)
    assert (e.value.line, e.value.column) == (2, 1)
    with pytest.raises(GrammarError, match="start rule 'start' is not defined .*rules: expr"):
        compile('expr: "a"\n', v, cache=False)
    with pytest.raises(GrammarError, match="derives no string"):
        compile('start: a\na: a "x"\n', v, cache=False)
    with pytest.raises(GrammarError, match="negative lookahead that can see more than one character past") as e:
        compile('start: A\nA: /a(?!bc)/\n', v, cache=False)
    assert e.value.line == 2


def test_one_line_grammar_text_is_not_a_path() -> None:
    v = byte_vocab()
    assert accepts(compile("start: /a+/", v, cache=False), b"aaa")
    assert accepts(compile('start: "a/b"', v, cache=False), b"a/b")
    with pytest.raises(GrammarError, match="no such grammar file"):
        compile("no_such_grammar.lark", v, cache=False)
    assert load_grammar_text("json")[1] == "json.lark"


def test_states_are_immutable_values_and_tree_masks_work() -> None:
    v = byte_vocab()
    c = compile(SMALL["ambiguous"][0], v, cache=False)
    s0 = c.start()
    a = c.advance(s0, ord("a"))
    assert hash(a) == hash(c.advance(s0, ord("a"))) and a == c.advance(s0, ord("a"))
    assert c.advance(s0, ord("+")) is None and c.start() == s0
    tree = TokenTree.from_paths([[ord("a"), ord("+"), ord("a")], [ord("+")]])
    masks, states = tree_masks(c, s0, tree, len(v))
    assert states[3] is not None and c.is_accepting(states[3]) and states[4] is None
    assert int(masks[4].abs().sum()) == 0


def test_forced_tokens_follow_a_single_continuation() -> None:
    toks = tuple(bytes([b]) for b in range(128)) + (b"SUM(", b"")
    v = Vocabulary(toks, eos=frozenset([len(toks) - 1]))
    c = compile('start: "SUM(" X ")"\nX: /[a-z]/\n', v, cache=False)
    assert c.forced_bytes(c.start()) == b"SUM("
    assert c.forced_tokens(c.start()) == [128]


@pytest.mark.skipif(not CORPUS.is_dir(), reason="shared grammar corpus not present")
@pytest.mark.parametrize("name", ["arithmetic", "json", "list", "chess", "c", "english", "json_arr", "japanese"])
def test_gbnf_corpus_compiles_and_accepts_its_sentences(name: str) -> None:
    """llama.cpp's own grammar files, unchanged, as ``Gbnf`` and as ``.gbnf`` paths; random
    derivations of each (``test_gbnf.sentences``, checked with xgrammar there) are accepted
    with their masks equal to the recogniser along the way."""
    from tests.constrain.test_gbnf import sentences

    path = CORPUS / "llama.cpp" / f"{name}.gbnf"
    g = Gbnf.from_file(path)
    rng = random.Random(3)
    v = random_vocab(b"abc 0123456789()+-*/{}[],:\"\n", rng, 200)
    c = compile(g, v, cache=False)
    assert compile(str(path), v, cache=False).ir.source == str(path)
    for s in sentences(name, 10):
        assert accepts(c, s.encode()), s
    check_masks_along_walks(c, None, rng, walks=3, steps=15)


# ----------------------------------------------------------------------------- the oracle


def oracle_cases() -> list[tuple[str, str, str, str]]:
    """(id, Lark text, start, folder) for every shipped grammar, every corpus Lark grammar that
    compiles, and the Lark text of every corpus GBNF file."""
    out = [(n, load_grammar_text(n)[0], "start", "") for n in ["json.lark", "arithmetic.lark", "python_call.lark",
                                                                 "sql_select.lark", "csv.lark", "yaml_flat.lark",
                                                                 "json_object.lark"]]
    out += [(f"small/{k}", t, "start", "") for k, (t, _) in sorted(SMALL.items())]
    if CORPUS.is_dir():
        for p in corpus_lark():
            text = p.read_text(encoding="utf-8")
            start = "start" if re.search(r"^start\s*:", text, re.M) else first_rule(text)
            out.append((f"{p.parent.name}/{p.name}", text, start, str(p.parent)))
        for p in sorted((CORPUS / "llama.cpp").glob("*.gbnf")):
            out.append((f"llama.cpp/{p.name}", Gbnf.from_file(p).to_lark(), "start", ""))
    return out


@pytest.mark.parametrize("case", oracle_cases(), ids=lambda c: c[0])
def test_masks_equal_the_lark_oracle(case) -> None:
    """Along random walks over a small vocabulary (single bytes, pieces of the grammar's literals
    and of random strings, split UTF-8), every token is allowed iff the oracle
    (``lark_oracle.LarkOracle``: a character-level Earley over Lark's own compiled rules, terminals
    matched with the ``regex`` module, written independently of the engine) finds ``text + token``
    a viable prefix, and EOS iff it accepts ``text``. Grammars the engine refuses are skipped here
    (``test_corpus_lark_grammars_compile_or_are_refused_by_name`` checks those refusals)."""
    from tests.constrain.lark_oracle import LarkOracle

    name, text, start, folder = case
    if name.startswith("small/") and name[len("small/"):] in END_ANCHORS:
        pytest.skip("lark_oracle models one-character lookaheads only: "
                    "test_end_anchor_masks_equal_lark_on_tokens_across_the_anchor checks this grammar")
    rng = random.Random(name)
    lits = sorted(set(__import__("re").findall(r'"((?:[^"\\\n]|\\.){1,8})"', text)))
    pieces = [x.encode("utf-8", "ignore") for x in lits if "\\" not in x]
    alphabet = bytes(sorted(set(b"".join(pieces)) | set(b" \n\t0123456789abcxyzAB(),.:;[]{}\"'-+*/_=#")))
    # Non-ASCII tokens for every grammar: \w \d \s and /i mean what re means (Unicode) in both.
    toks = [bytes([b]) for b in range(0x20, 0x7F)] + [b"\n", b"\t"] + pieces
    toks += [bytes(rng.choice(alphabet) for _ in range(rng.randint(2, 5))) for _ in range(120)]
    toks += ["é".encode(), b"\xc3", b"\xa9", "日本".encode(), "٣".encode(), "\u212a".encode(), "ſ".encode()]
    toks = list(dict.fromkeys(t for t in toks if t)) + [b""]
    v = Vocabulary(tuple(toks), eos=frozenset([len(toks) - 1]))
    try:
        c = compile(text, v, cache=False, start=start)
    except GrammarError as e:
        pytest.skip(f"refused: {str(e).splitlines()[0]}")
    oracle = LarkOracle(text, start=start, import_paths=[folder] if folder else ())
    eos = len(toks) - 1
    walks, steps = 6, 16
    for _ in range(walks):
        s, doc = c.start(), b""
        for _ in range(steps):
            bits = np.unpackbits(c.mask_array(s).view(np.uint8), bitorder="little")[:len(toks)].astype(bool)
            want = np.array([bool(t) and oracle.viable_bytes(doc + t) for t in toks])
            want[eos] = oracle.accepts(doc.decode("utf-8", "replace")) if _complete_utf8(doc) else False
            wrong = np.flatnonzero(bits != want)
            assert not len(wrong), (name, doc, [(toks[i], bool(bits[i])) for i in wrong[:8]])
            allowed = np.flatnonzero(bits)
            assert len(allowed), f"empty mask after {doc!r}"
            t = int(rng.choice(allowed))
            if t == eos:
                break
            s = c.advance(s, t)
            doc += toks[t]


def _complete_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


# ----------------------------------------------------------------------------- JSON Schema on Earley


def test_schema_keys_outrank_the_other_keys_regex() -> None:
    """A declared key is validated by its own schema, never as an "other" key: the schema grammar
    ranks declared-key literals above the other-keys regex, and the engine cuts the regex by the
    literals expected beside it (``lexical_priority``). Without that, '"d": "x"' would pass as an
    additional property (found on maskbench Glaiveai2K book_flight: 12 wrong answers of 60)."""
    from trellis.constrain import JsonSchema

    schema = {"type": "object", "properties": {"d": {"type": "string", "format": "date"}, "n": {"type": "integer"}},
              "required": ["n"]}
    v = byte_vocab()
    for engine in ("earley", "lalr"):
        c = compile(JsonSchema(schema, closed_objects=False), v, cache=False, engine=engine)
        assert accepts(c, b'{"n":1,"d":"2024-01-31"}') and accepts(c, b'{"n":1,"other":"x"}')
        assert not accepts(c, b'{"n":1,"d":"2024/01/31"}'), engine
        assert not accepts(c, b'{"n":1,"d":5}'), engine
    assert compile(JsonSchema(schema, closed_objects=False), v, cache=False).ir.lexical_priority
    assert not compile('start: "a"', v, cache=False).ir.lexical_priority  # Lark: priorities choose trees only


def test_bnf_reader_equals_lark_loader() -> None:
    from trellis.constrain import JsonSchema
    from trellis.constrain.grammar.grammar_ir import load_bnf, load_lark

    schema = {"type": "object", "properties": {"a": {"enum": ["x", "y|z"]}, "b": {"type": "array", "items": {
        "type": "number", "minimum": 0}}, "c": {"type": "string", "pattern": "^[a-z]+$"}}, "additionalProperties": True}
    text = JsonSchema(schema).to_lark()
    fast, slow = load_bnf(text), load_lark(text)
    assert fast is not None
    assert [t.name for t in fast.terminals] == [t.name for t in slow.terminals]
    assert [t.priority for t in fast.terminals] == [t.priority for t in slow.terminals]
    assert fast.rules == slow.rules and fast.nonterminals == slow.nonterminals
    for a, b in zip(fast.terminals, slow.terminals):
        assert np.array_equal(a.dfa.trans, b.dfa.trans) and np.array_equal(a.dfa.final, b.dfa.final)
    assert load_bnf("start: a?\na: \"x\"\n") is None  # EBNF: left to Lark's loader


def test_difference_and_intersection_of_dfas() -> None:
    from trellis.constrain.automata.regex import difference, intersects, literal_dfa, regex_to_byte_dfa

    word = regex_to_byte_dfa("[a-z]+")
    cut = difference(word, [literal_dfa(b"if"), literal_dfa(b"in")])
    for w, ok in [(b"i", True), (b"if", False), (b"in", False), (b"int", True), (b"iff", True), (b"x", True)]:
        assert cut.matches(w) == ok, w
    assert difference(literal_dfa(b"if"), [word]) is None
    assert intersects(word, literal_dfa(b"if")) and not intersects(word, literal_dfa(b"1"))


def test_key_cuts_and_literal_shortcuts_equal_the_general_constructions() -> None:
    """A DFA minus a set of words (the trie product ``difference`` takes for literals) against
    brute-force membership, trimmed and reachable; and a ``literal_dfa``'s shortcuts
    (``literal_at``, ``intersects``, the Earley scan tables) against the same DFA without its
    ``literal`` text, which takes the general routes."""
    from trellis.constrain.automata.byte_dfa import ByteDFA
    from trellis.constrain.automata.byte_dfa import literal_at
    from trellis.constrain.automata.regex import difference, intersects, literal_dfa, regex_to_byte_dfa

    rng = random.Random(7)
    patterns = ['"[ab]*"', "[ab]+", "a*b?a", "(ab|ba)*", "[abc]{1,3}", 'a|b|ab|"b"']
    strings = [bytes(s) for n in range(6) for s in itertools.product(b'ab"c', repeat=n)]
    for pat in patterns:
        a = regex_to_byte_dfa(pat)
        for _ in range(12):
            words = sorted({bytes(rng.choice(b'ab"') for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 5))})
            cut = difference(a, [literal_dfa(w) for w in words])
            for s in strings:
                want = a.matches(s) and s not in words
                assert (cut is not None and cut.matches(s)) == want, (pat, words, s)
            if cut is None:
                continue
            trans, final = cut.trans, cut.final
            live = final.copy()  # every state reaches acceptance
            for _ in range(len(final)):
                live = live | ((trans >= 0) & live[np.maximum(trans, 0)]).any(axis=1)
            assert live.all(), (pat, words)
            seen, todo = {0}, [0]  # every state is reachable
            while todo:
                for t in set(trans[todo.pop()].tolist()) - {-1} - seen:
                    seen.add(t)
                    todo.append(t)
            assert len(seen) == len(final), (pat, words)
        for w in [b"a", b"ab", b'"ab"', b"ba", b"ca"]:
            lit = literal_dfa(w)
            plain = ByteDFA(lit.trans, lit.final)  # no literal text: the general routes
            assert intersects(a, lit) == intersects(a, plain) == intersects(lit, a) == a.matches(w)
    for w in [b"x", b'"name"', b"a-b_c 123"]:
        lit = literal_dfa(w)
        plain = ByteDFA(lit.trans, lit.final)
        for q in range(len(w) + 1):
            assert literal_at(lit, q) == literal_at(plain, q), (w, q)
        c = compile("start: %s\n" % json.dumps(w.decode()), byte_vocab(), cache=False)
        e = c.earley
        d = next(i for i, x in enumerate(e.scan_dfa) if x.literal == w)
        e._load(d)
        fast = (e.trans[d], e.final[d], e.has_out[d])
        e.scan_dfa[d] = plain
        e._load(d)
        assert fast == (e.trans[d], e.final[d], e.has_out[d])


def test_equal_sub_automata_share_one_vocabulary_walk() -> None:
    """Two terminals with the same regex and followers (a schema's string fields) are walked once."""
    v = byte_vocab()
    c = compile('start: A "," B ","\nA: /"[a-z]*"/\nB: /"[a-z]*"/\n', v, cache=False)
    a, b = (next(i for i, t in enumerate(c.ir.terminals) if t.name == n) for n in "AB")
    assert c._shape(a, 0) == c._shape(b, 0) and c._shape(a, 1) == c._shape(b, 1)
    assert c._shape(a, 0) != c._shape(a, 1)
    c._inside_of(a, 1)
    c._inside_of(b, 1)
    assert len(c._inside) == 1
    assert accepts(c, b'"ab","c",') and not accepts(c, b'"ab",c,')


def test_vocabulary_walks_are_shared_across_grammars_and_runs(tmp_path, monkeypatch) -> None:
    """A walk depends on the sub-automaton, the follow bytes and the vocabulary only: a second
    grammar with the same terminal reuses it from memory, a new process (memo cleared) from disk,
    and the masks are the same as a build from scratch."""
    from trellis.constrain.vocab import walk_cache
    from trellis.constrain.compile import clear_caches
    from trellis.constrain.disk_cache import wait_for_cache_writes
    from trellis.constrain.vocab.walk_cache import SHARED

    monkeypatch.setenv("TRELLIS_CACHE_DIR", str(tmp_path))
    clear_caches()
    v = random_vocab(b'ab"{}: ,', random.Random(5), 80)
    g1 = 'start: "{" S ":" S "}"\nS: /"[a-z]*"/\n%ignore " "\n'
    g2 = 'start: "[" S "," S "]"\nS: /"[a-z]*"/\n%ignore " "\n'
    walk_text = b'{ "ab" : "b'
    # walks cheaper than PERSIST_MIN_S are kept in memory only: no file per walk (the threshold is
    # raised here so the test does not depend on how fast this machine walks 80 tokens: on a slow
    # VM the first walk took over the 2 ms default and was written)
    monkeypatch.setattr(walk_cache, "PERSIST_MIN_S", 60.0)
    _masks_along(compile(g1, v), walk_text)
    wait_for_cache_writes()
    assert not list((tmp_path / "walks").glob("w-*.pkl"))
    clear_caches()
    monkeypatch.setattr(walk_cache, "PERSIST_MIN_S", 0.0)  # persist every walk from here on
    c1 = compile(g1, v)
    masks1 = _masks_along(c1, walk_text)
    n = len(SHARED._mem)
    assert n > 0
    c2 = compile(g2, v)
    _masks_along(c2, b'[ "ab" , "')
    # reused in memory (S is followed by ":"/"}" in g1 and ","/"]" in g2: a string's walk ends at
    # its closing quote, so it is keyed without its followers and filtered per grammar)
    packed_in_memory = {id(e[0]) for e in SHARED._mem.values()}
    assert any(id(hit[0]) in packed_in_memory for hit in c2._inside.values())
    assert len(SHARED._mem) == n or any(k[1][1] == b"" for k in SHARED._mem)
    wait_for_cache_writes()
    assert list((tmp_path / "walks").glob("w-*.pkl"))
    clear_caches()
    from_disk = compile(g1, v)
    assert _masks_along(from_disk, walk_text) == masks1
    scratch = compile(g1, v, cache=False)
    assert _masks_along(scratch, walk_text) == masks1


def test_walks_over_leftovers_are_shared_across_grammars_and_runs(tmp_path, monkeypatch) -> None:
    """The leftovers of a shared walk (tokens that end ``%ignore " "`` and go on) are walked by the
    next terminal once for every grammar with the same two shapes, in memory and from disk, and
    the masks equal a build from scratch."""
    from trellis.constrain.vocab import walk_cache
    from trellis.constrain.compile import clear_caches
    from trellis.constrain.disk_cache import wait_for_cache_writes
    from trellis.constrain.vocab.walk_cache import SHARED

    monkeypatch.setenv("TRELLIS_CACHE_DIR", str(tmp_path))
    from trellis.constrain.earley import scannerless

    monkeypatch.setattr(walk_cache, "PERSIST_MIN_S", 0.0)
    monkeypatch.setattr(scannerless, "WALK_DISK_MIN", 0)  # this vocabulary's leftover sets are small
    monkeypatch.setattr(scannerless, "CHART_WALK_SMALL", 0)  # (else they are stepped through the chart)
    monkeypatch.setattr(scannerless, "CHART_FIRST_IGNORE", 0)
    clear_caches()
    v = random_vocab(b"ab (),", random.Random(7), 120)
    g1 = 'start: NAME ("," NAME)*\nNAME: /[a-z]+/\n%ignore / +/\n'
    g2 = 'start: "(" NAME+ ")"\nNAME: /[a-z]+/\n%ignore / +/\n'
    text1, text2 = b"ab , a  ,b", b"( ab a b )"
    masks1 = _masks_along(compile(g1, v), text1)
    second = [k for _, k in SHARED._mem if isinstance(k, tuple) and k[0] == "x"]  # ("x", rest key, shape)
    assert second, "no walk over leftovers was shared"
    c2 = compile(g2, v)
    masks2 = _masks_along(c2, text2)
    assert any(k in [sk for _, sk in SHARED._mem] for k in second)
    assert masks2 == _masks_along(compile(g2, v, cache=False), text2)
    wait_for_cache_writes()
    clear_caches()
    assert _masks_along(compile(g1, v), text1) == masks1  # from disk
    assert _masks_along(compile(g1, v, cache=False), text1) == masks1


def _masks_along(c, text: bytes) -> list[bytes]:
    out, s = [], c.start()
    for b in text:
        out.append(c.mask_array(s).tobytes())
        s = c.advance(s, b)
    return out


@pytest.mark.skipif(not CORPUS.is_dir(), reason="shared grammar corpus not present")
@pytest.mark.parametrize("name", ["arithmetic", "json", "list", "chess", "c", "english", "json_arr", "japanese"])
def test_gbnf_masks_equal_xgrammar(name: str) -> None:
    """llama.cpp's GBNF files: along random walks over a small vocabulary, every mask equals
    xgrammar's for the same file (xgrammar reads GBNF natively; empty alternatives, which its reader
    rejects, are spelled ``""`` for it alone, as in test_gbnf). Files xgrammar cannot read are
    skipped with its reason."""
    pytest.importorskip("xgrammar")
    from trellis.integrations.xgrammar import compile_xgrammar
    from trellis.mask import allocate_bitmask, bitmask_to_bool

    text = (CORPUS / "llama.cpp" / f"{name}.gbnf").read_text(encoding="utf-8")
    rng = random.Random(name)
    toks = [bytes([b]) for b in range(0x20, 0x7F)] + [b"\n", b"\t"]
    toks += [bytes(rng.choice(b'abc 0123456789()+-*/{}[],:"\n.') for _ in range(rng.randint(2, 4)))
             for _ in range(150)]
    toks += ["é".encode(), "日本".encode(), b"\xc3", b"\xa9"]
    toks = list(dict.fromkeys(toks)) + [b""]
    v = Vocabulary(tuple(toks), eos=frozenset([len(toks) - 1]))
    c = compile(Gbnf(text, source=name), v, cache=False)
    try:
        x = compile_xgrammar(re.sub(r"::=(\s*)\|", r'::=\1"" |', text), v)
    except GrammarError as e:
        pytest.skip(f"xgrammar refuses it: {e}")
    eos = len(toks) - 1
    row = allocate_bitmask(1, len(toks))
    checked = 0
    for _ in range(5):
        s, xs, doc = c.start(), x.start(), b""
        for _ in range(20):
            mine = np.unpackbits(c.mask_array(s).view(np.uint8), bitorder="little")[:len(toks)].astype(bool)
            x.fill_mask(xs, row[0])
            theirs = bitmask_to_bool(row, len(toks))[0].numpy()
            wrong = np.flatnonzero(mine != theirs)
            assert not len(wrong), (name, doc, [(toks[i], bool(mine[i])) for i in wrong[:8]])
            checked += 1
            allowed = np.flatnonzero(mine)
            t = int(rng.choice(allowed))
            if t == eos:
                break
            s, xs, doc = c.advance(s, t), x.advance(xs, t), doc + toks[t]
    assert checked >= 20


def test_walks_of_large_dfas_are_keyed_by_their_tables(tmp_path, monkeypatch) -> None:
    """A sub-automaton over ``CANON_MAX`` states is keyed by a digest of its DFA's tables, never
    by ``id(trans)`` (a freed DFA's id is reused by the next, here or in another process): two
    grammars with the same terminal share its walks, a terminal one state longer never does, and
    the masks equal builds that share nothing."""
    from trellis.constrain.vocab import walk_cache
    from trellis.constrain.compile import clear_caches
    from trellis.constrain.vocab.dfa_shapes import CANON_MAX
    from trellis.constrain.earley.scannerless import EarleyConstraint
    from trellis.constrain.vocab.walk_cache import SHARED

    monkeypatch.setenv("TRELLIS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(walk_cache, "PERSIST_MIN_S", 0.0)
    clear_caches()
    v = random_vocab(b"abx", random.Random(3), 40)
    n = CANON_MAX + 20  # (a|b){n}: a chain of n + 1 states that branches at every byte
    text = b"ab" * 40
    masks = {}
    for g in (f"start: /[ab]{{{n}}}/\n", f"start: x\nx: A\nA: /[ab]{{{n}}}/\n", f"start: /[ab]{{{n + 1}}}/\n"):
        before = set(SHARED._mem)
        c = compile(g, v)
        masks[g] = _masks_along(c, text)
        assert any(k[0][0] == "dfa" for k in c._inside)  # (the chain's last 256 states: canonical)
        assert masks[g] == _masks_along(EarleyConstraint(c.ir, v, share=False), text)
        masks[g, "new"] = set(SHARED._mem) - before
    a, b, longer = (f"start: /[ab]{{{n}}}/\n", f"start: x\nx: A\nA: /[ab]{{{n}}}/\n", f"start: /[ab]{{{n + 1}}}/\n")
    assert masks[a, "new"] and not any(k[1][0][0] == "dfa" for k in masks[b, "new"])  # b reused a's
    assert any(k[1][0][0] == "dfa" for k in masks[longer, "new"])  # other tables: walked anew


@pytest.mark.parametrize("seed", range(3))
def test_walks_keyed_by_depth_class_equal_walks_keyed_by_state(seed: int, monkeypatch) -> None:
    """A large sub-automaton's walks are shared by the states that behave alike up to the longest
    token (``dfa_shapes.depth_classes``): in a length-bounded string the positions with more than
    a token's length left share one walk. Along random texts every mask equals the masks of the
    same grammar with walks keyed by state (``DEPTH_CLASSES`` off) and of a build sharing nothing,
    and the bounded string's positions take fewer walks than they are."""
    from trellis.constrain.compile import clear_caches
    from trellis.constrain.earley.scannerless import EarleyConstraint
    from trellis.constrain.vocab import dfa_shapes

    rng = random.Random(seed)
    v = random_vocab(b'ab"x', rng, 60)
    n = 300  # two bounded runs in one terminal: over CANON_MAX states up to the quote
    g = f'start: item ("," item)*\nitem: /[ab]{{0,{n}}}"x{{0,{n}}}/\n'
    # (runs up to the bound: the positions a token's length from it are where a shared walk would
    # go wrong if the classes looked less deep than the longest token)
    texts = [bytes(rng.choice(b"ab") for _ in range(k)) + b'"' + b"x" * rng.randint(0, n) + b',a"x' * rng.randint(0, 2)
             for k in (n, n - rng.randint(1, 4), rng.randint(0, n))]
    keyed = {}
    for on in (True, False):
        monkeypatch.setattr(dfa_shapes, "DEPTH_CLASSES", on)
        clear_caches()
        c = compile(g, v, cache=False)
        keyed[on] = [_masks_along(c, t) for t in texts]
        if on:  # (positions of the [ab] run: each its own walk, or one per class)
            walked = {k[0] for k in c._inside}
            assert len(walked) < sum(len(t) for t in texts) // 4 < len(set(c._shapes))
    assert keyed[True] == keyed[False]
    plain = EarleyConstraint(compile(g, v, cache=False).ir, v, share=False)
    assert keyed[True] == [_masks_along(plain, t) for t in texts]


def test_literal_walks_over_shared_rests_equal_unshared_masks(tmp_path, monkeypatch) -> None:
    """A literal's walk over a rest set with a content key (a string's closing-quote leftovers met
    by ``,`` ``}`` ``]`` after it) is shared across grammars (``("xl", ...)`` entries of
    ``walk_cache.SHARED``). Schemas compiled one after the other, each finding the entries of those
    before it: along random walks every mask equals a build of the same grammar that shares nothing."""
    from trellis.constrain import JsonSchema
    from trellis.constrain.compile import clear_caches
    from trellis.constrain.vocab.walk_cache import SHARED

    monkeypatch.setenv("TRELLIS_CACHE_DIR", str(tmp_path))
    clear_caches()
    rng = random.Random(5)
    v = random_vocab(b'{}[]",:ab', rng, 400)
    n = len(v.tokens)
    eos = next(iter(v.eos))
    schemas = [{"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a"]},
               {"type": "array", "items": {"type": "object", "properties": {"ab": {"type": "string"}}}},
               {"type": "object", "properties": {"b": {"type": "array", "items": {"type": "string"}}}}]
    checked = 0
    for schema in schemas:
        c = compile(JsonSchema(schema), v)
        plain = EarleyConstraint(c.ir, v, share=False)
        for _ in range(6):
            s, p = c.start(), plain.start()
            for _ in range(40):
                m = c.mask_array(s)
                assert np.array_equal(m, plain.mask_array(p)), (schema, s)
                checked += 1
                allowed = [t for t in np.flatnonzero(np.unpackbits(m.view(np.uint8), bitorder="little")[:n]) if t != eos]
                if not allowed:
                    break
                t = int(rng.choice(allowed))
                s, p = c.advance(s, t), plain.advance(p, t)
    assert checked >= 200
    assert any(k[1][0] == "xl" for k in SHARED._mem)  # the shared literal walks were taken


def _random_anchored_regex(rng: random.Random, depth: int = 0) -> str:
    """A small regex over ``a``, ``b`` and newlines with end anchors (``$``, ``\\Z``) at the end of
    some branches, and some inside (where the terminal's own next characters judge them)."""
    # Fixed-width atoms, and a repeat only last: re.match's greedy first match is then the
    # longest, the set language's (a greedy repeat followed by more, as in /a+(?:ab)*/ on "aaab",
    # stops short in re.match, and Lark reads terminals through re.match).
    parts = [rng.choice(["a", "b", "[ab]", r"\n"]) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.5:
        parts.append(rng.choice(["a+", "b?", "(?:ab)*"]))
    if depth < 1 and rng.random() < 0.5:
        # branches that start differently: re.match's first match is then the set language's
        # (Lark reads a terminal through re.match, which takes the first branch that matches)
        parts.append("(?:" + "|".join(lead + _random_anchored_regex(rng, depth + 1)
                                      for lead in ("a", r"\n")) + ")")
    k = rng.random()
    if k < 0.5:
        parts.append("$")
    elif k < 0.65:
        parts.append(r"\Z")
    elif k < 0.8:
        parts.insert(rng.randint(0, len(parts)), "$")
    return "".join(parts)


def test_end_anchors_in_random_terminals_mean_what_lark_means() -> None:
    """Random terminals with end anchors, in grammars that put text, newlines and ``%ignore``d
    newlines after them: the same language as Lark's Earley parser on every string of up to 5
    characters over ``a``, ``b`` and a newline (issue 58)."""
    rng = random.Random(58)
    shapes = ['start: T+\nT: /{r}/{f}\n', 'start: T ("\\n" | "b")* T?\nT: /{r}/{f}\n',
              'start: T ("," T)*\nT: /{r}/{f}\n%ignore /\\n/\n']
    compared = 0
    for _ in range(40):
        regex, flag = _random_anchored_regex(rng), rng.choice(["", "", "m"])
        text = rng.choice(shapes).replace("{r}", regex).replace("{f}", flag)
        try:
            lk = lark.Lark(text, parser="earley", lexer="dynamic_complete")
        except lark.exceptions.LarkError:
            continue  # Lark refuses it (a terminal that can match the empty string)
        try:
            c = compile(text, byte_vocab(), cache=False)
        except GrammarError as e:
            assert "matches nothing" in str(e), (text, e)
            assert not any(lark_accepts(lk, "".join(ch)) for n in range(6) for ch in itertools.product("ab\n,", repeat=n))
            continue
        for n in range(0, 6):
            for chars in itertools.product("ab\n,", repeat=n):
                s = "".join(chars)
                assert accepts(c, s.encode()) == lark_accepts(lk, s), (text, s)
        compared += 1
    assert compared >= 20


def test_a_trailing_anchor_sees_the_document_as_larks_lexers_do() -> None:
    """``$`` (like a trailing lookahead) is judged on the document's next characters, as Lark's
    lexers (LALR's contextual one, Earley's ``dynamic``) judge it. Earley's ``dynamic_complete`` also
    re-matches truncations of a token on their own, where the anchor sees the truncation's end: it
    alone accepts "aa" here (T = "a", then "a")."""
    text = 'start: T "a"\nT: /a+$/\n'
    c = compile(text, byte_vocab(), cache=False)
    for lexer in ({"parser": "lalr"}, {"parser": "earley", "lexer": "dynamic"}):
        lk = lark.Lark(text, **lexer)
        for s in ("aa", "aaa", "a", "aa\n", ""):
            assert accepts(c, s.encode()) == lark_accepts(lk, s) is False, (lexer, s)
    assert lark_accepts(lark.Lark(text, parser="earley", lexer="dynamic_complete"), "aa")


def test_step_tables_are_opaque_to_the_collector() -> None:
    """Every scan's step tables (transitions, final, has-a-way-on) are objects whose entries the
    cyclic collector does not follow (an ``array`` and ``bytes``, not lists it would traverse entry
    by entry in every collection that reaches them), for a literal chain, a small DFA and a 300-character bounded
    string, and a walk through that string steps them to acceptance with the masks of a
    brute-force check: a byte is allowed iff it keeps the text a prefix of the language."""
    import gc

    import torch

    from trellis.mask import allowed_ids

    grammar = r'start: "<" /[a-c]{0,300}/ ">" | "<" /b{290,300}/ "!"'
    vocab = byte_vocab()
    text = b"<" + b"b" * 295 + b"!"
    c = compile(grammar, vocab, cache=False)
    ids = {t: i for i, t in enumerate(vocab.tokens) if len(t) == 1}
    prefix = re.compile(rb"<(?:[a-c]{0,300}>?|b{290,300}!)?")
    s = c.start()
    for k, b in enumerate(text):
        allowed = set(allowed_ids(torch.from_numpy(c.mask_array(s)), len(vocab)))
        for t, i in ids.items():
            assert (i in allowed) == bool(prefix.fullmatch(text[:k] + t)), (k, t)
        s = c.advance(s, ids[bytes([b])])
        assert s is not None
    assert c.is_accepting(s)
    loaded = [d for d, t in enumerate(c.earley.trans) if t is not None]
    assert len(loaded) >= 3
    for d in loaded:
        for table in (c.earley.trans[d], c.earley.final[d], c.earley.has_out[d]):
            # (an array is tracked, but the collector follows no entry of it: its type at most)
            assert not gc.is_tracked(table) or len(gc.get_referents(table)) <= 1, (d, type(table).__name__)
