"""Prepacked CPU GEMMs: same numbers as F.linear, used only where they apply, never leaking."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

import trellis.packed as packed
from fakes import tiny_gemma3
from trellis.lm import HFLanguageModel
from trellis.packed import PackedLinears
from trellis.tokens import TokenTree

pytestmark = pytest.mark.skipif(not packed.available(), reason="torch built without MKL packed sgemm")


def test_packed_linear_matches_f_linear_for_every_row_count():
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 300)
    packs = PackedLinears([lin], rows=8)
    for n in range(1, 13):
        x = torch.randn(2, n, 64)
        ref = F.linear(x, lin.weight, lin.bias)
        with packs.active():
            got = lin(x)
        assert got.shape == ref.shape
        assert torch.allclose(got, ref, atol=1e-5), n
    assert packs.enabled and packs.applies(4) and packs.applies(8)
    assert not packs.applies(3) and not packs.applies(9)
    assert "forward" not in vars(lin)  # the instance attribute is gone outside the block


def test_a_pack_that_disagrees_disables_itself(monkeypatch):
    lin = torch.nn.Linear(16, 32)
    monkeypatch.setattr(packed, "_packed_linear", lambda x, p, w, b, r: F.linear(x, w, b) + 1.0)
    packs = PackedLinears([lin], rows=4)
    x = torch.randn(5, 16)
    with packs.active():
        out = lin(x)
    assert not packs.enabled
    assert torch.equal(out, F.linear(x, lin.weight, lin.bias))


def test_tree_logits_with_and_without_packs_agree():
    model = tiny_gemma3()
    fast, plain = HFLanguageModel(model), HFLanguageModel(model, packed_rows=None)
    assert fast._packs is not None and plain._packs is None
    rng = random.Random(0)
    prefix = [rng.randrange(3, 90) for _ in range(9)]
    for n in (2, 3, 5, 9, 15, 20):
        parents = [-1] + [rng.randrange(-1, i) for i in range(1, n)]
        tree = TokenTree(torch.tensor([rng.randrange(3, 90) for _ in range(n)]), torch.tensor(parents))
        a, b = fast.tree_logits(prefix, tree), plain.tree_logits(prefix, tree)
        assert (a - b).abs().max().item() < 1e-4, n
    assert fast._packs._packed is not None  # the 4..16-row forwards did go through the packs
    assert all("forward" not in vars(m) for m in model.modules())


def test_views_of_one_model_share_its_packs():
    model = tiny_gemma3()
    a, b = HFLanguageModel(model), HFLanguageModel(model, layers=[0])
    assert a._packs is b._packs
    with pytest.raises(ValueError):
        PackedLinears([torch.nn.Linear(2, 2)], rows=3)
