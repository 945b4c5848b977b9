"""Tuned CPU GEMM kernels: same numbers as F.linear, chosen by measurement, cached per machine,
used only where they apply, never leaking."""

from __future__ import annotations

import json
import random

import pytest
import torch
import torch.nn.functional as F

import trellis.kernels as kernels
from fakes import tiny_gemma3
from trellis.kernels import KERNELS, TunedLinears, buckets
from trellis.hf_lm import HFLanguageModel
from trellis.tokens import TokenTree


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRELLIS_CACHE_DIR", str(tmp_path))


def _available() -> list[str]:
    return kernels._candidates()


def q8_0(w: torch.Tensor, g: int = 32, top: int = 127) -> torch.Tensor:
    """``w`` rounded the way llama.cpp's Q8_0 quantiser does (fp16 scale = block absmax / 127,
    int8 = round(w / scale)), returned dequantised: float32 weights that ARE int8 blocks."""
    b = w.detach().reshape(w.shape[0], -1, g)
    d = (b.abs().amax(-1, keepdim=True) / top).half().float()
    q = torch.where(d > 0, (b / d.clamp(min=1e-30)).round().clamp(-127, 127), torch.zeros_like(b))
    return (q * d).reshape(w.shape)


def as_int8_blocks(model: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                m.weight.copy_(q8_0(m.weight))
    return model


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_kernel_matches_f_linear_for_every_row_count(kernel):
    if kernel not in _available():
        pytest.skip(f"{kernel} is not in this torch build")
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 300)
    if kernel == "int8_blocks":  # a candidate only for weights that are int8 blocks
        as_int8_blocks(lin)
    tuned = TunedLinears([lin], rows=8, kernel=kernel)
    assert set(tuned.choices()["300x64"].values()) == {kernel}
    for n in range(1, 13):
        x = torch.randn(2, n, 64)
        ref = F.linear(x, lin.weight, lin.bias)
        with tuned.active():
            got = lin(x)
        assert got.shape == ref.shape
        assert torch.allclose(got, ref, atol=1e-5), n
        if 2 * n > 8:  # beyond rows: F.linear itself, bit for bit
            assert torch.equal(got, ref), n
    assert tuned.applies(1) and tuned.applies(8)
    assert not tuned.applies(0) and not tuned.applies(9)
    assert "forward" not in vars(lin)  # the instance attribute is gone outside the block


def test_the_fastest_kernel_by_measurement_wins_and_must_beat_plain_by_the_margin(monkeypatch):
    lin = torch.nn.Linear(16, 24, bias=False)
    cost = {"plain": 1.0, "transposed": 0.95, "mkl_packed": 0.5, "onednn": 0.7}
    seen: list[str] = []

    def timer(kernel, fn, best):
        seen.append(kernel)
        return cost[kernel]

    tuned = TunedLinears([lin], rows=4, timer=timer)
    row = tuned.choices()["24x16"]
    expect = "mkl_packed" if "mkl_packed" in _available() else "onednn" if "onednn" in _available() else "plain"
    assert row == {b: expect for b in buckets(4)}
    assert "transposed" in seen  # measured, and rejected: 0.95 is inside the margin of plain's 1.0
    cost.update(mkl_packed=2.0, onednn=2.0)
    assert TunedLinears([lin], rows=4, timer=timer, kernel=None)._measure(0) == {b: "plain" for b in buckets(4)}


def test_choices_are_cached_on_disk_per_machine_and_threads(tmp_path):
    lin = torch.nn.Linear(16, 24, bias=False)
    calls = []

    def timer(kernel, fn, best):
        calls.append(kernel)
        return 1.0

    TunedLinears([lin], rows=4, timer=timer).choices()
    assert calls
    stored = json.loads((tmp_path / "kernels.json").read_text())
    (key,) = stored
    assert f"threads {torch.get_num_threads()}" in key and "rows 4" in key
    stored[key]["24x16"] = {str(b): "transposed" for b in buckets(4)}  # a choice made earlier
    (tmp_path / "kernels.json").write_text(json.dumps(stored))
    calls.clear()
    again = TunedLinears([lin], rows=4, timer=timer).choices()
    assert not calls and set(again["24x16"].values()) == {"transposed"}
    TunedLinears([torch.nn.Linear(8, 12)], rows=4, timer=timer).choices()  # another model, same machine
    assert set(json.loads((tmp_path / "kernels.json").read_text())[key]) == {"24x16", "12x8"}


