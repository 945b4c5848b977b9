"""HFLanguageModel: prefix KV reuse and one-pass tree logits equal plain recomputation."""

from __future__ import annotations

import random

import pytest
import torch

from fakes import tiny_gemma3, tiny_llama
from trellis.attention_guard import attention_context
from trellis.hf_lm import HFLanguageModel
from trellis.tokens import TokenTree

TOL = 1e-4  # fp32, tiny models (measured ~1e-7)
# Gemma's logits reach |x| ~ 127, where one fp32 ulp is 1.5e-5. Measured against a float64 copy of
# the model (2026-11-21): full recomputation is off by 1.4e-4, token-by-token by 8e-5 and the
# one-pass tree by 2.6e-4 (benchmarks/precision_tree_vs_fp64.py), so 1e-4 absolute is below the
# fp32 noise floor there.
GEMMA_TOL = 5e-4


def reference(model, seq):
    """A plain transformers forward; on CUDA with the attention kernel trellis routes around
    (trellis.attention_guard), since the reference must be right too."""
    p = next(model.parameters())
    with torch.inference_mode(), attention_context(p.device, p.dtype):
        return model(input_ids=torch.tensor([list(seq)], device=model.device), logits_to_keep=1).logits[0, -1].float()


def random_tree(rng: random.Random, n: int, vocab: int) -> TokenTree:
    parents = [-1] + [rng.randrange(-1, i) for i in range(1, n)]
    tokens = [rng.randrange(3, vocab) for _ in range(n)]
    return TokenTree(torch.tensor(tokens), torch.tensor(parents))


def check_tree(model, lm, prefix, tree, tol=TOL):
    out = lm.tree_logits(prefix, tree)
    assert out.shape == (len(tree) + 1, lm.vocab_size)
    worst = (out[0] - reference(model, prefix)).abs().max().item()
    toks = tree.tokens.tolist()
    for i in range(len(tree)):
        path = [toks[j] for j in tree.path_to(i)]
        worst = max(worst, (out[i + 1] - reference(model, list(prefix) + path)).abs().max().item())
    assert worst < tol, worst
    return out


@pytest.fixture(params=["llama", "gemma3"])
def tiny(request):
    return tiny_llama() if request.param == "llama" else tiny_gemma3(sliding_window=6)


def test_tree_logits_equal_token_by_token_on_random_trees(tiny):
    lm = HFLanguageModel(tiny)
    rng = random.Random(0)
    for trial in range(12):
        n = rng.choice([1, 2, 5, 17, 40, 64])
        prefix = [rng.randrange(3, 90) for _ in range(rng.randrange(1, 30))]
        check_tree(tiny, lm, prefix, random_tree(rng, n, 90))


def test_commit_keeps_only_the_accepted_path(tiny):
    lm = HFLanguageModel(tiny)
    rng = random.Random(1)
    prefix = [rng.randrange(3, 90) for _ in range(12)]
    for _ in range(6):
        tree = random_tree(rng, rng.randrange(1, 30), 90)
        lm.tree_logits(prefix, tree)
        leaf = rng.randrange(len(tree))
        path = tree.path_to(leaf)
        lm.commit(path)
        prefix = prefix + [int(tree.tokens[j]) for j in path]
        assert lm.cached_rows == [tuple(prefix)]
        before = lm.stats.forward_calls
        nxt = lm.logits([prefix])  # served from the stored logits of the committed node
        assert lm.stats.forward_calls == before
        assert (nxt[0] - reference(tiny, prefix)).abs().max().item() < TOL
        prefix = prefix + [rng.randrange(3, 90)]  # a "bonus" token: one forward on top of the cache
        assert (lm.logits([prefix])[0] - reference(tiny, prefix)).abs().max().item() < TOL


def test_uncommitted_tree_is_dropped_by_the_next_call(tiny):
    lm = HFLanguageModel(tiny)
    prefix = list(range(3, 20))
    lm.tree_logits(prefix, TokenTree.chain([5, 6, 7]))
    out = lm.logits([prefix + [9]])
    assert (out[0] - reference(tiny, prefix + [9])).abs().max().item() < TOL
    with pytest.raises(RuntimeError):
        lm.commit([0])


