"""``HFLanguageModel``: a transformers causal LM behind the ``LanguageModel`` protocol.

This is the only place in trellis that touches transformers' KV-cache API. It keeps one batched
cache whose rows are known token sequences and serves each request by reusing the longest shared
prefix (select rows, crop, extend), and it evaluates a whole draft ``TokenTree`` in ONE forward
pass with a 4D ancestor mask and depth-based position ids. transformers itself is imported only
when a cache is first made.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import weakref
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import Tensor

from trellis.attention_guard import attention_context
from trellis.errors import UsageError
from trellis.kernels import TunedLinears
from trellis.kv_cache import growable_layer_class
from trellis.lm import LanguageModel, LMStats
from trellis.lm_head import LMHead
from trellis.tokens import TokenTree


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
                raise UsageError(f"layers must include 0 and lie in [0, {n}), got {list(layers)}")
            self._keep_layers = None if len(kl) == n else kl
        self._decoder = model.get_decoder() if self._keep_layers is None else decoder_view(model.get_decoder(),
                                                                                           self._keep_layers)
        self._head: LMHead | None = None  # None = every token's logit
        if head is not None:
            self.set_head(head)
        attn = getattr(model.config, "_attn_implementation", "eager") or "eager"
        if attn not in ("eager", "sdpa"):
            raise UsageError(
                f"HFLanguageModel needs eager or sdpa attention for its 4D tree masks, got {attn!r}; "
                "load the model with attn_implementation='sdpa'"
            )
        layer_types = list(getattr(cfg, "layer_types", None) or [])
        unknown = set(layer_types) - _SUPPORTED_LAYER_TYPES
        if unknown:
            raise UsageError(f"HFLanguageModel: unsupported attention layer types {sorted(unknown)}")
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
            raise UsageError("this LMHead holds rows of another model's output embedding")
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
            raise UsageError("logits() needs at least one non-empty prefix")
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
            raise UsageError("tree_logits() needs a non-empty prefix")
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
                raise UsageError(f"commit(): {path} is not a root-to-node chain of the tree")
            expected_parent = i
        p = len(pend.pos)  # cache columns of the prefix (holes included)
        self._keep_tail(p, torch.tensor([p + i for i in path], dtype=torch.long, device=self.device))
        chain = tuple(pend.tokens[i] for i in path)
        self._rows = [pend.prefix + chain]
        self._pos = torch.cat([pend.pos, len(pend.prefix) + torch.arange(len(chain))]).unsqueeze(0)
        self._last = pend.logits[(path[-1] + 1) if path else 0].unsqueeze(0)
        self._pending = None

    def reindex_rows(self, rows: Sequence[int]) -> None:
        """Row ``j`` of the cache becomes a copy of row ``rows[j]`` of the last ``logits`` batch
        (``ReindexesRows``): resampled particles continue from their ancestors' rows, in order, so
        the next ``logits`` call forwards only their new tokens and selects no rows itself."""
        self._settle()
        idx = [int(r) for r in rows]
        if any(not 0 <= r < len(self._rows) for r in idx):
            raise UsageError(f"reindex_rows: rows must lie in [0, {len(self._rows)}), got {idx}")
        if not idx or idx == list(range(len(self._rows))) or self._pos is None or self._last is None:
            return
        sel = torch.tensor(idx, dtype=torch.long)
        self._select_rows(sel.to(self.device))
        self._rows = [self._rows[r] for r in idx]
        self._pos = self._pos[sel]
        self._last = self._last[sel.to(self._last.device)]

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
            if width > 0 and len(rows) == b and all(len(r) <= m and p[:len(r)] == r
                                                    for p, r, m in zip(prefs, rows, max_reuse)):
                # Each prefix extends its own row (lockstep decoding, rows re-indexed after SMC's
                # resampling): no [B, R, w] comparison, no row selection.
                best, src = torch.tensor([len(r) for r in rows]), torch.arange(b)
            elif width > 0:
                want = torch.tensor([(p + (-2,) * width)[:width] for p in prefs], dtype=torch.long)  # [B, w]
                have = torch.tensor([(r + (-3,) * width)[:width] for r in rows], dtype=torch.long)  # [R, w]
                eq = want[:, None, :] == have[None, :, :]  # [B, R, w]
                lcp = eq.to(torch.int32).cumprod(-1).sum(-1)  # [B, R] shared tokens
                lcp = torch.minimum(lcp, torch.tensor(max_reuse, dtype=torch.int32)[:, None])
                best, src = lcp.max(-1)  # [B], [B]
            if src is not None and int(best.min()) > 0:
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
        cache.layer_class_to_replicate = growable_layer_class()
        return cache

    def _layers(self) -> list[Any]:
        layers = list(self._cache.layers)
        cls = growable_layer_class()
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
        """The draft view: a subset of decoder layers and/or of the LM head. The layer subset runs
        through ``self._decoder``, a view module (``decoder_view``) that shares the model's weights
        and never modifies the shared model."""
        cfg = self._cfg
        out = self._decoder(**kwargs)
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


_LMS: "weakref.WeakKeyDictionary[Any, HFLanguageModel]" = weakref.WeakKeyDictionary()


def language_model(model: Any) -> LanguageModel:
    """The cached ``HFLanguageModel`` of a transformers model (one KV cache per model object), or
    ``model`` itself when it already implements ``LanguageModel``."""
    if isinstance(model, LanguageModel):
        return model
    lm = _LMS.get(model)
    if lm is None:
        lm = _LMS[model] = HFLanguageModel(model)
    return lm


def decoder_view(decoder: Any, keep: Sequence[int]) -> Any:
    """A module that runs only decoder layers ``keep`` of ``decoder`` (a self-speculative draft view).

    A shallow copy of the decoder with its own module table and config: every weight, embedding and
    norm is shared, the layer list holds the kept layers, and ``layer_types`` (which the decoder
    indexes by position) is cut to match. The shared model is never modified, so the target and any
    number of views can run in any order (before 2026-11-27 the view swapped the shared model's
    layer list for the duration of each call). Each kept layer keeps its ``layer_idx``, so it writes
    its own cache slot; skipped slots stay empty and are never cropped or read."""
    view = copy.copy(decoder)
    view._modules = dict(decoder._modules)  # own table: the assignment below must not reach ``decoder``
    view._modules["layers"] = torch.nn.ModuleList([decoder.layers[i] for i in keep])
    config = copy.copy(decoder.config)
    types = config.layer_types if isinstance(getattr(config, "layer_types", None), list) else None
    if types is not None:
        config.layer_types = [types[i] for i in keep]
    view.__dict__["config"] = config
    return view