def test_no_disk_cache_when_the_cache_dir_is_disabled(tmp_path, monkeypatch):
    monkeypatch.setenv("TRELLIS_CACHE_DIR", "")
    TunedLinears([torch.nn.Linear(8, 8)], rows=4, timer=lambda kernel, fn, best: 1.0).choices()
    assert not list(tmp_path.iterdir())


def test_a_kernel_that_disagrees_is_never_used(monkeypatch):
    lin = torch.nn.Linear(16, 32)
    monkeypatch.setitem(kernels._RUN, "transposed", lambda x, p, w, r: F.linear(x, w) + 1.0)
    tuned = TunedLinears([lin], rows=4, kernel="transposed")
    assert set(tuned.choices()["32x16"].values()) == {"plain"}
    x = torch.randn(3, 16)
    with tuned.active():
        out = lin(x)
    assert torch.equal(out, F.linear(x, lin.weight, lin.bias))


def test_tree_logits_with_and_without_tuned_kernels_agree():
    model = as_int8_blocks(tiny_gemma3())  # int8 blocks, so every kernel applies
    for kernel in _available()[1:]:
        fast, plain = HFLanguageModel(model), HFLanguageModel(model, kernel_rows=None)
        fast._kernels = TunedLinears.for_model(model, 16, kernel=kernel)
        assert plain._kernels is None
        rng = random.Random(0)
        prefix = [rng.randrange(3, 90) for _ in range(9)]
        for n in (1, 2, 3, 5, 9, 15, 20):
            parents = [-1] + [rng.randrange(-1, i) for i in range(1, n)]
            tree = TokenTree(torch.tensor([rng.randrange(3, 90) for _ in range(n)]), torch.tensor(parents))
            a, b = fast.tree_logits(prefix, tree), plain.tree_logits(prefix, tree)
            assert (a - b).abs().max().item() < 1e-4, (kernel, n)
        assert fast._kernels._routes  # the 1..16-row forwards did go through the kernels
        assert all("forward" not in vars(m) for m in model.modules())


def test_views_of_one_model_share_its_kernels():
    model = tiny_gemma3()
    a, b = HFLanguageModel(model), HFLanguageModel(model, layers=[0])
    assert a._kernels is b._kernels
    with pytest.raises(ValueError):
        TunedLinears([torch.nn.Linear(2, 2)], rows=0)
    with pytest.raises(ValueError, match="unknown kernel"):
        TunedLinears([torch.nn.Linear(2, 2)], kernel="magic")


# ------------------------------------------------------------------------------ int8 blocks
needs_qlinear = pytest.mark.skipif(not kernels.qlinear_available(), reason="trellis._qlinear not built")


@pytest.mark.parametrize("g,top", [(32, 127), (32, 16), (32, 8), (16, 32), (16, 31)])
def test_int8_blocks_recovers_the_integers_and_scales_exactly(g, top):
    """Q8_0 (127), Q5_0 (16), Q4_0 (8), Q6_K-like blocks of 16 (32, 31), and a few blocks with
    an unusual top integer (5: found by the search over the other integers): the products are the
    weights bit for bit."""
    torch.manual_seed(g + top)
    w = q8_0(torch.randn(300, 64), g, top)
    w[7] = 0.0  # an all-zero row: scale 0
    w[9] = q8_0(torch.randn(1, 64), g, 5)[0]
    q, d, got_g = kernels.int8_blocks(w)
    assert q.dtype == torch.int8 and d.dtype == torch.float32
    assert got_g in (g, 16)
    assert torch.equal((q.float().reshape(300, -1, got_g) * d[..., None]).reshape(300, 64), w)


