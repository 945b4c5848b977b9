"""xgrammar's ``TagDispatch`` macro -> regular expressions (``xgrammar_regex`` ASTs) for its free text.

``TagDispatch(("tag", rule), ..., loop_after_dispatch=true, excludes=("s", ...))`` (xgrammar's
``docs/defining_structures/ebnf_grammar.md``): free text until a trigger tag appears, then the
tag's rule, then (looping) free text again. xgrammar defines the language by an automaton
(``cpp/grammar_functor.cc`` ``BuildTagDispatchFSM``, ``cpp/fsm_builder.cc`` ``TrieFSMBuilderImpl``,
snapshot 53da3ff), and this module builds the same automaton and reads its languages off it:

* a trie of the tags and the excludes; Aho-Corasick rows (the textbook goto/failure dynamic
  program) replace the edges of every trie node that ends no tag and no exclude, so the automaton
  tracks the longest suffix of the text that is a trie path. It has no output links: a tag is
  seen only when that longest suffix IS the tag (tags ``b`` and ``abc``: in ``abd`` no ``b`` is
  seen), exactly as xgrammar's automaton sees it;
* an edge into a node whose text ends with an exclude is removed (the text dies there): an exclude
  is seen wherever it ends, also inside a longer trie path or at a tag's end (``b<`` with the
  exclude ``<``), as the installed xgrammar 0.2.9 sees it (found by fuzzing against it; the
  snapshot's builder kills only the exclude's own trie node);
* a tag's end keeps only its trie edges (toward longer tags it begins) and dispatches: the tag's
  rule, then back to the root (``loop_after_dispatch``) or the end of the macro;
* every node that ends no tag and no exclude is final (free text may stop there, a partial tag
  included).

Then, by state elimination (Brzozowski and McCluskey 1963) deepest trie node first, the
languages from the root: ``free`` (to a final node) and, per tag end, ``lead[e]`` (to that end,
where it dispatches). The macro is ``(lead_1 rule_1 | ...)* free`` when it loops and
``free | lead_1 rule_1 | ...`` when it does not. Characters in no tag and no exclude always lead
back to the root, so they form one class.

xgrammar runs the trie over UTF-8 bytes; here it runs over code points. On valid UTF-8 the two
agree (a tag's bytes can only match at a character boundary, and no tag ends inside a character),
so the languages of text agree; xgrammar's free text also admits byte sequences that are not UTF-8
at all, which trellis' languages (sets of Unicode strings) leave out.
"""

from __future__ import annotations

from collections import defaultdict

from trellis.constrain.automata.charsets import cs, cs_neg
from trellis.constrain.frontends.xgrammar_regex import EPS, NOTHING, RNode, simplify

MAX_SIZE = 20_000  # AST nodes of one free-text language past which the macro is refused


class TagDispatchTooLarge(ValueError):
    pass


def _size(node: RNode) -> int:
    if node[0] == "set":
        return 1
    if node[0] == "rep":
        return 1 + _size(node[1])
    return 1 + sum(_size(x) for x in node[1])


def _union(a: RNode | None, b: RNode) -> RNode:
    if a is None or a == NOTHING:
        return b
    if b == NOTHING:
        return a
    if a[0] == "set" and b[0] == "set":
        return ("set", cs(*a[1], *b[1]))
    opts = [*(a[1] if a[0] == "alt" else (a,)), *(b[1] if b[0] == "alt" else (b,))]
    return simplify(("alt", tuple(opts)))


def _cat(*parts: RNode) -> RNode:
    return simplify(("cat", parts))


def _star(a: RNode | None) -> RNode:
    return EPS if a is None or a in (NOTHING, EPS) else ("rep", a, 0, None)


