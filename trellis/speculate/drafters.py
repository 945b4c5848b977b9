"""Training-free drafters: prompt lookup, token recycling, grammar-forced tokens, a draft model, and
a composite that merges their proposals into one tree under a node budget."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from trellis.constrain.base import advance_many, forced_tokens
from trellis.decoder import Decoder, Hypothesis
from trellis.errors import UsageError
from trellis.lm_head import LMHead
from trellis.sampling import sample
from trellis.speculate.base import Draft, Drafter, LearningDrafter, drafter_name
from trellis.speculate.draft_exit import AdaptiveDraftExit
from trellis.speculate.tree import grow, select
from trellis.tokens import TokenTree


def _paths_draft(paths: Sequence[Sequence[int]], source: str, max_nodes: int) -> Draft:
    """A deterministic draft from token paths (shared prefixes merged), cut at ``max_nodes``."""
    tree = TokenTree.from_paths([list(p) for p in paths if p])
    if len(tree) > max_nodes:
        tree = TokenTree(tree.tokens[:max_nodes], tree.parents[:max_nodes])  # topological: a prefix stays a tree
    return Draft(tree, None, (source,) * len(tree))


@dataclass(frozen=True)
class PromptLookup:
    """Prompt lookup decoding (Saxena 2023; transformers' ``prompt_lookup_num_tokens``): find the most
    recent earlier occurrences of the last n tokens (n from ``max_ngram`` down to ``min_ngram``) in
    prompt + output and propose what followed them; several matches become branches of a tree."""

    max_ngram: int = 3
    min_ngram: int = 1
    max_matches: int = 4
    name: str = "prompt-lookup"

    def draft(self, decoder: Decoder, hyp: Hypothesis, *, max_nodes: int, max_depth: int) -> Draft:
        seq = np.asarray(hyp.tokens, dtype=np.int64)
        n_tok = len(seq)
        for n in range(min(self.max_ngram, n_tok - 1), self.min_ngram - 1, -1):
            pattern = seq[-n:]
            windows = np.lib.stride_tricks.sliding_window_view(seq[:-1], n)  # [L-n, n], excludes the suffix itself
            starts = np.flatnonzero((windows == pattern).all(axis=1))[::-1]  # most recent first
            paths: list[list[int]] = []
            for s in starts:
                cont = seq[s + n: s + n + max_depth].tolist()
                if cont and cont not in paths:
                    paths.append(cont)
                if len(paths) >= self.max_matches:
                    break
            if paths:
                return _paths_draft(paths, self.name, max_nodes)
        return Draft.empty()


@dataclass(frozen=True)
class GrammarForced:
    """The continuation the constraint forces (jump-forward), proposed as a chain and verified by
    the model like any other draft — never inserted, so non-canonical tokenisations cannot skew the
    output distribution.

    ``then``: a drafter asked to continue from the chain's end (the hypothesis with the forced
    tokens appended), or from ``hyp`` itself when nothing is forced. Without it a round ends where
    the structure does: after ``{"name":"`` the value to copy is exactly what prompt lookup finds,
    but only once the forced key is part of its context.
    """

    then: Drafter | None = None
    name: str = "grammar-forced"

    def draft(self, decoder: Decoder, hyp: Hypothesis, *, max_nodes: int, max_depth: int) -> Draft:
        toks = forced_tokens(decoder.constraint, hyp.state)[: min(max_depth, max_nodes)] if decoder.constrained else []
        if not toks:
            return self.then.draft(decoder, hyp, max_nodes=max_nodes, max_depth=max_depth) if self.then else Draft.empty()
        chain = _paths_draft([toks], self.name, max_nodes)
        room = min(max_nodes, max_depth) - len(toks)
        if self.then is None or room <= 0:
            return chain
        state = advance_many(decoder.constraint, hyp.state, toks)
        if state is None:  # forced_tokens promises the chain is allowed; stay safe if a constraint errs
            return chain
        end = replace(hyp, tokens=hyp.tokens + tuple(toks), state=state)
        sub = self.then.draft(decoder, end, max_nodes=max_nodes - len(toks), max_depth=max_depth - len(toks))
        if len(sub) == 0:
            return chain
        # Graft: the sub-draft's roots hang under the chain's last node; its indices shift by len(toks).
        k = len(toks)
        parents = torch.where(sub.tree.parents < 0, torch.full_like(sub.tree.parents, k - 1), sub.tree.parents + k)
        tree = TokenTree(torch.cat([chain.tree.tokens, sub.tree.tokens]), torch.cat([chain.tree.parents, parents]))
        sources = (self.name,) * k + (sub.sources or (drafter_name(self.then),) * len(sub))
        return Draft(tree, None, sources)

    def observe(self, hyp: Hypothesis, draft: Draft, target: Tensor, path: Sequence[int]) -> None:
        if isinstance(self.then, LearningDrafter):
            self.then.observe(hyp, draft, target, path)


@dataclass
class TokenRecycling:
    """Token Recycling (Luo et al. 2024, "Turning Trash into Treasure"): an adjacency matrix M [V, k]
    holds, for each token, the top-k tokens the target predicted after it in past verifications,
    with the target's probabilities P [V, k]; both are updated online from every verification.

    ``dynamic=True`` grows each draft best-first by estimated path acceptance (the product of P
    along the path; ``trellis.speculate.tree.grow``, EAGLE-2 style), so the node budget goes where
    the target was confident. ``dynamic=False`` expands M breadth-first along the paper's static
    ``template``: ``template[i] = (parent, rank)`` makes node i the ``rank``-th successor of node
    ``parent`` (-1 = the last committed token).
    """

    vocab_size: int
    k: int = 8
    template: tuple[tuple[int, int], ...] = ((-1, 0), (-1, 1), (-1, 2), (0, 0), (0, 1), (1, 0), (3, 0), (3, 1),
                                            (4, 0), (6, 0), (9, 0), (10, 0))
    dynamic: bool = True
    name: str = "recycling"
    matrix: Tensor = field(init=False, repr=False)
    probs: Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for i, (p, r) in enumerate(self.template):
            if not -1 <= p < i or not 0 <= r < self.k:
                raise UsageError(f"template node {i}: parent {p} / rank {r} out of range")
        self.matrix = torch.full((self.vocab_size, self.k), -1, dtype=torch.long)  # [V, k], -1 = unknown
        self.probs = torch.zeros(self.vocab_size, self.k)  # [V, k] target probability of each successor

    def draft(self, decoder: Decoder, hyp: Hypothesis, *, max_nodes: int, max_depth: int) -> Draft:
        if self.dynamic:
            return self._grown(hyp.tokens[-1], max_nodes=max_nodes, max_depth=max_depth)
        toks: list[int] = []
        pars: list[int] = []
        depth: list[int] = []
        index: dict[int, int] = {}  # template node -> tree node
        last = hyp.tokens[-1]
        for i, (p, r) in enumerate(self.template):
            if len(toks) >= max_nodes:
                break
            if p >= 0 and p not in index:
                continue
            d = 0 if p < 0 else depth[index[p]] + 1
            if d >= max_depth:
                continue
            src = last if p < 0 else toks[index[p]]
            t = int(self.matrix[src, r]) if src < self.vocab_size else -1
            if t < 0 or any(toks[j] == t and pars[j] == (-1 if p < 0 else index[p]) for j in range(len(toks))):
                continue
            index[i] = len(toks)
            toks.append(t)
            pars.append(-1 if p < 0 else index[p])
            depth.append(d)
        if not toks:
            return Draft.empty()
        tree = TokenTree(torch.tensor(toks, dtype=torch.long), torch.tensor(pars, dtype=torch.long))
        return Draft(tree, None, (self.name,) * len(toks))

    def _grown(self, last: int, *, max_nodes: int, max_depth: int) -> Draft:
        def successors(path: tuple[int, ...]) -> list[tuple[int, float]]:
            src = path[-1] if path else last
            if src >= self.vocab_size:
                return []
            return [(t, p) for t, p in zip(self.matrix[src].tolist(), self.probs[src].tolist()) if t >= 0]

        tree, _ = grow(successors, max_nodes=max_nodes, max_depth=max_depth)
        return Draft(tree, None, (self.name,) * len(tree)) if len(tree) else Draft.empty()

    def observe(self, hyp: Hypothesis, draft: Draft, target: Tensor, path: Sequence[int]) -> None:
        """Recycle the verification: the target's top-k after each node become that token's successors."""
        k = min(self.k, target.shape[-1])
        top = torch.topk(target, k, dim=-1)  # [N+1, k]; target holds log-probabilities
        values = top.values.cpu()  # the tables live on the host: the drafter reads them with .tolist()
        ids = top.indices.cpu().masked_fill(~torch.isfinite(values), -1)
        rows = torch.tensor([hyp.tokens[-1]] + draft.tree.tokens.tolist(), dtype=torch.long)  # token at each row
        ok = rows < self.vocab_size
        self.matrix[rows[ok], :k] = ids[ok]
        self.probs[rows[ok], :k] = values[ok].exp()


@dataclass
class ModelDrafter:
    """A smaller model sharing the target's tokenizer drafts a chain from the SAME masked, warped
    distribution (same constraint, temperature, top-k/p), so rejection sampling stays exact.

    ``model`` is anything ``trellis.hf_lm.language_model`` accepts (a transformers model gets its
    own KV-cached ``HFLanguageModel``). Greedy targets get argmax drafts; sampling targets get
    samples and their distributions in ``Draft.probs``.

    A chain stops after its first token whose draft probability is below ``stopping``'s adaptive
    threshold (Draft & Verify's draft-exiting, ``trellis.speculate.draft_exit``): a draft forward
    spent on a token the target will likely reject costs more than the verification row it fills.
    ``stopping=None`` drafts to the round's length cap.

    ``width > 1`` drafts a dynamic tree instead (EAGLE-2, Li et al. 2024): each depth expands the
    ``width`` most probable frontier nodes (value = product of draft probabilities along the path)
    into their ``width`` likeliest tokens, with ONE draft forward over the whole tree per depth
    (``tree_logits``), and the ``max_nodes`` nodes of highest value are verified
    (``trellis.speculate.tree.select``). Such drafts are deterministic proposals, lossless under
    every verifier that takes trees.
    """

    model: Any
    generator: torch.Generator | None = None
    width: int = 1
    name: str = "draft-model"
    stopping: AdaptiveDraftExit | None = field(default_factory=AdaptiveDraftExit)
    _lm: Any = field(init=False, repr=False, default=None)
    _capped: bool = field(init=False, repr=False, default=False)  # the last chain ran to its cap

    def __post_init__(self) -> None:
        from trellis.hf_lm import language_model

        if self.width < 1:
            raise UsageError(f"width must be >= 1, got {self.width}")
        self._lm = language_model(self.model)

    @property
    def lm(self) -> Any:
        """The language model it drafts with (``language_model(model)``: its own KV cache)."""
        return self._lm

    def draft(self, decoder: Decoder, hyp: Hypothesis, *, max_nodes: int, max_depth: int) -> Draft:
        dec = replace(decoder, lm=self._lm)
        if self.width > 1:
            return self._tree(dec, hyp, max_nodes=max_nodes, max_depth=max_depth)
        n = min(max_nodes, max_depth)
        greedy = decoder.temperature == 0
        toks: list[int] = []
        probs: list[Tensor] = []
        h = hyp
        self._capped = False
        for k in range(n):
            lp = dec.log_probs([h])  # [1, V]
            if not torch.isfinite(lp).any():
                break
            t = int(lp[0].argmax()) if greedy else int(sample(lp, self.generator)[0])
            if not greedy:
                probs.append(lp[0].exp())
            toks.append(t)
            if t in decoder.eos:
                break
            if k == n - 1:
                self._capped = True
            elif self.stopping is not None and self.stopping.stop(math.exp(float(lp[0].max()))):
                break
            h = dec.extend(h, t)
        if not toks:
            return Draft.empty()
        tree = TokenTree.chain(toks)
        if greedy:
            return Draft(tree, None, (self.name,) * len(toks))
        rows = probs + [torch.zeros(self._lm.vocab_size, device=probs[-1].device)]  # the last node's children are not drafted
        return Draft(tree, torch.stack(rows), (self.name,) * len(toks))  # probs [N+1, V_draft]

    def observe(self, hyp: Hypothesis, draft: Draft, target: Tensor, path: Sequence[int]) -> None:
        """Adapt the chain's stopping threshold to how much of it the target accepted."""
        if self.stopping is None or self.width > 1:
            return
        mine = [s == self.name for s in draft.sources] if draft.sources is not None else [True] * len(draft)
        self.stopping.update(sum(mine[i] for i in path), sum(mine), capped=self._capped)

    def _tree(self, dec: Decoder, hyp: Hypothesis, *, max_nodes: int, max_depth: int) -> Draft:
        toks: list[int] = []
        pars: list[int] = []
        values: list[float] = []
        frontier = [-1]  # nodes to expand next (-1 = the committed prefix)
        for _ in range(min(max_depth, max_nodes)):
            tree = TokenTree(torch.tensor(toks, dtype=torch.long), torch.tensor(pars, dtype=torch.long))
            lp, _ = dec.tree_log_probs(hyp, tree)  # [n+1, V], one draft forward for the whole tree
            added: list[int] = []
            for f in frontier:
                top = torch.topk(lp[f + 1], min(self.width, lp.shape[-1]))
                base = 1.0 if f < 0 else values[f]
                for v, t in zip(top.values.tolist(), top.indices.tolist()):
                    if v == float("-inf"):
                        break
                    added.append(len(toks))
                    toks.append(int(t))
                    pars.append(f)
                    values.append(base * math.exp(v))
            # EOS ends a path; the verifier proposes it where it is exact
            frontier = sorted((i for i in added if toks[i] not in dec.eos), key=lambda i: -values[i])[: self.width]
            # Descendants are worth at most their frontier ancestor: once the best frontier node
            # ranks below the max_nodes-th value, deeper levels cannot change the selection.
            if not frontier or (len(toks) >= max_nodes
                                and values[frontier[0]] <= sorted(values, reverse=True)[max_nodes - 1]):
                break
        if not toks:
            return Draft.empty()
        full = TokenTree(torch.tensor(toks, dtype=torch.long), torch.tensor(pars, dtype=torch.long))
        kept, _ = select(full, values, max_nodes)
        return Draft(kept, None, (self.name,) * len(kept))


def default_skip_sets(num_layers: int) -> list[list[int]]:
    """Candidate layer subsets for self-speculation: all layers but a contiguous block of 1/9, 1/6
    or 2/9 of them, starting a third of the way in.

    Small models have little depth to spare: on Gemma 3 270M (18 layers, 2026-11-22, greedy, 4-token
    drafts) skipping layers 6-9 kept 2.4 of 4 drafted tokens accepted, skipping 10-13 0.14, and the
    aggressive sets of large-model papers (half the layers, every other layer) ~0."""
    start = max(1, num_layers // 3)  # layer 0 holds the cache length: always kept
    sets = []
    for width in (max(1, num_layers // 9), max(1, num_layers // 6), max(1, (2 * num_layers) // 9)):
        skip = set(range(start, min(num_layers - 1, start + width)))
        sets.append([i for i in range(num_layers) if i not in skip])
    return [list(x) for x in dict.fromkeys(tuple(x) for x in sets) if len(x) < num_layers] or [list(range(num_layers))]


_DEFAULT_HEADS: dict[tuple[str, int], tuple[int, ...]] = {}  # (vocab fingerprint, size) -> ids


def default_head(vocab: Any, size: int) -> list[int]:
    """Likely token ids for a draft head: the ``size`` lowest-id text tokens (BPE/SentencePiece
    ids follow merge order, roughly frequency) plus every single-character token (SentencePiece
    puts those last: Gemma's ``.`` is 236761). Memoised per vocabulary: the scan takes ~0.4 s on
    Gemma's 262k tokens, and a LayerSkip drafter is often made per generation."""
    key = (vocab.fingerprint(), size)
    if key not in _DEFAULT_HEADS:
        ids = [i for i, t in enumerate(vocab.tokens) if t and i not in vocab.special and i not in vocab.eos]
        short = [i for i in ids if len(vocab.tokens[i].decode("utf-8", "ignore")) == 1]
        _DEFAULT_HEADS[key] = tuple(sorted(set(ids[:size]) | set(short)))
    return list(_DEFAULT_HEADS[key])


@dataclass
class LayerSkip:
    """Self-speculative drafting: the target itself with layers skipped drafts a chain (Draft &
    Verify, Zhang et al. 2024; SWIFT, Xia et al. 2025). No second model is held in memory.

    Each candidate layer subset is a ``HFLanguageModel`` view sharing the target's weights (own KV
    cache) whose LM head is cut to ``head_size`` likely tokens plus the prompt's tokens: on Gemma 3
    270M the 262k-row head is ~63% of a decode step, so a 16k-head draft step without 2-4 of the 18
    layers reads about a third of a target step's weights. All views share one ``LMHead``. Each
    arm's chain stops on low draft confidence (``adaptive_exit``: Draft & Verify's draft-exiting,
    ``ModelDrafter.stopping``). The subset is chosen online by UCB1 on the observed reward
    (accepted + 1) / (1 + cost x drafted) per round, cost = the view's estimated step cost relative
    to the target's (the SWIFT idea of optimising the skip set from acceptance, with a bandit
    instead of Bayesian optimisation). Drafts come from the Decoder's masked, warped distribution
    (restricted to the head), so rejection sampling stays exact.
    """

    model: Any  # the target's transformers model
    candidates: Sequence[Sequence[int]] | None = None
    head_size: int = 16384
    generator: torch.Generator | None = None
    exploration: float = 0.5
    adaptive_exit: bool = True  # each arm's chain stops on low confidence (ModelDrafter.stopping)
    name: str = "layer-skip"
    _arms: list[ModelDrafter] = field(init=False, repr=False, default_factory=list)
    _depth: list[float] = field(init=False, repr=False, default_factory=list)  # kept layers / all layers
    _pulls: list[int] = field(init=False, repr=False, default_factory=list)
    _reward: list[float] = field(init=False, repr=False, default_factory=list)
    _last: int = field(init=False, repr=False, default=-1)
    _head: LMHead | None = field(init=False, repr=False, default=None)  # shared by every arm
    _dims: tuple[int, int, int] = field(init=False, repr=False, default=(0, 0, 0))

    def __post_init__(self) -> None:
        from trellis.hf_lm import HFLanguageModel

        cfg = self.model.config.get_text_config(decoder=True) if hasattr(self.model.config, "get_text_config") \
            else self.model.config
        n = int(cfg.num_hidden_layers)
        self.candidates = [list(c) for c in (self.candidates or default_skip_sets(n))]
        for c in self.candidates:
            self._arms.append(ModelDrafter(HFLanguageModel(self.model, layers=c), generator=self.generator,
                                           name=self.name,
                                           stopping=AdaptiveDraftExit() if self.adaptive_exit else None))
            self._depth.append(len(c) / n)
        v, hdim = self.model.get_output_embeddings().weight.shape
        self._dims = (sum(p.numel() for p in self.model.parameters()) - v * hdim, v, hdim)  # body, V, H
        self._pulls = [0] * len(self._arms)
        self._reward = [0.0] * len(self._arms)

    def cost(self, i: int) -> float:
        """Estimated draft step cost of candidate ``i`` relative to a target step (weights read)."""
        body, v, hdim = self._dims
        head = len(self._head.ids) if self._head is not None else v
        return (body * self._depth[i] + head * hdim) / (body + v * hdim)

    @property
    def arms(self) -> tuple[ModelDrafter, ...]:
        """The drafter of each candidate layer set (``stopping`` holds its exit threshold)."""
        return tuple(self._arms)

    @property
    def choice(self) -> list[int]:
        """The layer subset the bandit has pulled most."""
        return list(self.candidates[max(range(len(self._arms)), key=self._pulls.__getitem__)])  # type: ignore[index]

    def _pick(self) -> int:
        for i, n in enumerate(self._pulls):
            if n == 0:
                return i
        total = sum(self._pulls)
        return max(range(len(self._arms)), key=lambda i: self._reward[i] / self._pulls[i]
                   + self.exploration * math.sqrt(math.log(total) / self._pulls[i]))

    def draft(self, decoder: Decoder, hyp: Hypothesis, *, max_nodes: int, max_depth: int) -> Draft:
        if decoder.vocab is not None:
            if self._head is None:
                self._head = self._arms[0].lm.set_head(default_head(decoder.vocab, self.head_size))
                for arm in self._arms[1:]:
                    arm.lm.set_head(self._head)  # one copy of the rows for every arm
            # The prompt's tokens, and tokens the target chose outside the head, are likely next.
            self._head.grow(hyp.tokens)
        self._last = self._pick()
        return self._arms[self._last].draft(decoder, hyp, max_nodes=max_nodes, max_depth=max_depth)

    def observe(self, hyp: Hypothesis, draft: Draft, target: Tensor, path: Sequence[int]) -> None:
        if self._last < 0 or len(draft) == 0:
            return
        i = self._last
        self._pulls[i] += 1
        self._reward[i] += (len(path) + 1) / (1 + self.cost(i) * len(draft))
        self._arms[i].observe(hyp, draft, target, path)


@dataclass
class Composite:
    """Merge several drafters' proposals into one deterministic tree under the node budget.

    Drafters are asked in order; each gets the budget the previous ones left. Verification treats
    the merged proposals as deterministic (q = one-hot), which is lossless whatever produced them.
    """

    drafters: Sequence[Drafter]
    name: str = "composite"

    def draft(self, decoder: Decoder, hyp: Hypothesis, *, max_nodes: int, max_depth: int) -> Draft:
        paths: list[tuple[list[int], str]] = []
        used = 0
        for d in self.drafters:
            if used >= max_nodes:
                break
            sub = d.draft(decoder, hyp, max_nodes=max_nodes - used, max_depth=max_depth)
            if len(sub) == 0:
                continue
            toks = sub.tree.tokens.tolist()
            srcs = sub.sources or (drafter_name(d),) * len(sub)
            kids = {i for i in sub.tree.parents.tolist() if i >= 0}
            for leaf in (i for i in range(len(sub)) if i not in kids):
                paths.append(([toks[j] for j in sub.tree.path_to(leaf)], srcs[leaf]))
            used += len(sub)
        if not paths:
            return Draft.empty()
        tree = TokenTree.from_paths([p for p, _ in paths])
        if len(tree) > max_nodes:
            tree = TokenTree(tree.tokens[:max_nodes], tree.parents[:max_nodes])
        # Attribute each merged node to the first drafter whose path contains it.
        sources: list[str] = []
        for i in range(len(tree)):
            path = [int(tree.tokens[j]) for j in tree.path_to(i)]
            sources.append(next(s for p, s in paths if p[: len(path)] == path))
        return Draft(tree, None, tuple(sources))

    def observe(self, hyp: Hypothesis, draft: Draft, target: Tensor, path: Sequence[int]) -> None:
        for d in self.drafters:
            if isinstance(d, LearningDrafter):
                d.observe(hyp, draft, target, path)


def drafter_from_name(name: str, *, vocab_size: int, generator: torch.Generator | None = None,
                      model: Any = None) -> Drafter:
    """The drafter the CLI's ``--speculate`` names: ``prompt-lookup``, ``recycling``,
    ``grammar-forced``, ``auto`` (all three merged), ``layer-skip`` (self-speculation; needs the
    target ``model``) or ``draft:MODEL`` (a smaller model sharing the tokenizer: anything
    ``trellis.load`` accepts)."""
    if name == "layer-skip":
        if model is None:
            raise UsageError("layer-skip drafts with the target model itself: pass model=")
        return LayerSkip(model, generator=generator)
    if name == "prompt-lookup":
        return PromptLookup()
    if name == "recycling":
        return TokenRecycling(vocab_size)
    if name == "grammar-forced":
        return GrammarForced()
    if name == "auto":  # siblings, not GrammarForced(then=...): as fast or faster in bench_speculate (b)
        return Composite([GrammarForced(), PromptLookup(), TokenRecycling(vocab_size)])
    if name.startswith("draft:"):
        from trellis.models import load

        return ModelDrafter(load(name[len("draft:"):]).model, generator=generator)
    raise UsageError(f"unknown drafter {name!r}: use prompt-lookup, recycling, grammar-forced, auto, layer-skip "
                     "or draft:MODEL")