@pytest.mark.parametrize("make", [
    lambda: torch.randn(64, 64),  # plain floats
    lambda: q8_0(torch.randn(64, 64)) + 0.37,  # Q4_K-like: a per-block offset no int8 block holds
    lambda: torch.randn(64, 40),  # K not a multiple of 16
])
def test_int8_blocks_refuses_weights_that_are_not_blocks(make):
    with pytest.raises(RuntimeError):
        kernels.int8_blocks(make())


@needs_qlinear
def test_qlinear_every_instruction_set_matches_the_float_product():
    """Plain C, AVX2 and AVX-512 (where the CPU has them) against F.linear on the dequantised
    weights, for row counts on and off the tiles (1..13) and output counts off the 4-wide tiles."""
    torch.manual_seed(0)
    for n_out, k, g in ((262, 64, 32), (37, 48, 16), (4096, 640, 32)):
        w = q8_0(torch.randn(n_out, k), g)
        q, d, g2 = kernels.int8_blocks(w)
        for isa in range(kernels.qlinear_isa() + 1):
            for b in (1, 2, 3, 4, 5, 7, 8, 9, 13):
                x = torch.randn(b, k)
                y = torch.full((b, n_out), float("nan"))
                kernels.int8_linear(x, q, d, g2, threads=2, isa=isa, out=y)
                ref = F.linear(x, w)
                assert torch.allclose(y, ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max())), (isa, n_out, b)
    with pytest.raises(ValueError):  # K not a multiple of 16
        kernels.int8_linear(torch.randn(b, 20), q, d, 16, threads=1, out=y)
    with pytest.raises(ValueError):  # an output buffer shorter than the shapes say
        kernels.int8_linear(x, q, d, g2, threads=1, out=y[:1])


@needs_qlinear
def test_a_kernel_chosen_for_a_shape_is_used_only_on_the_weights_it_applies_to():
    """Two linears of one shape, one int8 blocks and one not (a GGUF mixes Q8_0 and Q4_K): the
    int8 kernel, timed on the first weight it applies to, routes that weight and leaves the other
    on F.linear."""
    torch.manual_seed(0)
    plain_w, blocks = torch.nn.Linear(64, 96, bias=False), as_int8_blocks(torch.nn.Linear(64, 96, bias=False))
    cost = {"plain": 1.0, "transposed": 1.0, "mkl_packed": 1.0, "onednn": 1.0, "int8_blocks": 0.1}
    tuned = TunedLinears([plain_w, blocks], rows=4, timer=lambda k, fn, best: cost[k])
    assert set(tuned.choices()["96x64"].values()) == {"int8_blocks"}
    x = torch.randn(3, 64)
    with tuned.active():
        assert "forward" not in vars(plain_w) and "forward" in vars(blocks)
        a, b = plain_w(x), blocks(x)
    assert torch.equal(a, F.linear(x, plain_w.weight))
    assert torch.allclose(b, F.linear(x, blocks.weight), atol=1e-5)


def test_tuning_can_be_restricted_to_some_kernels(tmp_path):
    """``kernels=``: the candidates a benchmark allows (the path before a kernel existed); stored
    under its own key, so the full set is still tuned on its own."""
    lin = as_int8_blocks(torch.nn.Linear(64, 96, bias=False))
    seen: list[str] = []

    def timer(kernel, fn, best):
        seen.append(kernel)
        return 0.1 if kernel == "transposed" else 1.0

    tuned = TunedLinears([lin], rows=4, timer=timer, kernels=["transposed"])
    assert set(tuned.choices()["96x64"].values()) == {"transposed"}
    assert set(seen) == {"plain", "transposed"}
    seen.clear()
    TunedLinears([lin], rows=4, timer=timer).choices()
    assert set(seen) == set(_available())  # a different key: measured again, every candidate
    with pytest.raises(ValueError, match="unknown kernels"):
        TunedLinears([lin], kernels=["magic"])
    lm = HFLanguageModel(tiny_gemma3())
    lm.kernels = None
    assert lm.kernels is None
    with pytest.raises(TypeError):
        lm.kernels = "transposed"
