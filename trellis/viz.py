"""Draw explored search trees (``SearchResult.tree``): DOT text, and SVG/PNG/PDF through graphviz's
``dot`` binary when it is installed, else matplotlib (an optional dependency, imported here only).

Drawings stay readable whatever the search did (issue 22: an MCTS tree was written as a
163-megapixel image). A tree of more than ``max_nodes`` nodes (default ``MAX_DRAWN_NODES``) is
``condense``d before drawing: every single-child chain (a rollout) becomes one box labelled with its
text, ellipsized in the middle; then at most ``max_nodes`` boxes are kept, best paths first (the
returned hypotheses, then the highest reward / value, the most visits, the biggest subtree), at most
``max_children`` per parent, and every parent's hidden children become one "+N more" box. On top
of that, images are never more than ``MAX_SIDE_PX`` pixels (points, for SVG/PDF) on a side: graphviz
scales a bigger drawing down (``size``), matplotlib's figure is capped.
"""

from __future__ import annotations

import heapq
import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

import networkx as nx

from trellis.errors import UsageError

__all__ = ["MAX_CHILDREN", "MAX_DRAWN_NODES", "MAX_SIDE_PX", "condense", "to_dot", "write_tree"]

MAX_DRAWN_NODES = 80  # boxes in one drawing: about what fits on a screen or two, labels readable
MAX_CHILDREN = 6  # children drawn under one parent (the rest: one "+N more" box)
MAX_SIDE_PX = 6000  # longest image side: <= 36 megapixels in the worst case
_DPI = 72  # graphviz's own unit: 1 pt = 1 px
_MPL_DPI = 100

# Attributes that make a node worth its own box (its style or label says something): such a node
# is never merged into the middle of a chain (it may end one: the chain then takes its attributes).
_MARKERS = ("returned", "paused", "function_end", "reward", "syntax_error", "rollout")


def _ellipsize(text: str, width: int) -> str:
    """``text`` at most ``width`` characters long, its middle replaced by "…" when cut."""
    if len(text) <= width:
        return text
    if width < 3:
        return text[:width]
    head = width // 2 - 1
    return text[:head] + "…" + text[len(text) - (width - head - 1):]


def _label(data: dict, width: int) -> str:
    if data.get("more"):
        return f"+{data['more']} more\n{data['hidden']} nodes" + (
            f", {data['hidden_pruned']} pruned" if data.get("hidden_pruned") else "")
    text = data.get("text") or ""
    token = data.get("token")
    head = "<root>" if token is None else _ellipsize(repr(text)[1:-1], width) or f"#{token}"
    parts = [head]
    tokens = data.get("collapsed", 1)
    if data.get("logprob") is not None:
        parts.append((f"{tokens} tok, " if tokens > 1 else "") + f"lp {data['logprob']:.2f}")
    elif tokens > 1:
        parts.append(f"{tokens} tok")
    if data.get("visits"):
        parts.append(f"n {data['visits']}")
    if data.get("value") is not None:
        parts.append(f"v {data['value']:.2f}")
    if data.get("entropy") is not None:
        parts.append(f"H {data['entropy']:.2f}")
    return "\n".join(parts)


def _style(data: dict) -> dict[str, str]:
    if data.get("more"):
        return {"color": "gray50", "fontcolor": "gray40", "style": "dotted"}
    if data.get("pruned"):
        return {"color": "red", "fontcolor": "red", "style": "dashed"}
    if data.get("returned") == 0:
        return {"color": "darkgreen", "style": "bold,filled", "fillcolor": "palegreen"}
    if data.get("returned") is not None:
        return {"color": "darkgreen", "style": "filled", "fillcolor": "honeydew"}
    if data.get("paused"):
        return {"color": "orange", "style": "filled", "fillcolor": "moccasin"}
    if data.get("kept") is False:
        return {"color": "gray60", "fontcolor": "gray40"}
    return {}


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


