"""Dynamic draft trees: grow the tree by estimated path acceptance under a node budget (EAGLE-2,
Li et al. 2024; OPT-Tree, Wang et al. 2024).

A node's value is the product of the conditional acceptance estimates ``c`` along its path
(EAGLE-2's ``V = prod c``; a drafter's confidence stands in for ``c``). If acceptances were
independent, the expected number of tokens a tree gets accepted would be the sum of its nodes'
values (OPT-Tree's objective). Values never grow along a path (``c <= 1``), so the ``max_nodes``
nodes of highest value are closed under taking parents: they form a tree, and that tree maximises
the sum. ``grow`` finds it best-first, asking for the successors of the nodes it keeps only;
``select`` keeps the best nodes of a tree that was expanded more widely (EAGLE-2's re-ranking).
"""

from __future__ import annotations

import heapq
from typing import Callable, Sequence

import torch

from trellis.errors import UsageError
from trellis.tokens import TokenTree

# Successors of a drafted path (root's children for ``()``): ``(token, c)`` with c in (0, 1].
Successors = Callable[[tuple[int, ...]], Sequence[tuple[int, float]]]


def grow(successors: Successors, *, max_nodes: int, max_depth: int) -> tuple[TokenTree, list[float]]:
    """The ``max_nodes`` nodes of highest path value (at most ``max_depth`` deep) and their values.

    Nodes come in the order they were chosen, which is topological; a token proposed twice under one
    parent keeps its first (highest) estimate.
    """
    toks: list[int] = []
    pars: list[int] = []
    values: list[float] = []
    paths: list[tuple[int, ...]] = []
    heap: list[tuple[float, int, int, int]] = []  # (-value, tie-break, parent node, token)
    order = 0

    def push(parent: int, path: tuple[int, ...], value: float) -> None:
        nonlocal order
        seen: set[int] = set()
        for t, c in successors(path):
            if t in seen or not c > 0.0:
                continue
            seen.add(t)
            heapq.heappush(heap, (-value * min(float(c), 1.0), order, parent, int(t)))
            order += 1

    push(-1, (), 1.0)
    while heap and len(toks) < max_nodes:
        neg, _, parent, t = heapq.heappop(heap)
        path = (paths[parent] if parent >= 0 else ()) + (t,)
        toks.append(t)
        pars.append(parent)
        values.append(-neg)
        paths.append(path)
        if len(path) < max_depth:
            push(len(toks) - 1, path, -neg)
    return TokenTree(torch.tensor(toks, dtype=torch.long), torch.tensor(pars, dtype=torch.long)), values


def select(tree: TokenTree, values: Sequence[float], max_nodes: int) -> tuple[TokenTree, list[int]]:
    """Keep the ``max_nodes`` nodes of ``tree`` with the highest ``values`` (ties: earlier nodes).

    ``values`` must not grow from a parent to its child, so the kept nodes form a tree. Returns it
    (nodes in their original order, so still topological) and the kept nodes' old indices.
    """
    n = len(tree)
    if n <= max_nodes:
        return tree, list(range(n))
    keep = sorted(sorted(range(n), key=lambda i: (-values[i], i))[:max_nodes])
    index = {old: new for new, old in enumerate(keep)}
    pars = tree.parents.tolist()
    if any(pars[i] >= 0 and pars[i] not in index for i in keep):
        raise UsageError("select(): a child's value exceeds its parent's")
    new_pars = [-1 if pars[i] < 0 else index[pars[i]] for i in keep]
    return TokenTree(tree.tokens[keep], torch.tensor(new_pars, dtype=torch.long)), keep
