"""Dynamic draft trees (trellis.speculate.tree): best-first growth keeps exactly the nodes of highest
path value, re-ranking keeps a tree, and the drafters that use them propose the likeliest paths."""

from __future__ import annotations

import math
import random

import pytest
import torch

from fakes import BigramLM
from trellis.decoder import Decoder
from trellis.speculate import ModelDrafter, TokenRecycling
from trellis.speculate.tree import grow, select
from trellis.tokens import TokenTree


def random_successors(seed: int, branching: int = 3):
    """A deterministic random successor function: ``branching`` tokens with estimates in (0, 1]."""
    def successors(path: tuple[int, ...]) -> list[tuple[int, float]]:
        rng = random.Random(hash((seed, path)))
        return [(rng.randrange(50), rng.uniform(0.01, 1.0)) for _ in range(branching)]
    return successors


def brute_force_values(successors, max_depth: int) -> dict[tuple[int, ...], float]:
    """Every path up to ``max_depth`` with its value (first estimate wins for a repeated token)."""
    out: dict[tuple[int, ...], float] = {}
    frontier = [((), 1.0)]
    for _ in range(max_depth):
        nxt = []
        for path, v in frontier:
            seen = set()
            for t, c in successors(path):
                if t in seen:
                    continue
                seen.add(t)
                out[path + (t,)] = v * c
                nxt.append((path + (t,), v * c))
        frontier = nxt
    return out


@pytest.mark.parametrize("seed,max_nodes,max_depth", [(0, 1, 4), (1, 7, 3), (2, 15, 5), (3, 40, 4), (4, 200, 3)])
def test_grow_keeps_the_nodes_of_highest_path_value(seed, max_nodes, max_depth):
    succ = random_successors(seed)
    tree, values = grow(succ, max_nodes=max_nodes, max_depth=max_depth)
    every = brute_force_values(succ, max_depth)
    assert len(tree) == min(max_nodes, len(every))
    toks = tree.tokens.tolist()
    paths = [tuple(toks[j] for j in tree.path_to(i)) for i in range(len(tree))]
    assert len(set(paths)) == len(paths)  # no duplicate node under one parent
    for p, v in zip(paths, values):
        assert math.isclose(every[p], v) and len(p) <= max_depth
    kept = sorted(values, reverse=True)
    best = sorted(every.values(), reverse=True)[: len(tree)]
    assert all(math.isclose(a, b) for a, b in zip(kept, best))  # the top values, none missed
    assert all(p < i for i, p in enumerate(tree.parents.tolist()))  # topological order


def test_grow_with_nothing_to_propose_is_empty():
    tree, values = grow(lambda path: [], max_nodes=8, max_depth=4)
    assert len(tree) == 0 and values == []


def test_select_keeps_a_tree_of_the_best_nodes_and_refuses_growing_values():
    tree = TokenTree(torch.tensor([10, 11, 12, 13, 14]), torch.tensor([-1, -1, 0, 2, 1]))
    values = [0.9, 0.5, 0.8, 0.1, 0.45]
    kept, old = select(tree, values, 3)
    assert old == [0, 1, 2]
    assert kept.tokens.tolist() == [10, 11, 12] and kept.parents.tolist() == [-1, -1, 0]
    assert select(tree, values, 9)[0] is tree
    with pytest.raises(ValueError):
        select(tree, [0.1, 0.5, 0.8, 0.05, 0.45], 2)  # node 2 (0.8) above its parent (0.1)


def test_dynamic_recycling_spends_the_budget_on_the_confident_path():
    rec = TokenRecycling(20, k=3)
    dec = Decoder(BigramLM(20), temperature=0)
    hyp = dec.start([4])
    # what the target said after tokens 4, 5 and 6 (log-probabilities of the top 3)
    logp = torch.full((3, 20), float("-inf"))
    logp[0, [5, 7, 8]] = torch.tensor([0.9, 0.06, 0.04]).log()  # after 4: 5 (confident)
    logp[1, [6, 9, 10]] = torch.tensor([0.8, 0.15, 0.05]).log()  # after 5: 6
    logp[2, [4, 11, 12]] = torch.tensor([0.5, 0.3, 0.2]).log()   # after 6: 4
    from trellis.speculate import Draft
    rec.observe(hyp, Draft(TokenTree.chain([5, 6])), logp, [0, 1])
    d = rec.draft(dec, hyp, max_nodes=3, max_depth=8)
    assert d.tree.tokens.tolist() == [5, 6, 4] and d.tree.parents.tolist() == [-1, 0, 1]  # .9, .72, .36
    d = rec.draft(dec, hyp, max_nodes=5, max_depth=2)
    toks = d.tree.tokens.tolist()
    paths = {tuple(toks[j] for j in d.tree.path_to(i)) for i in range(len(d))}
    assert paths == {(5,), (5, 6), (5, 9), (7,), (5, 10)}  # .9, .72, .135, .06, .045 beat (8,) .04
    static = TokenRecycling(20, k=3, dynamic=False)
    static.observe(hyp, Draft(TokenTree.chain([5, 6])), logp, [0, 1])
    assert len(static.draft(dec, hyp, max_nodes=5, max_depth=2)) == 5


def test_model_drafter_tree_holds_the_likeliest_paths_of_the_draft_model():
    """Expanding every token (width = vocabulary) to depth 2, then re-ranking, must keep exactly the
    6 likeliest paths of the draft model, as computed hypothesis by hypothesis."""
    draft_lm = BigramLM(12, seed=3, scale=3.0)
    dec = Decoder(BigramLM(12, seed=9), temperature=0)
    hyp = dec.start([4, 5])
    d = ModelDrafter(draft_lm, width=12).draft(dec, hyp, max_nodes=6, max_depth=2)
    assert len(d) == 6 and d.probs is None
    ddec = Decoder(draft_lm, temperature=0)
    first = ddec.log_probs([hyp])[0].exp()
    every = {}
    for a in range(12):
        if a in ddec.eos:
            every[(a,)] = float(first[a])
            continue
        second = ddec.log_probs([ddec.extend(hyp, a)])[0].exp()
        every[(a,)] = float(first[a])
        every.update({(a, b): float(first[a] * second[b]) for b in range(12)})
    best = sorted(every, key=every.__getitem__, reverse=True)[:6]
    toks = d.tree.tokens.tolist()
    got = {tuple(toks[j] for j in d.tree.path_to(i)) for i in range(len(d))}
    assert got == set(best)
    narrow = ModelDrafter(draft_lm, width=2).draft(dec, hyp, max_nodes=6, max_depth=3)
    assert len(narrow) == 6 and sum(p < 0 for p in narrow.tree.parents.tolist()) <= 2
    with pytest.raises(ValueError):
        ModelDrafter(draft_lm, width=0)
