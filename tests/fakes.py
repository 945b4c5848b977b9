"""Tiny language models for logic tests: random-weight HF models built from configs (no downloads)
and a pure-torch fake LM whose logits are a deterministic function of the prefix."""

from __future__ import annotations

import hashlib
import os
from typing import Sequence

import torch
from torch import Tensor

from trellis.tokens import TokenTree


# TRELLIS_FAKES_DEVICE=cuda puts the tiny HF models on that device: the logic tests, run on a GPU
# machine, then exercise the library's device handling (tests/test_cuda.py has the GPU's own tests).
DEVICE = os.environ.get("TRELLIS_FAKES_DEVICE", "cpu")


def tiny_llama(vocab_size: int = 97, seed: int = 0, layers: int = 2):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      bos_token_id=1, eos_token_id=2, pad_token_id=0, attn_implementation="sdpa")
    return LlamaForCausalLM(cfg).eval().to(DEVICE)


def tiny_gemma3(vocab_size: int = 101, seed: int = 0, sliding_window: int = 6, attn: str = "sdpa"):
    """A 6-layer Gemma 3 (5 sliding : 1 full, like the real one) with a tiny window so tests cross it."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    cfg = Gemma3TextConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=6,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                           sliding_window=sliding_window, max_position_embeddings=512,
                           bos_token_id=2, eos_token_id=1, pad_token_id=0, attn_implementation=attn)
    return Gemma3ForCausalLM(cfg).eval().to(DEVICE)


class HashLM:
    """A fake LanguageModel: logits are a fixed pseudo-random function of the whole prefix.

    ``peaked`` > 0 sharpens the distributions so greedy paths are well defined.
    """

    def __init__(self, vocab_size: int, *, seed: int = 0, scale: float = 3.0) -> None:
        self.vocab_size, self.seed, self.scale = vocab_size, seed, scale
        self.calls = 0

    def _row(self, prefix: Sequence[int]) -> Tensor:
        h = hashlib.blake2b(repr((self.seed, tuple(int(t) for t in prefix))).encode(), digest_size=8).digest()
        g = torch.Generator().manual_seed(int.from_bytes(h, "little") & ((1 << 62) - 1))
        return torch.randn(self.vocab_size, generator=g) * self.scale

    def logits(self, prefixes: Sequence[Sequence[int]]) -> Tensor:
        self.calls += 1
        return torch.stack([self._row(p) for p in prefixes])

    def tree_logits(self, prefix: Sequence[int], tree: TokenTree) -> Tensor:
        self.calls += 1
        toks = tree.tokens.tolist()
        rows = [self._row(prefix)]
        for i in range(len(tree)):
            rows.append(self._row(list(prefix) + [toks[j] for j in tree.path_to(i)]))
        return torch.stack(rows)


class ScriptedLM:
    """A fake LanguageModel that puts the highest logit on ``script[i]`` at generation step ``i``
    (counted from ``prompt_len``), for exact control over what greedy decoding emits."""

    def __init__(self, vocab_size: int, script: Sequence[int], prompt_len: int) -> None:
        self.vocab_size, self.script, self.prompt_len = vocab_size, list(script), prompt_len

    def _row(self, prefix: Sequence[int]) -> Tensor:
        row = torch.zeros(self.vocab_size)
        step = len(prefix) - self.prompt_len
        row[self.script[min(step, len(self.script) - 1)]] = 10.0
        return row

    def logits(self, prefixes: Sequence[Sequence[int]]) -> Tensor:
        return torch.stack([self._row(p) for p in prefixes])

    def tree_logits(self, prefix: Sequence[int], tree: TokenTree) -> Tensor:
        toks = tree.tokens.tolist()
        return torch.stack([self._row(prefix)] + [self._row(list(prefix) + [toks[j] for j in tree.path_to(i)])
                                                  for i in range(len(tree))])


class BigramLM:
    """A fake LanguageModel whose logits depend only on the last token: ``table[prefix[-1]]``.

    Cheap enough for 20k-draw statistical tests of samplers and verifiers."""

    def __init__(self, vocab_size: int, *, seed: int = 0, scale: float = 1.5) -> None:
        g = torch.Generator().manual_seed(seed)
        self.vocab_size = vocab_size
        self.table = torch.randn(vocab_size, vocab_size, generator=g) * scale  # [V, V]

    def logits(self, prefixes: Sequence[Sequence[int]]) -> Tensor:
        return self.table[torch.tensor([p[-1] for p in prefixes])]

    def tree_logits(self, prefix: Sequence[int], tree: TokenTree) -> Tensor:
        last = torch.cat([torch.tensor([prefix[-1]]), tree.tokens])
        return self.table[last]


def assert_greedy_equal_up_to_ties(model, prompt: Sequence[int], ours: Sequence[int], ref: Sequence[int],
                                   tol: float = 1e-3) -> None:
    """``ours`` equals transformers' greedy ``ref`` token for token, or first differs where the two
    top logits are within ``tol`` (a float32 near-tie: trellis may run another, equally exact GEMM
    kernel than transformers). After such a tie the continuations legitimately differ."""
    ours, ref = list(ours), list(ref)
    if ours == ref:
        return
    j = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), min(len(ours), len(ref)))
    assert j < min(len(ours), len(ref)), f"lengths differ without a differing token: {len(ours)} vs {len(ref)}"
    with torch.inference_mode():
        logits = model(torch.tensor([list(prompt) + ref[:j]], device=model.device)).logits[0, -1].float()
    gap = abs(float(logits[ref[j]] - logits[ours[j]]))
    assert gap <= tol, f"greedy differs from transformers at new token {j} with a logit gap of {gap:.2e}"
