"""``maxLength`` above MAX_STRING (8192) compiled exactly (issue 27): 49 of maskbench's real-world
schemas were refused for ``maxLength: 32767`` or ``65535`` alone. The length is counted in levels
(json_schema/scalars.py ``ScalarRules._level_rules``): units of 16, 256, 4096, ... characters, so the rules
grow with the number of levels, not with the bound. Judged against the ``jsonschema`` validator
at every boundary of the units, in compact and flexible whitespace, and checked to be LALR(1).
"""

from __future__ import annotations

import lark
import pytest

from tests.constrain.test_json_schema_negation import judge
from trellis.constrain import JsonSchema, SchemaError

LENGTHS = [0, 1, 15, 16, 17, 255, 256, 257, 4095, 4096, 4097, 8192, 8193, 32766, 32767, 32768, 65535, 65536, 65537]


def _strings(lo: int, hi: int) -> tuple[list, list]:
    # "é" is two UTF-8 bytes: lengths count characters, and chunks are characters, not bytes
    texts = [("aé" * n)[:n] for n in LENGTHS + [lo - 1, lo, hi, hi + 1] if n >= 0]
    return [t for t in texts if lo <= len(t) <= hi], [t for t in texts if not lo <= len(t) <= hi]


@pytest.mark.parametrize("lo,hi", [(0, 32767), (1, 65535), (5000, 40000), (0, 8193)])
def test_long_max_length_is_exact(lo: int, hi: int) -> None:
    valid, invalid = _strings(lo, hi)
    judge({"type": "object", "properties": {"s": {"type": "string", "minLength": lo, "maxLength": hi}},
           "required": ["s"]}, [{"s": t} for t in valid], [{"s": t} for t in invalid])


def test_long_max_length_grammar_is_small_and_lalr() -> None:
    text = JsonSchema({"type": "string", "maxLength": 10 ** 9}).to_lark()
    assert len(text.splitlines()) < 400
    parser = lark.Lark(text, parser="lalr", lexer="contextual", strict=True)
    parser.parse('"' + "x" * 70000 + '"')


def test_long_bounds_that_stay_refused_by_name() -> None:
    """A bound with a pattern is counted in chunk rules over the pattern's states up to 16,384
    characters (test_json_schema_pattern_lengths.py), and a long minLength is counted linearly:
    past those both are refused where they are written."""
    for schema, pointer in [({"properties": {"s": {"type": "string", "pattern": "^a", "maxLength": 32767}}},
                             "/properties/s/maxLength"),
                            ({"type": "string", "minLength": 10000}, "/minLength")]:
        with pytest.raises(SchemaError) as e:
            JsonSchema(schema, closed_objects=False).to_lark()
        assert e.value.pointer == pointer, str(e.value)


# The Earley form counts EARLEY_CHUNK (128) characters a chunk, the LALR form CHUNK (16): lengths
# at and around both kinds of edges, as characters of one and two UTF-8 bytes.
EARLEY_EDGES = [(0, 17), (0, 127), (0, 128), (0, 129), (5, 256), (127, 300), (200, None), (129, 129)]


@pytest.mark.parametrize("lo,hi", EARLEY_EDGES)
def test_earley_chunk_edges_are_exact(lo: int, hi: int | None) -> None:
    top = 3 * 128 if hi is None else hi
    lengths = sorted({n for n in [0, 1, 15, 16, 17, 127, 128, 129, 255, 256, 257, lo - 1, lo, lo + 1, top - 1, top,
                                  top + 1] if n >= 0})
    texts = [("aé" * n)[:n] for n in lengths]
    schema = {"type": "object", "properties": {"s": {"type": "string", "minLength": lo}}, "required": ["s"]}
    if hi is not None:
        schema["properties"]["s"]["maxLength"] = hi
    ok = [t for t in texts if lo <= len(t) and (hi is None or len(t) <= hi)]
    judge(schema, [{"s": t} for t in ok], [{"s": t} for t in texts if t not in ok])


@pytest.mark.parametrize("lo,hi", [(0, 40), (3, 150), (130, None), (0, 300)])
def test_earley_and_lalr_chunk_forms_give_equal_masks(lo: int, hi: int | None) -> None:
    """Two decompositions of one language (16- and 128-character chunks), each compiled on the
    Earley engine: every mask along random walks is equal (each is exact, so any difference is a
    wrong grammar). The walks take each mask's tokens at random, avoiding a quote until a
    random length past the chunk edges (so the strings run through several chunks)."""
    import random

    import torch

    from tests.constrain.test_trie_walk import _vocab
    from trellis.constrain import compile
    from trellis.mask import allowed_ids

    vocab = _vocab(7)
    spec = {"type": "string", "minLength": lo} | ({} if hi is None else {"maxLength": hi})
    earley = compile(JsonSchema(spec), vocab, cache=False)
    lalr_form = compile(JsonSchema(spec).to_lark("lalr"), vocab, cache=False)
    assert "{128}" in JsonSchema(spec).to_lark("earley") or (hi is not None and hi <= 128)
    rng = random.Random(lo)
    longest = 0
    for _ in range(6):
        a, b = earley.start(), lalr_form.start()
        want, text = rng.randint(0, 400), b""
        for _ in range(300):
            ma, mb = earley.mask_array(a), lalr_form.mask_array(b)
            assert (ma == mb).all(), text
            ids = [t for t in allowed_ids(torch.from_numpy(ma), len(vocab)) if t not in vocab.eos]
            if not ids:
                break
            inner = [t for t in ids if b'"' not in vocab.tokens[t]]
            t = rng.choice(inner if inner and len(text) < want else ids)
            text += vocab.tokens[t]
            longest = max(longest, len(text))
            a, b = earley.advance(a, t), lalr_form.advance(b, t)
            assert a is not None and b is not None
    assert longest > (150 if hi is None or hi > 150 else hi // 2)  # the strings ran past the edges
