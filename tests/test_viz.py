"""Tree drawings stay readable (issue 22: a big search tree became a 163-megapixel image): single-
child chains are drawn as one node, at most ``MAX_DRAWN_NODES`` boxes are drawn (the best paths,
pruned siblings summed up as "+N more"), and images are at most ``MAX_SIDE_PX`` on a side."""

from __future__ import annotations

import random
import re
import shutil
import struct

import networkx as nx
import pytest

from trellis.viz import MAX_CHILDREN, MAX_DRAWN_NODES, MAX_SIDE_PX, condense, to_dot, write_tree


def _node(g: nx.DiGraph, node: int, parent: int | None, rng: random.Random, **attrs) -> None:
    depth = 0 if parent is None else g.nodes[parent]["depth"] + 1
    g.add_node(node, token=None if parent is None else rng.randrange(1000), text="" if parent is None else
               rng.choice(["def", " x", " =", " 1", "\n", "    ", "return", "(", ")"]), depth=depth,
               logprob=None if parent is None else -rng.random() * 3, score=-rng.random() * depth,
               visits=rng.randrange(20), value=rng.random(), pruned=False, finished=False, **attrs)
    if parent is not None:
        g.add_edge(parent, node)


def random_tree(n: int, seed: int = 0, chain: float = 0.85) -> nx.DiGraph:
    """A search-tree-like graph: mostly long single-child chains (rollouts), branching elsewhere,
    some grammar-pruned leaves, and one returned (best) hypothesis at a deep leaf."""
    rng = random.Random(seed)
    g = nx.DiGraph()
    _node(g, 0, None, rng)
    for i in range(1, n):
        parent = i - 1 if rng.random() < chain and not g.nodes[i - 1]["pruned"] else rng.randrange(i)
        while g.nodes[parent]["pruned"]:
            parent = rng.randrange(i)
        _node(g, i, parent, rng)
        if rng.random() < 0.05:
            g.nodes[i]["pruned"] = True
    leaves = [v for v in g if g.out_degree(v) == 0 and not g.nodes[v]["pruned"]]
    best = max(leaves, key=lambda v: g.nodes[v]["depth"])
    g.nodes[best].update(returned=0, finished=True)
    return g


def _accounted(drawn: nx.DiGraph) -> int:
    """Original nodes a condensed drawing stands for: each box's chain plus every "+N more" subtree."""
    return sum(d.get("hidden", 0) if d.get("more") else d.get("collapsed", 1) for _, d in drawn.nodes(data=True))


def test_a_5000_node_tree_is_drawn_with_at_most_the_node_cap():
    tree = random_tree(5000)
    drawn = condense(tree)
    assert drawn.number_of_nodes() <= MAX_DRAWN_NODES and nx.is_arborescence(drawn)
    assert _accounted(drawn) == 5000  # nothing silently dropped: hidden subtrees are counted
    assert all(drawn.out_degree(v) <= MAX_CHILDREN + 1 for v in drawn)  # + the "+N more" box
    # the returned hypothesis' path is drawn in full
    best = next(v for v, d in tree.nodes(data=True) if d.get("returned") == 0)
    shown = [v for v, d in drawn.nodes(data=True) if d.get("returned") == 0]
    assert len(shown) == 1 and drawn.nodes[shown[0]]["depth"] + drawn.nodes[shown[0]]["collapsed"] - 1 == \
        tree.nodes[best]["depth"]
    dot = to_dot(tree, max_nodes=MAX_DRAWN_NODES)
    assert len(re.findall(r"^  n\d+ \[", dot, flags=re.M)) == drawn.number_of_nodes()
    assert "more" in dot


def test_write_tree_caps_what_it_draws_in_every_format(tmp_path):
    tree = random_tree(5000, seed=1)
    dot = write_tree(tree, tmp_path / "t.dot").read_text()
    assert len(re.findall(r"^  n\d+ \[", dot, flags=re.M)) <= MAX_DRAWN_NODES
    assert f'size="{MAX_SIDE_PX / 72:g},{MAX_SIDE_PX / 72:g}"' in dot  # graphviz scales bigger drawings down
    pytest.importorskip("matplotlib")
    png = write_tree(tree, tmp_path / "t.png", engine="matplotlib").read_bytes()
    width, height = struct.unpack(">II", png[16:24])  # the PNG header's IHDR chunk
    assert width <= MAX_SIDE_PX and height <= MAX_SIDE_PX


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz's `dot` is not installed")
def test_graphviz_png_stays_within_the_pixel_cap(tmp_path):
    png = write_tree(random_tree(5000, seed=2), tmp_path / "t.png", engine="dot").read_bytes()
    width, height = struct.unpack(">II", png[16:24])
    assert width <= MAX_SIDE_PX and height <= MAX_SIDE_PX


def test_a_long_chain_is_one_node_with_an_ellipsized_label():
    g = nx.DiGraph()
    rng = random.Random(0)
    _node(g, 0, None, rng)
    for i in range(1, 1001):
        _node(g, i, i - 1, rng)
    g.nodes[1000].update(returned=0, finished=True)
    drawn = condense(g)
    assert sorted(drawn.nodes) == [0, 1]  # the root (the prompt) and the whole rollout
    d = drawn.nodes[1]
    assert d["collapsed"] == 1000 and d["returned"] == 0 and d["finished"]
    assert d["text"] == "".join(g.nodes[i]["text"] for i in range(1, 1001))
    assert d["logprob"] == pytest.approx(sum(g.nodes[i]["logprob"] for i in range(1, 1001)))
    label = to_dot(drawn, label_width=20).split("n1 [label=")[1].split('"')[1]
    head = label.split("\\n")[0]
    assert "…" in head and len(head.replace("\\\\", "\\")) <= 20 and "1000 tok" in label


def test_many_siblings_are_summed_up_as_one_more_node():
    g = nx.DiGraph()
    rng = random.Random(0)
    _node(g, 0, None, rng)
    for i in range(1, 41):
        _node(g, i, 0, rng)
        g.nodes[i].update(visits=i, value=0.5)  # equal values: the most visited are kept
    drawn = condense(g, max_nodes=30, max_children=5)
    kids = list(drawn.successors(0))
    more = [v for v in kids if drawn.nodes[v].get("more")]
    assert len(kids) == 6 and len(more) == 1
    assert drawn.nodes[more[0]]["more"] == 35 and drawn.nodes[more[0]]["hidden"] == 35
    assert {drawn.nodes[v]["visits"] for v in kids if v not in more} == {36, 37, 38, 39, 40}
    assert "+35 more" in to_dot(drawn)


def test_small_trees_are_drawn_as_they_are():
    tree = random_tree(60, seed=3)
    assert to_dot(tree) == to_dot(tree, max_nodes=MAX_DRAWN_NODES)  # under the cap: nothing condensed
    with pytest.raises(ValueError):
        condense(tree, max_nodes=1)