# ---------------------------------------------------------------------------------- condensing
def _interior_ok(data: dict) -> bool:
    """Can this node sit inside a merged chain (its own attributes then go unshown)?"""
    return not data.get("pruned") and data.get("kept") is not False and not data.get("finished") and not any(
        data.get(k) is not None and data.get(k) is not False for k in _MARKERS)


def _collapse_chains(tree: nx.DiGraph) -> tuple[nx.DiGraph, dict[int, int]]:
    """Every maximal single-child chain as one node (keyed by its first node). Returns the chain
    graph and, per chain node, how many original nodes its subtree holds."""
    out = nx.DiGraph()
    roots = [v for v in tree.nodes if tree.in_degree(v) == 0]
    stack: list[tuple[int, int | None]] = [(r, None) for r in roots]
    while stack:
        head, parent = stack.pop()
        members = [head]
        node = head
        # a chain grows through a node with exactly one child, never through a root (the prompt)
        # or a node whose attributes would be lost; a pruned child (unexplored) keeps its own box
        while (tree.out_degree(node) == 1 and tree.in_degree(node) == 1 and _interior_ok(tree.nodes[node])):
            child = next(iter(tree.successors(node)))
            if tree.nodes[child].get("pruned"):
                break
            members.append(child)
            node = child
        first, last = tree.nodes[head], tree.nodes[node]
        data: dict[str, Any] = dict(last)
        lps = [tree.nodes[m].get("logprob") for m in members]
        data.update(text="".join(tree.nodes[m].get("text") or "" for m in members), collapsed=len(members),
                    token=first.get("token"), depth=first.get("depth"),
                    logprob=math.fsum(lps) if all(lp is not None for lp in lps) else None,
                    visits=first.get("visits"), value=first.get("value") if len(members) > 1 else last.get("value"))
        out.add_node(head, **data)
        if parent is not None:
            out.add_edge(parent, head)
        stack.extend((c, head) for c in tree.successors(node))
    size: dict[int, int] = {}
    for v in reversed(list(nx.topological_sort(out))):
        size[v] = out.nodes[v]["collapsed"] + sum(size[c] for c in out.successors(v))
    return out, size


def _priorities(chains: nx.DiGraph, size: dict[int, int]) -> dict[int, tuple]:
    """Sort key per chain node (smaller = drawn first): the best returned rank below it, then the
    best reward / value below it, its visits, its subtree's size, its score."""
    best_rank: dict[int, float] = {}
    best_value: dict[int, float] = {}
    for v in reversed(list(nx.topological_sort(chains))):
        d = chains.nodes[v]
        rank = d.get("returned")
        own = d.get("reward", d.get("value"))
        best_rank[v] = min([float(rank) if rank is not None else math.inf]
                           + [best_rank[c] for c in chains.successors(v)])
        best_value[v] = max([float(own) if own is not None else -math.inf]
                            + [best_value[c] for c in chains.successors(v)])
    key = {}
    for v, d in chains.nodes(data=True):
        score = d.get("score")
        key[v] = (best_rank[v], -best_value[v], -(d.get("visits") or 0), -size[v],
                  -score if score is not None else math.inf, v)
    return key


