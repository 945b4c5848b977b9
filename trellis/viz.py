"""Draw explored search trees (``SearchResult.tree``): DOT text, and SVG/PNG/PDF through graphviz's
``dot`` binary when it is installed, else matplotlib (an optional dependency, imported here only)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import networkx as nx


def _label(data: dict, width: int) -> str:
    text = data.get("text") or ""
    token = data.get("token")
    head = "<root>" if token is None else repr(text)[1:-1][:width] or f"#{token}"
    parts = [head]
    if data.get("logprob") is not None:
        parts.append(f"lp {data['logprob']:.2f}")
    if data.get("visits"):
        parts.append(f"n {data['visits']}")
    if data.get("value") is not None:
        parts.append(f"v {data['value']:.2f}")
    if data.get("entropy") is not None:
        parts.append(f"H {data['entropy']:.2f}")
    return "\n".join(parts)


def _style(data: dict) -> dict[str, str]:
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


def to_dot(tree: nx.DiGraph, *, label_width: int = 20) -> str:
    """DOT source for a search tree: pruned-by-grammar nodes red and dashed, the returned
    hypotheses green (the best bold), EntropyGate pauses orange, dropped candidates gray."""
    lines = ["digraph search {", '  rankdir=TB; node [shape=box, fontsize=10, fontname="monospace"];']
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
    width = max(4.0, 1.3 * (max((x for x, _ in pos.values()), default=0) + 1))
    height = max(3.0, 1.1 * (max((-y for _, y in pos.values()), default=0) + 1))
    fig, ax = plt.subplots(figsize=(min(width, 200), min(height, 200)))
    for a, b in tree.edges():
        (x0, y0), (x1, y1) = pos[a], pos[b]
        ax.plot([x0, x1], [y0, y1], color="gray", lw=0.8, zorder=1)
    colors = {"red": "mistyrose", "darkgreen": "palegreen", "orange": "moccasin", "gray60": "whitesmoke"}
    for node, data in tree.nodes(data=True):
        x, y = pos[node]
        face = colors.get(_style(data).get("color", ""), "white")
        ax.text(x, y, _label(data, label_width), ha="center", va="center", fontsize=7, family="monospace",
                zorder=2, bbox=dict(boxstyle="round", fc=face, ec="gray",
                                    ls="--" if data.get("pruned") else "-"))
    ax.set_axis_off()
    fig.subplots_adjust(left=0.01, right=0.99, top=0.99, bottom=0.01)
    fig.savefig(path)
    plt.close(fig)


def write_tree(tree: nx.DiGraph, path: str | Path, *, engine: str = "auto", label_width: int = 20) -> Path:
    """Write ``tree`` to ``path``; the suffix picks the format (.dot, .svg, .png, .pdf).

    ``engine``: "dot" (graphviz binary), "matplotlib", or "auto" (dot when on PATH). Returns the path.
    """
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt in ("dot", "gv"):
        path.write_text(to_dot(tree, label_width=label_width))
        return path
    if fmt not in ("svg", "png", "pdf"):
        raise ValueError(f"unknown tree format {path.suffix!r}: use .dot, .svg, .png or .pdf")
    if engine not in ("auto", "dot", "matplotlib"):
        raise ValueError(f"engine must be 'auto', 'dot' or 'matplotlib', got {engine!r}")
    dot = shutil.which("dot")
    if engine == "dot" or (engine == "auto" and dot is not None):
        if dot is None:
            raise FileNotFoundError("graphviz's `dot` is not installed")
        subprocess.run([dot, f"-T{fmt}", "-o", str(path)], input=to_dot(tree, label_width=label_width).encode(),
                       check=True)
        return path
    _draw_matplotlib(tree, path, label_width)
    return path