def test_commit_rejects_a_non_chain():
    lm = HFLanguageModel(tiny_llama())
    tree = TokenTree(torch.tensor([5, 6, 7]), torch.tensor([-1, -1, 0]))
    lm.tree_logits([3, 4], tree)
    with pytest.raises(ValueError):
        lm.commit([1, 2])


def test_prefix_reuse_extends_crops_and_selects_rows(tiny):
    lm = HFLanguageModel(tiny)
    base = list(range(3, 23))  # 20 tokens
    lm.logits([base])
    assert lm.stats.tokens_forwarded == 20
    lm.logits([base + [30]])  # extend: one new token
    assert lm.stats.tokens_forwarded == 21
    beams = [base + [30, 40], base + [30, 41], base + [30, 42]]
    lm.logits(beams)  # one row -> three rows, each forwards one token
    assert lm.stats.tokens_forwarded == 24
    reordered = [beams[2] + [7], beams[2] + [8], beams[0] + [9]]  # beam search reorder: select rows
    out = lm.logits(reordered)
    assert lm.stats.tokens_forwarded == 27 and lm.stats.cache_resets == 1
    for row, seq in zip(out, reordered):
        assert (row - reference(tiny, seq)).abs().max().item() < TOL
    crop = base[:5] + [50, 51]  # shares 5 tokens: crop, then forward 2
    assert (lm.logits([crop])[0] - reference(tiny, crop)).abs().max().item() < TOL
    assert lm.stats.tokens_forwarded == 29
    hits = lm.stats.cache_hits
    lm.logits([crop])
    assert lm.stats.cache_hits == hits + 1


def test_mixed_lengths_are_exact(tiny):
    lm = HFLanguageModel(tiny)
    seqs = [[3, 4, 5], [3, 4, 5, 6, 7], [9], [3, 4, 8]]
    out = lm.logits(seqs)
    for row, seq in zip(out, seqs):
        assert (row - reference(tiny, seq)).abs().max().item() < TOL


def test_mixed_lengths_decode_in_lockstep_in_one_forward_per_step(tiny):
    """Batched generation of prompts of different lengths: every step is ONE forward (shorter rows
    are left-padded with holes attention skips), rows may drop out, a holed row can later grow a
    draft tree, and every logit equals recomputation."""
    lm = HFLanguageModel(tiny)
    rng = random.Random(1)
    seqs = [[rng.randrange(3, 90) for _ in range(n)] for n in (3, 11, 1, 7)]
    calls = lm.stats.forward_calls
    for step in range(12):  # window 6 on gemma3: the holes cross the sliding window too
        if step == 5:
            seqs = [seqs[0], seqs[1], seqs[3]]  # a row finished
        out = lm.logits(seqs)
        for row, seq in zip(out, seqs):
            assert (row - reference(tiny, seq)).abs().max().item() < TOL, (step, len(seq))
        seqs = [s + [rng.randrange(3, 90)] for s in seqs]
    assert lm.stats.forward_calls - calls == 12 and lm.stats.cache_resets == 1
    short = seqs[0][:-1]  # the shortest prompt's row holds 8 holes: a tree on it reuses them
    check_tree(tiny, lm, short, random_tree(rng, 9, 90))
    lm.commit([])
    assert (lm.logits([short + [5]])[0] - reference(tiny, short + [5])).abs().max().item() < TOL


def test_sliding_window_is_respected_past_the_window():
    model = tiny_gemma3(sliding_window=4)
    lm = HFLanguageModel(model)
    seq = [3 + (i * 7) % 80 for i in range(30)]
    for k in range(10, 30, 3):  # incremental decoding across the window boundary
        assert (lm.logits([seq[:k]])[0] - reference(model, seq[:k])).abs().max().item() < TOL