def condense(tree: nx.DiGraph, *, max_nodes: int = MAX_DRAWN_NODES, max_children: int = MAX_CHILDREN) -> nx.DiGraph:
    """A drawable summary of ``tree`` with at most ``max_nodes`` nodes (see the module docstring).

    Nodes are the chains' first original node ids; a chain node carries its last node's attributes
    except ``text`` (the chain's text), ``collapsed`` (its length in tokens), ``logprob`` (their sum),
    ``token``, ``depth``, ``visits`` and ``value`` (its first node's: where the search chose it).
    A "+N more" node has ``more`` (hidden children) and ``hidden`` (hidden original nodes, of which
    ``hidden_pruned`` pruned). Raises ``ValueError`` for ``max_nodes`` < 2 (a root and one "+N more")
    or ``max_children`` < 1."""
    if max_nodes < 2:
        raise UsageError(f"max_nodes must be >= 2 (the root and a '+N more' box), got {max_nodes}")
    if max_children < 1:
        raise UsageError(f"max_children must be >= 1, got {max_children}")
    chains, size = _collapse_chains(tree)
    roots = [v for v in chains.nodes if chains.in_degree(v) == 0]
    key = _priorities(chains, size)
    kept: set[int] = set()
    kids_kept: dict[int, int] = {}
    drawn = 0  # boxes so far: kept nodes + one "+N more" per kept node with hidden children
    for r in sorted(roots, key=key.__getitem__):
        cost = 1 + (chains.out_degree(r) > 0)
        if drawn + cost <= max_nodes:
            kept.add(r)
            kids_kept[r] = 0
            drawn += cost
    heap = [(key[c], c) for r in kept for c in chains.successors(r)]
    heapq.heapify(heap)
    while heap:
        _, c = heapq.heappop(heap)
        p = next(iter(chains.predecessors(c)))
        if kids_kept[p] >= max_children:
            continue
        # adding c: one box, plus its own "+N more" if it has children; p's "+N more" goes away
        # when c was the last hidden child
        cost = 1 + (chains.out_degree(c) > 0) - (kids_kept[p] + 1 == chains.out_degree(p))
        if drawn + cost > max_nodes:
            continue
        kept.add(c)
        kids_kept[p] += 1
        kids_kept[c] = 0
        drawn += cost
        for g in chains.successors(c):
            heapq.heappush(heap, (key[g], g))
    out = nx.DiGraph()
    for v in sorted(kept, key=lambda v: (chains.nodes[v].get("depth") or 0, v)):
        out.add_node(v, **chains.nodes[v])
    out.add_edges_from((a, b) for a, b in chains.edges if a in kept and b in kept)
    next_id = max(tree.nodes, default=-1) + 1
    for v in sorted(kept):
        hidden = [c for c in chains.successors(v) if c not in kept]
        if hidden:
            below = [u for c in hidden for u in nx.descendants(chains, c) | {c}]
            out.add_node(next_id, token=None, text="", more=len(hidden), hidden=sum(size[c] for c in hidden),
                         hidden_pruned=sum(bool(chains.nodes[u].get("pruned")) for u in below),
                         depth=(chains.nodes[v].get("depth") or 0) + 1, collapsed=0)
            out.add_edge(v, next_id)
            next_id += 1
    return out


def _drawable(tree: nx.DiGraph, max_nodes: int | None, max_children: int) -> nx.DiGraph:
    """``tree`` itself when it is within the cap (small trees are drawn exactly), else condensed."""
    if max_nodes is None or tree.number_of_nodes() <= max_nodes:
        return tree
    return condense(tree, max_nodes=max_nodes, max_children=max_children)


