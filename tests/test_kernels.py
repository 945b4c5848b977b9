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
from trellis.lm import HFLanguageModel
from trellis.tokens import TokenTree


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRELLIS_CACHE_DIR", str(tmp_path))


def _available() -> list[str]:
    return kernels._candidates()


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_kernel_matches_f_linear_for_every_row_count(kernel):
    if kernel not in _available():
        pytest.skip(f"{kernel} is not in this torch build")
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 300)
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
    model = tiny_gemma3()
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