def test_eager_attention_is_supported():
    model = tiny_gemma3(attn="eager")
    lm = HFLanguageModel(model)
    rng = random.Random(3)
    check_tree(model, lm, [5, 6, 7, 8], random_tree(rng, 20, 90))


@pytest.mark.model
def test_gemma_tree_logits_and_commit(gemma):
    model = gemma.model
    lm = HFLanguageModel(model)
    rng = random.Random(7)
    prefix = gemma.tokenizer("The history of the printing press begins").input_ids
    for n in (8, 64):
        tree = random_tree(rng, n, 20000)
        out = check_tree(model, lm, prefix, tree, tol=GEMMA_TOL)
        leaf = max(range(n), key=lambda i: len(tree.path_to(i)))
        lm.commit(tree.path_to(leaf))
        prefix = prefix + [int(tree.tokens[j]) for j in tree.path_to(leaf)]
        ref = reference(model, prefix)
        assert (out[leaf + 1] - ref).abs().max().item() < GEMMA_TOL and out[leaf + 1].argmax() == ref.argmax()
        nxt = prefix + [int(out[leaf + 1].argmax())]
        after = lm.logits([nxt])[0]
        ref = reference(model, nxt)
        assert (after - ref).abs().max().item() < GEMMA_TOL and after.argmax() == ref.argmax()
        prefix = nxt


def _truncated_copy(model, keep):
    """Reference for a layer-skip view: a deep copy with the other layers physically removed."""
    import copy

    ref = copy.deepcopy(model)
    base = ref.get_decoder()
    base.layers = torch.nn.ModuleList([base.layers[i] for i in keep])
    for new, layer in enumerate(base.layers):
        layer.self_attn.layer_idx = new
    cfg = ref.config
    if getattr(cfg, "layer_types", None) is not None:
        cfg.layer_types = [cfg.layer_types[i] for i in keep]
    cfg.num_hidden_layers = len(keep)
    return ref


@pytest.mark.parametrize("make,keep", [(tiny_llama, [0]), (tiny_gemma3, [0, 2, 5]), (tiny_gemma3, [0, 1, 3])])
def test_layer_skip_view_equals_a_truncated_model(make, keep):
    model = make() if make is tiny_gemma3 else make(layers=3)
    ref = _truncated_copy(model, keep)
    view = HFLanguageModel(model, layers=keep)
    full = HFLanguageModel(model)
    g = torch.Generator().manual_seed(0)
    seq = torch.randint(3, 90, (14,), generator=g).tolist()
    for n in (5, 6, 9, 14):  # incremental: the view's cache is extended, never recomputed
        got = view.logits([seq[:n]])[0]
        want = ref(torch.tensor([seq[:n]], device=ref.device)).logits[0, -1].float()
        assert torch.allclose(got, want, atol=1e-5), (n, (got - want).abs().max())
    assert view.stats.tokens_reused > 0
    # The shared model is untouched: the full view still matches a plain forward.
    assert torch.allclose(full.logits([seq])[0], model(torch.tensor([seq], device=model.device)).logits[0, -1].float(), atol=1e-5)
    assert len(model.get_decoder().layers) == model.config.num_hidden_layers


def test_layer_skip_view_never_modifies_the_shared_model_during_its_forward():
    """The view runs its layers through a module of its own (``decoder_view``): while it runs, the
    shared model still has all its layers and layer types (another view or the target may run in
    between, e.g. from another thread)."""
    model = tiny_gemma3()
    base, n = model.get_decoder(), model.config.num_hidden_layers
    types = list(model.config.layer_types)
    seen = []
    hook = base.layers[0].register_forward_hook(
        lambda *_: seen.append((len(base.layers), list(model.config.layer_types))))
    try:
        HFLanguageModel(model, layers=[0, 2, 5]).logits([[5, 9, 12]])
    finally:
        hook.remove()
    assert seen == [(n, types)]