# ---------------------------------------------------------------------------------- output
def to_dot(tree: nx.DiGraph, *, label_width: int = 20, max_nodes: int | None = None,
           max_children: int = MAX_CHILDREN) -> str:
    """DOT source for a search tree: pruned-by-grammar nodes red and dashed, the returned
    hypotheses green (the best bold), EntropyGate pauses orange, dropped candidates gray, "+N more"
    summaries dotted. ``max_nodes``: condense a bigger tree first (``None``: every node, the
    default here; ``write_tree`` caps). The graph asks graphviz for at most ``MAX_SIDE_PX`` a side."""
    tree = _drawable(tree, max_nodes, max_children)
    side = f"{MAX_SIDE_PX / _DPI:g}"
    lines = ["digraph search {",
             f'  graph [size="{side},{side}", dpi={_DPI}];',  # a bigger drawing is scaled down, never up
             '  rankdir=TB; node [shape=box, fontsize=10, fontname="monospace"];']
    for node, data in tree.nodes(data=True):
        attrs = {"label": _label(data, label_width), **_style(data)}
        if data.get("finished"):
            attrs["peripheries"] = "2"
        lines.append(f"  n{node} [" + ", ".join(f"{k}={_quote(v)}" for k, v in attrs.items()) + "];")
    for a, b in tree.edges():
        lines.append(f"  n{a} -> n{b};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _layout(tree: nx.DiGraph) -> dict[int, tuple[float, float]]:
    """A tidy top-down layout: leaves on consecutive x, parents centred over their children."""
    pos: dict[int, tuple[float, float]] = {}
    nxt = [0.0]

    def place(node: int, depth: int) -> float:
        kids = sorted(tree.successors(node))
        x = sum(place(k, depth + 1) for k in kids) / len(kids) if kids else nxt[0]
        if not kids:
            nxt[0] += 1.0
        pos[node] = (x, -float(depth))
        return x

    for root in (n for n in tree.nodes if tree.in_degree(n) == 0):
        place(root, 0)
    return pos


def _draw_matplotlib(tree: nx.DiGraph, path: Path, label_width: int) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("drawing a tree needs graphviz's `dot` or matplotlib (pip install matplotlib)") from e
    pos = _layout(tree)
    cap = MAX_SIDE_PX / _MPL_DPI  # inches: the pixel cap at the dpi the figure is saved with
    width = max(4.0, 1.3 * (max((x for x, _ in pos.values()), default=0) + 1))
    height = max(3.0, 1.1 * (max((-y for _, y in pos.values()), default=0) + 1))
    fig, ax = plt.subplots(figsize=(min(width, cap), min(height, cap)))
    for a, b in tree.edges():
        (x0, y0), (x1, y1) = pos[a], pos[b]
        ax.plot([x0, x1], [y0, y1], color="gray", lw=0.8, zorder=1)
    colors = {"red": "mistyrose", "darkgreen": "palegreen", "orange": "moccasin", "gray60": "whitesmoke"}
    for node, data in tree.nodes(data=True):
        x, y = pos[node]
        style = _style(data)
        face = colors.get(style.get("color", ""), "white")
        ls = "--" if data.get("pruned") else ":" if data.get("more") else "-"
        ax.text(x, y, _label(data, label_width), ha="center", va="center", fontsize=7, family="monospace",
                zorder=2, bbox=dict(boxstyle="round", fc=face, ec="gray", ls=ls))
    ax.set_axis_off()
    fig.subplots_adjust(left=0.01, right=0.99, top=0.99, bottom=0.01)
    fig.savefig(path, dpi=_MPL_DPI)
    plt.close(fig)


def write_tree(tree: nx.DiGraph, path: str | Path, *, engine: str = "auto", label_width: int = 20,
               max_nodes: int | None = MAX_DRAWN_NODES, max_children: int = MAX_CHILDREN) -> Path:
    """Write ``tree`` to ``path``; the suffix picks the format (.dot, .svg, .png, .pdf).

    A tree of more than ``max_nodes`` nodes is ``condense``d to at most ``max_nodes`` boxes
    (default ``MAX_DRAWN_NODES`` = 80, at most ``max_children`` = 6 under one parent); ``None``
    draws every node. Images are at most ``MAX_SIDE_PX`` = 6000 px (pt for SVG/PDF) on a side.
    ``engine``: "dot" (graphviz binary), "matplotlib", or "auto" (dot when on PATH). Returns the path.
    """
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    drawn = _drawable(tree, max_nodes, max_children)
    if fmt in ("dot", "gv"):
        path.write_text(to_dot(drawn, label_width=label_width))
        return path
    if fmt not in ("svg", "png", "pdf"):
        raise UsageError(f"unknown tree format {path.suffix!r}: use .dot, .svg, .png or .pdf")
    if engine not in ("auto", "dot", "matplotlib"):
        raise UsageError(f"engine must be 'auto', 'dot' or 'matplotlib', got {engine!r}")
    dot = shutil.which("dot")
    if engine == "dot" or (engine == "auto" and dot is not None):
        if dot is None:
            raise FileNotFoundError("graphviz's `dot` is not installed")
        subprocess.run([dot, f"-T{fmt}", "-o", str(path)], input=to_dot(drawn, label_width=label_width).encode(),
                       check=True)
        return path
    _draw_matplotlib(drawn, path, label_width)
    return path