def automaton(tags: list[str], excludes: list[str]) -> tuple[dict, int, dict[int, int], set[int]]:
    """(edges, root, tag end per tag index, exclude ends): ``edges[u]`` maps a code point (or None:
    every code point in no tag and no exclude) to the next trie node."""
    children: list[dict[str, int]] = [{}]
    depth = [0]

    def insert(word: str) -> int:
        u = 0
        for ch in word:
            if ch not in children[u]:
                children.append({})
                depth.append(depth[u] + 1)
                children[u][ch] = len(children) - 1
            u = children[u][ch]
        return u

    tag_end = {i: insert(t) for i, t in enumerate(tags)}
    dead = {insert(x) for x in excludes}
    ends = set(tag_end.values()) | dead
    alphabet = sorted({ch for w in [*tags, *excludes] for ch in w})
    n = len(children)
    order = [0]  # BFS order: a node's failure target is shallower, so its row is final first
    for u in order:
        order.extend(children[u][ch] for ch in sorted(children[u]))
    fail = [0] * n
    delta: list[dict[str, int]] = [dict() for _ in range(n)]
    for u in order:
        for ch in alphabet:
            child = children[u].get(ch)
            fallback = 0 if u == 0 else delta[fail[u]][ch]
            if child is None:
                delta[u][ch] = fallback
            else:
                delta[u][ch] = child
                fail[child] = fallback
    # An exclude is seen wherever it ends, also as a suffix of a longer trie path (``b<`` holds the
    # exclude ``<``), and also at the end of a tag: the installed xgrammar (0.2.9) rejects such text
    # (tags: only the longest suffix, above). A node is dead when its text ends with an exclude.
    for u in order[1:]:
        if fail[u] in dead:
            dead.add(u)
    edges: dict = {}
    for u in range(n):
        row = dict(children[u]) if (u != 0 and u in ends) else dict(delta[u])
        edges[u] = {ord(ch): v for ch, v in row.items() if v not in dead}
        if not (u != 0 and u in ends):
            edges[u][None] = 0  # characters in no tag: the root
    return edges, 0, tag_end, dead


def languages(tags: list[str], excludes: list[str]) -> tuple[RNode, dict[int, RNode]]:
    """(free, lead): ``free`` is the text from the root to where free text may stop; ``lead[i]`` the
    text from the root up to and including the first dispatch on tag ``i`` (``NOTHING`` if it
    can never dispatch). Raises ``TagDispatchTooLarge``."""
    edges, root, tag_end, dead = automaton(tags, excludes)
    tag_ends = set(tag_end.values())
    other = cs_neg(cs(*{ord(ch) for w in [*tags, *excludes] for ch in w}))  # (dead edges are gone from rows)
    fin = "fin"
    # GNFA: R[u][v] regex label; sinks "fin" and ("disp", e)
    R: dict = defaultdict(dict)
    for u, row in edges.items():
        if u in dead:
            continue
        by_target: dict[int, list] = defaultdict(list)
        for c, v in row.items():
            by_target[v].append(c)
        for v, cs_list in by_target.items():
            chars = [c for c in cs_list if c is not None]
            label = ("set", cs(*chars))
            if None in cs_list and other:
                label = ("set", cs(*chars, *other))
            if label[1]:
                R[u][v] = _union(R[u].get(v), label)
        if u in tag_ends:
            R[u][("disp", u)] = EPS
        else:
            R[u][fin] = EPS
    # eliminate every trie node but the root, deepest first
    # (a trie node is numbered after its parent: descending numbers put children first)
    nodes = sorted((u for u in edges if u != root and u not in dead), reverse=True)
    for q in nodes:
        loop = _star(R[q].pop(q, None))
        outs = dict(R.pop(q, {}))
        for p in list(R):
            into = R[p].pop(q, None)
            if into is None:
                continue
            for s, out in outs.items():
                R[p][s] = _union(R[p].get(s), _cat(into, loop, out))
                if _size(R[p][s]) > MAX_SIZE:
                    raise TagDispatchTooLarge(f"its free text's expression grows past {MAX_SIZE} nodes")
    head = _star(R[root].get(root))
    free = _cat(head, R[root].get(fin, NOTHING))
    lead = {i: _cat(head, R[root].get(("disp", e), NOTHING)) for i, e in tag_end.items()}
    return free, lead