def test_head_subset_computes_exactly_those_logits():
    model = tiny_gemma3()
    head = [3, 4, 10, 50, 77]
    view = HFLanguageModel(model, head=head)
    seq = [5, 9, 12, 40, 33, 7, 8]
    got = view.logits([seq])[0]
    want = model(torch.tensor([seq], device=model.device)).logits[0, -1].float()
    assert torch.allclose(got[head], want[head], atol=1e-5)
    others = torch.ones(got.shape[0], dtype=torch.bool)
    others[head] = False
    assert torch.isneginf(got[others]).all()
    tree = TokenTree.from_paths([[3, 4], [10]])
    rows = view.tree_logits(seq, tree)
    assert torch.isneginf(rows[:, others]).all() and torch.isfinite(rows[:, head]).all()
    # A second view (other layers) shares the first one's head: growing it grows both.
    shallow = HFLanguageModel(model, layers=[0, 2, 3, 5])
    shared = shallow.set_head(view.set_head(view.head.tolist()))
    for extra in ([20, 4, 90], list(range(60, 66))):  # 4 is in already
        assert shared.grow(extra) == len(set(extra) - set(head))
        head = sorted(set(head) | set(extra))
        seq = seq + [extra[0]]
        got = view.logits([seq])[0]
        want = model(torch.tensor([seq], device=model.device)).logits[0, -1].float()
        assert sorted(view.head.tolist()) == sorted(shallow.head.tolist()) == head
        assert torch.allclose(got[head], want[head], atol=1e-5)
        others = torch.ones(got.shape[0], dtype=torch.bool)
        others[head] = False
        assert torch.isneginf(got[others]).all() and torch.isneginf(shallow.logits([seq])[0, others]).all()
    with pytest.raises(ValueError):
        HFLanguageModel(tiny_gemma3(seed=1)).set_head(shared)  # rows of another model
    with pytest.raises(ValueError):
        HFLanguageModel(model, layers=[1, 2])  # layer 0 holds the cache length


def test_cache_buffer_grows_and_commits_in_place_over_many_steps(tiny):
    """The KV buffer doubles (64 -> 128 -> 256 positions) under decode steps and tree commits whose
    accepted paths skip sibling nodes; every answer still equals a fresh forward."""
    lm = HFLanguageModel(tiny)
    rng = random.Random(7)
    seq = [rng.randrange(3, 90) for _ in range(5)]
    while len(seq) < 200:
        if rng.random() < 0.5:
            seq.append(rng.randrange(3, 90))
            got = lm.logits([seq])[0]
        else:
            tree = random_tree(rng, rng.randrange(2, 12), 90)
            out = lm.tree_logits(seq, tree)
            path = tree.path_to(rng.randrange(len(tree)))
            lm.commit(path)
            seq = seq + [int(tree.tokens[j]) for j in path]
            got = out[path[-1] + 1]
        if len(seq) % 5 == 0 or len(seq) > 190:
            assert (got - reference(tiny, seq)).abs().max().item() < TOL, len(seq)
    assert lm.cached_rows == [tuple(seq)]


@pytest.mark.parametrize("make", [tiny_llama, tiny_gemma3])
def test_a_batch_forwards_its_shared_prefix_once(make):
    """N continuations of one prompt (best-of-N's first step, lockstep rollouts): the prompt is
    forwarded once, in one row, and copied to every row; the logits equal plain recomputation."""
    model = make()
    prompt = list(range(3, 15))  # 12 tokens, past tiny_gemma3's 6-token window
    prefixes = [prompt + [t] for t in (20, 21, 22, 23)]
    for share, spent in ((True, 12 + 4), (False, 4 * 13)):
        lm = HFLanguageModel(model)
        lm.share_prefix = share
        out = lm.logits(prefixes)
        assert lm.stats.tokens_forwarded == spent
        for row, p in zip(out, prefixes):
            assert (row - reference(model, p)).abs().max().item() < TOL
        # a batch the cache already holds the shared part of forwards only the new tokens
        before = lm.stats.tokens_forwarded
        lm.logits([p + [30] for p in prefixes])
        assert lm.stats.tokens_forwarded - before == 4
