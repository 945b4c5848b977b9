"""Explored trees: every search exports a networkx tree with the documented attributes; viz writes
DOT and SVG/PNG (graphviz when installed, else matplotlib)."""

from __future__ import annotations

import networkx as nx
import pytest
import torch

from fakes import HashLM
from tests.search.tasks import Brackets, letters_vocab, trap_task
from trellis.decoder import Decoder
from trellis.search import MCTS, Beam, BestOfN, DiverseBeam, EntropyGate, Lookahead, TreeRecorder
from trellis.viz import to_dot, write_tree


def strategies(reward):
    return [Beam(width=3, n_best=2), DiverseBeam(width=4, groups=2), BestOfN(n=4, generator=torch.Generator().manual_seed(0)),
            MCTS(reward=reward, max_rollouts=8), Lookahead(width=2, depth=2), EntropyGate(threshold=0.5)]


@pytest.mark.parametrize("i", range(6))
def test_search_returns_the_same_hypotheses_as_call_plus_a_tree(i):
    lm, dec, root, reward = trap_task(1)
    s = strategies(reward)[i]
    res = s.search(dec, root, max_new_tokens=6)
    plain = s(dec, root, max_new_tokens=6) if not isinstance(s, BestOfN) else list(
        BestOfN(n=4, generator=torch.Generator().manual_seed(0))(dec, root, max_new_tokens=6))
    assert [h.tokens for h in res.hypotheses] == [h.tokens for h in plain]
    t = res.tree
    assert isinstance(t, nx.DiGraph) and nx.is_arborescence(t)
    for rank, h in enumerate(res.hypotheses):  # the returned hypotheses are marked, paths complete
        node = [n for n, d in t.nodes(data=True) if d.get("returned") == rank]
        assert len(node) == 1
        path = nx.shortest_path(t, 0, node[0])
        assert tuple(t.nodes[n]["token"] for n in path[1:]) == h.new_tokens
    for _, d in t.nodes(data=True):
        assert {"token", "text", "logprob", "visits", "value", "pruned", "finished"} <= set(d)


def test_grammar_pruned_children_are_recorded():
    vocab = letters_vocab(12)
    dec = Decoder(HashLM(12, seed=0), Brackets(vocab, max_depth=2))
    root = dec.start([1])
    res = Beam(width=2).search(dec, root, max_new_tokens=5, recorder=TreeRecorder(dec, root, pruned_top_k=6))
    pruned = [d for _, d in res.tree.nodes(data=True) if d["pruned"]]
    assert pruned
    for n, d in res.tree.nodes(data=True):
        if d["pruned"]:
            assert res.tree.out_degree(n) == 0  # never expanded
    # at the root only '(' is allowed, so the other top tokens are pruned
    root_kids = {res.tree.nodes[c]["token"]: res.tree.nodes[c]["pruned"] for c in res.tree.successors(0)}
    assert root_kids.get(3) is False and any(root_kids.values())


def test_viz_writes_dot_svg_and_png(tmp_path):
    lm, dec, root, reward = trap_task(2)
    res = MCTS(reward=reward, max_rollouts=6).search(dec, root, max_new_tokens=5)
    dot = to_dot(res.tree)
    assert dot.startswith("digraph") and dot.count("->") == res.tree.number_of_edges()
    assert write_tree(res.tree, tmp_path / "t.dot").read_text() == dot
    pytest.importorskip("matplotlib")
    svg = write_tree(res.tree, tmp_path / "t.svg", engine="matplotlib")
    assert "<svg" in svg.read_text()[:2000]
    png = write_tree(res.tree, tmp_path / "t.png", engine="matplotlib")
    assert png.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError):
        write_tree(res.tree, tmp_path / "t.txt")
