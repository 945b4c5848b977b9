"""MCTS rollouts that share work (issue 25): lockstep rollouts and speculative rollouts change how
the rollouts are computed, never which tree and programs the search returns."""

from __future__ import annotations

import math

import pytest
import torch

from fakes import tiny_gemma3
from tests.search.tasks import trap_task
from trellis.decoder import Decoder
from trellis.hf_lm import HFLanguageModel
from trellis.lm_proxy import LMProxy
from trellis.search import MCTS
from trellis.speculate.base import Speculative
from trellis.speculate.drafters import PromptLookup
from trellis.speculate.verify import GreedyVerifier


def _close(x, y) -> bool:
    if isinstance(x, float) and isinstance(y, float):
        return math.isclose(x, y, rel_tol=1e-4, abs_tol=1e-6)
    return x == y


def _same(a, b) -> None:
    """Same programs in the same order, same tree (node for node, edge for edge); floats equal up to
    the last bits a batched or tree forward may round differently from a one-row forward."""
    assert [h.tokens for h in a.hypotheses] == [h.tokens for h in b.hypotheses]
    assert all(_close(x, y) for x, y in zip(a.scores, b.scores))
    ta, tb = a.tree, b.tree
    assert sorted(ta.edges()) == sorted(tb.edges())
    for n, da in ta.nodes(data=True):
        db = tb.nodes[n]
        assert da.keys() == db.keys(), n
        assert all(_close(da[k], db[k]) for k in da), (n, da, db)


@pytest.mark.parametrize("seed", range(12))
def test_lockstep_rollouts_return_the_same_tree_and_programs_on_the_trap_task(seed):
    _, dec, root, reward = trap_task(seed)
    one = MCTS(reward=reward, max_rollouts=16, lockstep=1).search(dec, root, max_new_tokens=8)
    many = MCTS(reward=reward, max_rollouts=16, lockstep=4).search(dec, root, max_new_tokens=8)
    _same(one, many)


def _code_like_task(seed: int):
    """A tiny Gemma 3 (sliding windows, a real KV cache with holes) and a reward that prefers
    sequences with many even tokens: rollouts go deep and the tree branches."""
    model = tiny_gemma3(seed=seed)
    with torch.no_grad():  # peaked distributions, as a trained model's: a random tiny one is nearly
        model.lm_head.weight.mul_(20.0)  # uniform, and a 1e-7 rounding difference could flip its argmax
    lm = HFLanguageModel(model)
    dec = Decoder(lm)
    prompt = [5, 9, 13, 5, 9, 13, 7, 5, 9]  # repeats: prompt lookup has something to propose
    return lm, dec, dec.start(prompt), (lambda h: sum(t % 2 == 0 for t in h.new_tokens) / max(1, h.num_new))


@pytest.mark.parametrize("seed", range(3))
def test_lockstep_rollouts_return_the_same_tree_on_a_real_kv_cache(seed):
    lm, dec, root, reward = _code_like_task(seed)
    one = MCTS(reward=reward, max_rollouts=10, k=3, lockstep=1).search(dec, root, max_new_tokens=12)
    lm.reset()
    many = MCTS(reward=reward, max_rollouts=10, k=3, lockstep=4).search(dec, root, max_new_tokens=12)
    _same(one, many)


@pytest.mark.parametrize("seed", range(3))
def test_speculative_rollouts_return_the_same_tree_as_greedy_ones(seed):
    lm, dec, root, reward = _code_like_task(seed)
    # the decoder samples at temperature 1 (MCTS expands from that distribution); the rollout is
    # greedy either way: Greedy takes the argmax, the speculative rollout verifies greedily
    greedy = MCTS(reward=reward, max_rollouts=10, lockstep=1).search(dec, root, max_new_tokens=12)
    lm.reset()
    spec = Speculative(PromptLookup(), verifier=GreedyVerifier())
    fast = MCTS(reward=reward, max_rollouts=10, rollout=spec, sequence_cache=True).search(
        dec, root, max_new_tokens=12)
    _same(greedy, fast)
    assert spec.stats.rounds > 0


def test_a_speculative_rollout_commits_its_accepted_path(monkeypatch):
    """Through MCTS's memo proxy the verified tree's accepted chain reaches the model's cache: the
    next round re-forwards nothing. With the proxy's commit dropped (what ``_MemoLM`` did before
    issue 25) the same search forwards more tokens and returns the same programs."""
    spent = {}
    results = {}
    for mode in ("commit", "dropped"):
        lm, dec, root, reward = _code_like_task(0)
        if mode == "dropped":
            monkeypatch.setattr(LMProxy, "commit", lambda self, path: None)
        spec = Speculative(PromptLookup(), verifier=GreedyVerifier())
        before = lm.stats.tokens_forwarded
        res = MCTS(reward=reward, max_rollouts=6, rollout=spec, sequence_cache=True).search(
            dec, root, max_new_tokens=12)
        spent[mode] = lm.stats.tokens_forwarded - before
        results[mode] = [h.tokens for h in res.hypotheses]
        assert spec.stats.accepted > 0
    assert results["commit"] == results["dropped"]
    assert spent["commit"] < spent["dropped"], spent
