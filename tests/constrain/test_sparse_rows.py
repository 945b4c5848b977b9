"""``scannerless.SPARSE_ROWS``: a scan state's packed row with few nonzero words is OR-ed into a
mask word by word (``walks.sparse_words``), and the memoised rows (``_row_of``) give the masks
the whole-row OR gives, along random documents of a schema with many keys (key positions are
where a mask ORs several literals' rows)."""

from __future__ import annotations

import random

import numpy as np
import pytest

import trellis.constrain.earley.scannerless as scannerless
from trellis.constrain.vocab.walks import sparse_words

from tests.constrain.test_counted_walk import _vocab, flag_off, masks_agree, two_constraints

KEYS = ["a", "b", "c", "ab", "ba", "cab", "x", "bx"]


def test_sparse_words_are_the_nonzero_words() -> None:
    rng = np.random.default_rng(0)
    row = np.zeros(64, dtype=np.int32)
    row[[3, 17, 40]] = [5, -1, 1 << 30]
    idx, vals = sparse_words(row, 3)
    assert idx.tolist() == [3, 17, 40] and vals.tolist() == [5, -1, 1 << 30]
    assert sparse_words(row, 2) is None  # over the limit: OR-ed whole
    dense = rng.integers(1, 9, 64).astype(np.int32)
    m = np.zeros(64, dtype=np.int32)
    w = sparse_words(dense, 64)
    m[w[0]] |= w[1]
    assert np.array_equal(m, dense)


@pytest.mark.parametrize("seed", range(3))
def test_masks_are_the_same_word_by_word_and_whole(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    vocab = _vocab(seed)
    schema = {"type": "object", "properties": {k: {"type": ["string", "integer", "boolean"]} for k in KEYS},
              "additionalProperties": False}
    seen = {"sparse": 0, "whole": 0}

    def spy(packed, limit):  # type: ignore[no-untyped-def]
        r = sparse_words(packed, limit)
        seen["whole" if r is None else "sparse"] += 1
        return r

    monkeypatch.setattr(scannerless, "sparse_words", spy)
    monkeypatch.setattr(scannerless, "SPARSE_WORDS", 2)  # (a small vocabulary: a few words a row)
    on, off = two_constraints(schema, vocab)

    rng = random.Random(seed)
    for _ in range(6):
        keys = rng.sample(KEYS, rng.randint(1, len(KEYS)))
        keys.sort(key=KEYS.index)  # (the declared order: trellis' documented narrowing)
        vals = [rng.choice(['"ab"', '""', "0", "true", '"x\\\\"']) for _ in keys]
        doc = ("{" + ",".join(f'"{k}":{v}' for k, v in zip(keys, vals)) + "}").encode()
        masks_agree(on, off, doc, rng, mask_off=flag_off(monkeypatch, scannerless, "SPARSE_ROWS", off))
    assert seen["sparse"] and seen["whole"]  # both ways of OR-ing were taken
