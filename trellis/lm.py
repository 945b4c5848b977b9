"""Language models behind one small protocol: token prefixes in, next-token logits out.

``HFLanguageModel`` is the only place in trellis that touches transformers' KV-cache API. It keeps
one batched cache whose rows are known token sequences and serves each request by reusing the
longest shared prefix (select rows, crop, extend), and it evaluates a whole draft ``TokenTree`` in
ONE forward pass with a 4D ancestor mask and depth-based position ids.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import weakref
from dataclasses import dataclass
from typing import Any, Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor

from trellis.attention_guard import attention_context
from trellis.kernels import TunedLinears
from trellis.tokens import TokenTree


@runtime_checkable
class LanguageModel(Protocol):
    """Tokens in, logits out; how (and whether) a KV cache is reused is the implementation's business."""

    vocab_size: int

    def logits(self, prefixes: Sequence[Sequence[int]]) -> Tensor:
        """[B, V] next-token logits after each prefix."""
        ...

    def tree_logits(self, prefix: Sequence[int], tree: TokenTree) -> Tensor:
        """[N+1, V]: row 0 after ``prefix``, row i+1 after ``prefix`` + the path to node i."""
        ...


@dataclass
class LMStats:
    """Counters tests and benchmarks read; reset with ``HFLanguageModel.reset_stats()``."""

    forward_calls: int = 0
    tokens_forwarded: int = 0  # tokens fed through the network (the compute actually spent)
    cache_hits: int = 0  # rows answered with no forward at all
    tokens_reused: int = 0  # prefix tokens served from the KV cache instead of recomputed
    cache_resets: int = 0  # requests that shared nothing with the cache

    def snapshot(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class _PendingTree:
    prefix: tuple[int, ...]
    tokens: tuple[int, ...]
    parents: tuple[int, ...]
    logits: Tensor  # [N+1, V]
    pos: Tensor  # [P] positions of the prefix's cache columns (-1: a hole)


_SUPPORTED_LAYER_TYPES = {"full_attention", "sliding_attention"}

# One set of tuned kernels per (model, rows): draft views of the same model share the target's.
_KERNELS: "weakref.WeakKeyDictionary[Any, dict[int, TunedLinears]]" = weakref.WeakKeyDictionary()


def _kernels_for(model: Any, rows: int) -> TunedLinears:
    per_model = _KERNELS.setdefault(model, {})
    if rows not in per_model:
        per_model[rows] = TunedLinears.for_model(model, rows)
    return per_model[rows]


@functools.cache
def _growable_layer_class() -> type:
    """A transformers ``DynamicLayer`` over a preallocated buffer (defined on first use, so importing
    trellis does not import transformers).

    ``DynamicLayer`` appends by ``torch.cat``, copying the whole cache in every layer at every
    forward, and trellis' commits gathered it once more. Here an append writes the new rows in place
    (the buffer doubles when full, so growth is amortised), a crop only moves the length, and
    committing a tree path copies just the accepted rows down. On Gemma 3 270M with a 700-token
    context (2-core AMD EPYC, 2026-11-24) a 6-node verification plus a 3-node commit took 0.91-0.94x
    the time of the cat-and-gather cache; a one-token decode step was unchanged (1.00x). ``keys``/``values`` are views of the first ``length``
    positions, which is all attention reads.
    """
    from transformers.cache_utils import DynamicLayer

    class GrowableLayer(DynamicLayer):
        def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
            super().lazy_initialization(key_states, value_states)
            self._kbuf: Tensor | None = None
            self._vbuf: Tensor | None = None
            self._length = 0

        def _expose(self) -> None:
            assert self._kbuf is not None and self._vbuf is not None
            self.keys = self._kbuf[..., : self._length, :]
            self.values = self._vbuf[..., : self._length, :]

        def update(self, key_states: Tensor, value_states: Tensor, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n, q = self._length, key_states.shape[-2]
            kb, vb = self._kbuf, self._vbuf
            if kb is None or vb is None or n + q > kb.shape[-2] or kb.shape[:-2] != key_states.shape[:-2] \
                    or vb.shape[:-2] != value_states.shape[:-2]:
                if kb is not None and n and kb.shape[:-2] != key_states.shape[:-2]:
                    raise ValueError(f"cache rows {tuple(kb.shape[:-2])} do not match the new states' "
                                     f"{tuple(key_states.shape[:-2])}")
                cap = max(n + q, 2 * n, 64)
                new_k = key_states.new_empty((*key_states.shape[:-2], cap, key_states.shape[-1]))
                new_v = value_states.new_empty((*value_states.shape[:-2], cap, value_states.shape[-1]))
                if n:
                    new_k[..., :n, :].copy_(kb[..., :n, :])  # type: ignore[index]
                    new_v[..., :n, :].copy_(vb[..., :n, :])  # type: ignore[index]
                self._kbuf, self._vbuf = kb, vb = new_k, new_v
            kb[..., n : n + q, :].copy_(key_states)
            vb[..., n : n + q, :].copy_(value_states)
            self._length = n + q
            self._expose()
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self._length if self.is_initialized else 0

        def truncate(self, length: int) -> None:
            """Keep the first ``length`` positions."""
            if self.is_initialized and self._kbuf is not None:
                self._length = min(self._length, length)
                self._expose()

        def crop(self, tokens_to_remove: int) -> None:  # transformers' API: a negative count
            if tokens_to_remove > 0:
                raise ValueError("crop() takes a negative number of tokens to remove")
            self.truncate(self._length + tokens_to_remove if self.is_initialized else 0)

        def keep_tail(self, start: int, tail: Tensor) -> None:
            """Keep positions ``[0, start)`` followed by ``tail`` (ascending positions >= ``start``)."""
            if not self.is_initialized or self._kbuf is None or self._vbuf is None:
                return
            k = len(tail)
            if k and not bool((tail == torch.arange(start, start + k, device=tail.device)).all()):
                # index_select copies first, so overlapping source and destination rows are safe
                self._kbuf[..., start : start + k, :] = self._kbuf.index_select(-2, tail)
                self._vbuf[..., start : start + k, :] = self._vbuf.index_select(-2, tail)
            self._length = start + k
            self._expose()

        def batch_select_indices(self, indices: Tensor) -> None:
            if self.is_initialized and self._kbuf is not None and self._vbuf is not None:
                self._kbuf, self._vbuf = self._kbuf[indices], self._vbuf[indices]
                self._expose()

        def batch_repeat_interleave(self, repeats: int) -> None:
            if self.is_initialized and self._kbuf is not None and self._vbuf is not None:
                self._kbuf = self._kbuf.repeat_interleave(repeats, dim=0)
                self._vbuf = self._vbuf.repeat_interleave(repeats, dim=0)
                self._expose()

        def reset(self) -> None:
            self._kbuf = self._vbuf = None
            self._length = 0
            super().reset()

    GrowableLayer.__qualname__ = GrowableLayer.__name__ = "GrowableLayer"
    return GrowableLayer


class LMHead:
    """A growable subset of an LM head: token ids and their rows of the output embedding.

    ``grow`` gathers only the new rows, into spare capacity: re-gathering the whole ~36k-row head
    of Gemma 3 270M took 0.19 s a call (cProfile, one writing prompt), once per new token and
    draft view. Draft views of one model can share one head (``HFLanguageModel.set_head``)."""

    def __init__(self, weight: Tensor, ids: Sequence[int]) -> None:
        """``weight`` [V, H]: the model's output embedding (read, never copied whole)."""
        self._weight = weight.detach()
        self.vocab_size = int(weight.shape[0])
        self._ids = torch.zeros(0, dtype=torch.long)  # [capacity]
        self._rows = torch.zeros(0, weight.shape[1], dtype=weight.dtype, device=weight.device)  # [capacity, H]
        self._in = torch.zeros(self.vocab_size, dtype=torch.bool)  # [V]
        self._n = 0
        if not self.grow(ids):
            raise ValueError("head ids must be non-empty")

    @property
    def ids(self) -> Tensor:
        """[K] token ids, in the order they were added."""
        return self._ids[: self._n]

    @property
    def rows(self) -> Tensor:
        """[K, H] their output-embedding rows (a view: valid until the next ``grow``)."""
        return self._rows[: self._n]

    def reads(self, weight: Tensor) -> bool:
        """Whether this head's rows come from ``weight``."""
        return self._weight.data_ptr() == weight.data_ptr() and self._weight.shape == weight.shape

    def grow(self, ids: Sequence[int]) -> int:
        """Add the ``ids`` not yet in the head; returns how many were new."""
        new = torch.tensor(sorted({int(i) for i in ids}), dtype=torch.long)
        if len(new) and (int(new[-1]) >= self.vocab_size or int(new[0]) < 0):
            raise ValueError(f"head ids must lie in [0, {self.vocab_size})")
        new = new[~self._in[new]]
        n, need = self._n, self._n + len(new)
        if need > len(self._ids):
            cap = need + max(need // 4, 1024)  # headroom: a generation adds tokens a few at a time
            ids_buf = torch.empty(cap, dtype=torch.long)
            rows_buf = torch.empty(cap, self._rows.shape[1], dtype=self._rows.dtype, device=self._rows.device)
            ids_buf[:n], rows_buf[:n] = self._ids[:n], self._rows[:n]
            self._ids, self._rows = ids_buf, rows_buf
        self._ids[n:need] = new
        # index_select into the buffer: 0.05 s for 35k Gemma rows, against 0.12-0.47 s for
        # `rows[n:need] = weight[new]` (a temporary, then a copy into fresh pages)
        torch.index_select(self._weight, 0, new.to(self._weight.device), out=self._rows[n:need])
        self._in[new] = True
        self._n = need
        return len(new)


class HFLanguageModel:
    """A transformers causal LM with prefix KV reuse and one-pass tree evaluation.

    Works with decoder-only attention models whose forward accepts a custom 4D attention mask
    (eager or sdpa attention). Sliding-window layers are kept in a full cache and windowed through
    the mask, so any prefix can be cropped exactly. Not thread-safe: one cache per instance.
    """

    def __init__(self, model: Any, *, layers: Sequence[int] | None = None,
                 head: Sequence[int] | LMHead | None = None, kernel_rows: int | None = 16) -> None:
        """``layers``: run only these decoder layers (a self-speculative draft view of ``model``;
        layer 0 must be kept, it holds the cache length); ``head``: compute logits only for these
        token ids, or this shared ``LMHead`` (the others are ``-inf``), so a draft step skips most
        of a large LM head. Both share ``model``'s weights; the view keeps its own KV cache.
        ``kernel_rows``: on a float32 CPU model, forwards of 1..``kernel_rows`` token rows (decode
        steps, draft trees) use the GEMM kernel timed fastest for each weight shape and row count
        (``trellis.kernels``, tuned on first use and cached per machine); ``None`` keeps
        ``F.linear`` everywhere."""
        self.model = model.eval()
        cfg = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
        self._cfg = cfg
        emb = model.get_output_embeddings()
        self.vocab_size: int = int(emb.weight.shape[0]) if emb is not None else int(cfg.vocab_size)
        self._keep_layers: list[int] | None = None
        if layers is not None:
            n = int(cfg.num_hidden_layers)
            kl = sorted({int(i) for i in layers})
            if not kl or kl[0] != 0 or kl[-1] >= n:
                raise ValueError(f"layers must include 0 and lie in [0, {n}), got {list(layers)}")
            self._keep_layers = None if len(kl) == n else kl
        self._head: LMHead | None = None  # None = every token's logit
        if head is not None:
            self.set_head(head)
        attn = getattr(model.config, "_attn_implementation", "eager") or "eager"
        if attn not in ("eager", "sdpa"):
            raise ValueError(
                f"HFLanguageModel needs eager or sdpa attention for its 4D tree masks, got {attn!r}; "
                "load the model with attn_implementation='sdpa'"
            )
        layer_types = list(getattr(cfg, "layer_types", None) or [])
        unknown = set(layer_types) - _SUPPORTED_LAYER_TYPES
        if unknown:
            raise ValueError(f"HFLanguageModel: unsupported attention layer types {sorted(unknown)}")
        self._per_type_masks = "sliding_attention" in layer_types
        self._window: int | None = getattr(cfg, "sliding_window", None) if self._per_type_masks else None
        params = next(model.parameters())
        self.device, self.dtype = params.device, params.dtype
        self._kernels: TunedLinears | None = None
        if kernel_rows is not None and self.device.type == "cpu" and self.dtype == torch.float32:
            self._kernels = _kernels_for(model, kernel_rows)
        params_of_forward = inspect.signature(model.forward).parameters
        self._keep_arg = "logits_to_keep" in params_of_forward
        # Forward a batch's shared prefix once (``_prefill_shared``); False re-reads it per row
        # (the behaviour before 2026-11-26, kept for benchmarks that measure the difference).
        self.share_prefix = True
        # Recent transformers (5.24 at least) call the KV cache argument and output field `cache`
        # (`past_key_values` warns, and goes in 5.40); older versions only know `past_key_values`.
        self._cache_kw = "cache" if "cache" in params_of_forward else "past_key_values"
        self.stats = LMStats()
        self.reset()

    # ----------------------------------------------------------------------------- public API
    def reset(self) -> None:
        """Forget the KV cache (counters are kept)."""
        self._cache: Any = None
        self._rows: list[tuple[int, ...]] = []  # the token sequence each cache row holds
        # The cache is a rectangle [R, n] of columns; a row's shorter sequence leaves holes
        # (position -1) that no query attends to: rows of different lengths share one batched
        # forward. A row's tokens are in ``_rows``; ``_pos`` says which column holds which of them.
        self._pos: Tensor | None = None  # [R, n] int64 positions (index among the row's tokens)
        self._last: Tensor | None = None  # [R, V] logits after each row
        self._pending: _PendingTree | None = None

    def reset_stats(self) -> None:
        self.stats = LMStats()

    def set_head(self, head: Sequence[int] | LMHead) -> LMHead:
        """Compute logits only for the head's token ids from the next forward on (others are
        ``-inf``). Token ids make a new ``LMHead``; an ``LMHead`` is shared (draft views of one
        model keep one copy of the rows, and growing it grows them all). Returns the head."""
        weight = self.model.get_output_embeddings().weight
        if not isinstance(head, LMHead):
            head = LMHead(weight, head)
        elif not head.reads(weight):
            raise ValueError("this LMHead holds rows of another model's output embedding")
        self._head = head
        return head

    @property
    def kernels(self) -> TunedLinears | None:
        """The tuned GEMM kernels forwards of 1..``kernel_rows`` rows use (``None``: plain ``F.linear``)."""
        return self._kernels

    @kernels.setter
    def kernels(self, tuned: TunedLinears | None) -> None:
        """Route short forwards through these kernels from the next forward on (``None``: ``F.linear``;
        e.g. ``TunedLinears.for_model(model, 16, kernels=[...])`` to time a restricted set)."""
        if tuned is not None and not isinstance(tuned, TunedLinears):
            raise TypeError(f"kernels must be a TunedLinears or None, got {type(tuned).__name__}")
        self._kernels = tuned

    @property
    def head(self) -> Tensor | None:
        """Token ids whose logits are computed (``None`` = all)."""
        return None if self._head is None else self._head.ids

    @property
    def cached_rows(self) -> list[tuple[int, ...]]:
        """Token sequences currently held in the KV cache (one per batch row)."""
        self._settle()
        return list(self._rows)

    @torch.no_grad()
    def logits(self, prefixes: Sequence[Sequence[int]]) -> Tensor:
        """[B, V] float32 next-token logits, at most one forward for the whole batch.

        Rows are served from the cache when every prefix equals a cached row; otherwise the cache
        is reduced to the longest prefix each request shares with a cached row (rows selected, then
        cropped to a common column) and only the remaining tokens are forwarded, in one batch:
        prefixes of different lengths leave holes (left padding) that attention skips.
        """
        self._settle()
        prefs = [tuple(int(t) for t in p) for p in prefixes]
        if not prefs or any(len(p) == 0 for p in prefs):
            raise ValueError("logits() needs at least one non-empty prefix")
        # a copy: callers may mask in place, and the stored rows must stay as computed
        return self._logits_batch(prefs).clone()

    @torch.no_grad()
    def tree_logits(self, prefix: Sequence[int], tree: TokenTree) -> Tensor:
        """[N+1, V] float32 logits for a whole draft tree in ONE forward pass.

        Row 0 is the distribution after ``prefix``; row i+1 the one after prefix + path to node i.
        The tree stays in the cache until ``commit(path)`` keeps the accepted chain (any other
        call first drops the tree, keeping ``prefix``).
        """
        self._settle()
        pre = tuple(int(t) for t in prefix)
        if not pre:
            raise ValueError("tree_logits() needs a non-empty prefix")
        n = len(tree)
        c, used, past_pos = self._prepare([pre], max_reuse=[len(pre) - 1])
        m = int(used[0])
        q_pre = len(pre) - m
        tree_tokens = tree.tokens.to(torch.long)
        ids = torch.cat([torch.tensor(pre[m:], dtype=torch.long), tree_tokens]).unsqueeze(0)  # [1, q]
        positions = torch.cat([torch.arange(m, len(pre)), len(pre) + tree.depths()]).unsqueeze(0)  # [1, q]
        q = q_pre + n
        vis = torch.zeros(q, q, dtype=torch.bool)
        vis[:, :q_pre] = torch.tril(torch.ones(q, q_pre, dtype=torch.bool))  # tree rows see all the prefix
        vis[q_pre:, q_pre:] = tree.ancestor_mask()
        logits = self._forward(ids, positions, vis.unsqueeze(0), past_pos, keep=n + 1)[0]  # [N+1, V]
        pos = torch.cat([past_pos[0], torch.arange(m, len(pre))])
        self._rows, self._pos, self._last = [], None, None  # cache holds prefix + tree now
        self._pending = _PendingTree(pre, tuple(tree_tokens.tolist()), tuple(tree.parents.tolist()), logits, pos)
        return logits.clone()

    def commit(self, path: Sequence[int]) -> None:
        """Keep the accepted chain of tree nodes ``path`` (root child first) in the cache after
        ``tree_logits``; every other node is dropped. ``[]`` keeps just the prefix."""
        pend = self._pending
        if pend is None:
            raise RuntimeError("commit() without a preceding tree_logits()")
        path = [int(i) for i in path]
        expected_parent = -1
        for i in path:
            if not 0 <= i < len(pend.tokens) or pend.parents[i] != expected_parent:
                raise ValueError(f"commit(): {path} is not a root-to-node chain of the tree")
            expected_parent = i
        p = len(pend.pos)  # cache columns of the prefix (holes included)
        self._keep_tail(p, torch.tensor([p + i for i in path], dtype=torch.long, device=self.device))
        chain = tuple(pend.tokens[i] for i in path)
        self._rows = [pend.prefix + chain]
        self._pos = torch.cat([pend.pos, len(pend.prefix) + torch.arange(len(chain))]).unsqueeze(0)
        self._last = pend.logits[(path[-1] + 1) if path else 0].unsqueeze(0)
        self._pending = None

    # ----------------------------------------------------------------------------- internals
    def _settle(self) -> None:
        if self._pending is not None:
            self.commit([])

    def _logits_batch(self, prefs: list[tuple[int, ...]]) -> Tensor:
        if self._last is not None:
            row_of = {row: r for r, row in enumerate(self._rows)}
            hits = [row_of.get(p) for p in prefs]
            if all(h is not None for h in hits):
                self.stats.cache_hits += len(prefs)
                return self._last[torch.tensor(hits)].float()
        if self.share_prefix and len(prefs) > 1:
            self._prefill_shared(prefs)
        c, used, past_pos = self._prepare(prefs, max_reuse=[len(p) - 1 for p in prefs])
        rest = [p[int(k):] for p, k in zip(prefs, used.tolist())]
        q = max(len(r) for r in rest)
        # Right-align each row's new tokens: a shorter row starts with holes, so every row's last
        # token sits in the last column, whose logits are kept.
        ids = torch.zeros(len(prefs), q, dtype=torch.long)
        positions = torch.full((len(prefs), q), -1, dtype=torch.long)
        for b, (r, k) in enumerate(zip(rest, used.tolist())):
            ids[b, q - len(r):] = torch.tensor(r, dtype=torch.long)
            positions[b, q - len(r):] = torch.arange(k, k + len(r))
        real = positions >= 0  # [B, q]
        vis = torch.tril(torch.ones(q, q, dtype=torch.bool)) & real[:, None, :]  # [B, q, q]
        vis |= torch.eye(q, dtype=torch.bool)  # a hole attends to itself (its output is never read)
        logits = self._forward(ids, positions, vis, past_pos, keep=1)[:, -1]  # [B, V]
        self._pos = torch.cat([past_pos, positions], 1)
        self._rows = prefs
        self._last = logits
        return logits

    def _prefill_shared(self, prefs: list[tuple[int, ...]]) -> None:
        """Forward the tokens every prefix shares (up to each one's last token) ONCE, in one row,
        when the cache does not hold them yet; ``_prepare`` then copies that row to every prefix.

        Without it N samples of one prompt (best-of-N, lockstep rollouts, a batch of hypotheses
        after a cache miss) each re-read the prompt: on Gemma 3 270M, best-of-8 on an MBPP prompt
        spent 480 of its first 591 forward tokens re-reading a 60-token prompt 8 times
        (2026-11-26, benchmarks/bench_codesearch.py --throughput)."""
        first = prefs[0]
        shared = min(len(p) for p in prefs) - 1
        for p in prefs[1:]:
            n = 0
            while n < shared and p[n] == first[n]:
                n += 1
            shared = n
        if shared < 2:
            return
        held = 0
        for row in self._rows:
            n = 0
            m = min(shared, len(row))
            while n < m and row[n] == first[n]:
                n += 1
            held = max(held, n)
        if held < shared:
            self._logits_batch([first[:shared]])

    def _prepare(self, prefs: list[tuple[int, ...]], *, max_reuse: Sequence[int]) -> tuple[int, Tensor, Tensor]:
        """Shape the cache into one row per prefix holding its first ``c`` columns; returns ``c``,
        how many of each prefix's tokens those columns hold [B], and their positions [B, c] (-1:
        hole). A prefix reuses at most ``max_reuse[b]`` tokens."""
        c, src = 0, None
        b = len(prefs)
        if self._pos is not None and self._cache is not None and self._rows:
            rows = self._rows
            width = min(max(len(r) for r in rows), max(max_reuse))
            if width > 0:
                want = torch.tensor([(p + (-2,) * width)[:width] for p in prefs], dtype=torch.long)  # [B, w]
                have = torch.tensor([(r + (-3,) * width)[:width] for r in rows], dtype=torch.long)  # [R, w]
                eq = want[:, None, :] == have[None, :, :]  # [B, R, w]
                lcp = eq.to(torch.int32).cumprod(-1).sum(-1)  # [B, R] shared tokens
                lcp = torch.minimum(lcp, torch.tensor(max_reuse, dtype=torch.int32)[:, None])
                best, src = lcp.max(-1)  # [B], [B]
                if int(best.min()) > 0:
                    # shared tokens -> cache columns: through the last shared token, holes before it included
                    run = torch.cummax(self._pos, 1).values  # [R, n] non-decreasing
                    cols = torch.searchsorted(run[src], (best - 1).unsqueeze(1).to(run.dtype), right=False)
                    c = int((cols.squeeze(1) + 1).min())
        if c == 0:
            self._cache = self._new_cache()
            self.stats.cache_resets += 1
            self._pos = torch.zeros(b, 0, dtype=torch.long)
            return 0, torch.zeros(b, dtype=torch.long), self._pos
        r = len(self._rows)
        if not (b == r and torch.equal(src, torch.arange(r))):
            self._select_rows(src.to(self.device))
        self._crop(c)
        self._pos = self._pos[src, :c]  # type: ignore[index]
        past_pos = self._pos
        used = (past_pos >= 0).sum(1)
        self.stats.tokens_reused += int(used.sum())
        return c, used, past_pos

    def _new_cache(self) -> Any:
        from transformers import DynamicCache

        # No config on purpose: every layer is a full, croppable layer (sliding windows are applied
        # through the attention mask instead of by eviction), and each one appends in place.
        cache = DynamicCache()
        cache.layer_class_to_replicate = _growable_layer_class()
        return cache

    def _layers(self) -> list[Any]:
        layers = list(self._cache.layers)
        cls = _growable_layer_class()
        for layer in layers:
            if type(layer) is not cls:
                raise TypeError(f"HFLanguageModel cannot crop cache layer {type(layer).__name__}")
        return layers

    def _select_rows(self, idx: Tensor) -> None:
        for layer in self._layers():
            layer.batch_select_indices(idx)

    def _crop(self, length: int) -> None:
        for layer in self._layers():
            layer.truncate(length)

    def _keep_tail(self, start: int, tail: Tensor) -> None:
        """Keep the first ``start`` positions, then the positions ``tail`` (ascending, >= ``start``)."""
        for layer in self._layers():
            layer.keep_tail(start, tail)

    def _forward(self, ids: Tensor, positions: Tensor, vis: Tensor, past_pos: Tensor, *, keep: int) -> Tensor:
        """Run the network on ``ids`` [B, q] at ``positions`` [B, q] after the cached columns whose
        positions are ``past_pos`` [B, c] (-1: a hole, never attended); ``vis`` [B or 1, q, q] says
        which new tokens each new token attends to. Returns float32 logits of the last ``keep`` inputs."""
        b, q = ids.shape
        c = past_pos.shape[1]
        kv_pos = torch.cat([past_pos, positions], 1)  # [B, c + q]
        past_ok = (past_pos >= 0)[:, None, :].expand(b, q, c)
        allowed = torch.cat([past_ok, vis.expand(b, q, q)], dim=2)  # [B, q, c + q]
        mask: Any = self._float_mask(allowed)
        if self._per_type_masks:
            windowed = allowed
            if self._window is not None:
                windowed = allowed & ((positions[:, :, None] - kv_pos[:, None, :]) < self._window)
            mask = {"full_attention": mask, "sliding_attention": self._float_mask(windowed)}
        kwargs: dict[str, Any] = dict(
            input_ids=ids.to(self.device),
            position_ids=positions.clamp(min=0).to(self.device),
            attention_mask=mask,
            use_cache=True,
        )
        kwargs[self._cache_kw] = self._cache
        kernels = self._kernels.active() if self._kernels is not None and self._kernels.applies(b * q) \
            else contextlib.nullcontext()
        with kernels, attention_context(self.device, self.dtype):  # no-op on CPU (trellis.attention_guard)
            if self._keep_layers is not None or self._head is not None:
                logits = self._view_forward(kwargs, keep)
            else:
                if self._keep_arg:
                    kwargs["logits_to_keep"] = keep
                out = self.model(**kwargs)
                self._cache = out[self._cache_kw]
                logits = out.logits[:, -keep:, :]
        self.stats.forward_calls += 1
        self.stats.tokens_forwarded += b * q
        return logits.float()

    def _view_forward(self, kwargs: dict[str, Any], keep: int) -> Tensor:
        """The draft view: a subset of decoder layers and/or of the LM head.

        The decoder's layer list (and ``layer_types``, which the model indexes by position) is
        swapped for the subset during the call only; every kept layer writes its own cache slot
        (its ``layer_idx``), so skipped slots stay empty and are never cropped or read."""
        base = self.model.get_decoder()
        cfg = self._cfg
        saved_layers, saved_types = base.layers, getattr(cfg, "layer_types", None)
        try:
            if self._keep_layers is not None:
                base.layers = torch.nn.ModuleList([saved_layers[i] for i in self._keep_layers])
                if saved_types is not None:
                    cfg.layer_types = [saved_types[i] for i in self._keep_layers]
            out = base(**kwargs)
        finally:
            base.layers = saved_layers
            if saved_types is not None:
                cfg.layer_types = saved_types
        self._cache = out[self._cache_kw]
        h = out.last_hidden_state[:, -keep:, :]  # [B, keep, H]
        if self._head is None:
            part = self.model.get_output_embeddings()(h)
        else:
            part = h @ self._head.rows.T  # [B, keep, K]
        cap = getattr(cfg, "final_logit_softcapping", None)
        if cap:
            part = torch.tanh(part / cap) * cap
        if self._head is None:
            return part
        full = torch.full((*part.shape[:2], self.vocab_size), float("-inf"), dtype=part.dtype, device=part.device)
        full[..., self._head.ids.to(part.device)] = part
        return full

    def _float_mask(self, allowed: Tensor) -> Tensor:
        """[B, q, kv] bool -> the additive [B, 1, q, kv] float mask eager and sdpa attention add."""
        if bool((allowed == allowed[:1]).all()):  # one mask for every row (no holes): build it once
            m = torch.zeros(allowed.shape[1:], dtype=self.dtype)
            m.masked_fill_(~allowed[0], torch.finfo(self.dtype).min)
            return m.to(self.device)[None, None].expand(allowed.shape[0], 1, *allowed.shape[1:])
        m = torch.zeros(allowed.shape, dtype=self.dtype)
        m.masked_fill_(~allowed, torch.finfo(self.dtype).min)
        return m.to(self.device)[:, None]
