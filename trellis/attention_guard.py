"""Detect a wrong CUDA attention kernel once per device and dtype, and run trellis' forwards without it.

Seen on an NVIDIA H200 with torch 2.11.0+cu130 (2026-11-26; ``tests/test_cuda.py``): PyTorch's
memory-efficient scaled-dot-product-attention kernel returns wrong outputs (max error 2.7-3.8
against the math kernel, fp32 and bf16) when K/V are expanded across heads (stride 0: grouped-query
attention as transformers feeds it) and a mask is given, at sequence lengths of 1 mod 64 (65,
129, 513). A tiny Gemma 3's last logits were off by 0.27-0.43 at 65 and 129 tokens, through
transformers' own forward and through ``HFLanguageModel`` alike; the math and cuDNN kernels were
right. A greedy decode on such a GPU silently differs from the model's distribution.

So instead of trusting a version list, ``attention_context`` runs a probe of exactly that shape
the first time a device/dtype is used: if the memory-efficient kernel disagrees with the math
kernel, trellis' forwards run with the other backends (``torch.nn.attention.sdpa_kernel``) and a
warning says so once. On the CPU, or where the kernel is right, it is a no-op context.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import torch

logger = logging.getLogger(__name__)

_DECISIONS: dict[tuple[str, torch.dtype], bool] = {}  # (device, dtype) -> the efficient kernel is wrong
PROBE_TOL = {torch.float32: 1e-3, torch.float16: 5e-2, torch.bfloat16: 5e-2}


def efficient_kernel_is_wrong(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the memory-efficient SDPA kernel disagrees with the math kernel on the failing shape
    (GQA-expanded K/V, a sliding-window mask, 65 positions). ``False`` where it cannot run."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    g = torch.Generator(device="cpu").manual_seed(0)
    n, heads, dim = 65, 4, 64
    q = torch.randn(1, heads, n, dim, generator=g).to(device, dtype)
    k = torch.randn(1, 1, n, dim, generator=g).to(device, dtype).expand(1, heads, n, dim)
    v = torch.randn(1, 1, n, dim, generator=g).to(device, dtype).expand(1, heads, n, dim)
    i = torch.arange(n, device=device)
    mask = ((i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < 6))[None, None]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    with torch.no_grad():
        with sdpa_kernel([SDPBackend.MATH]):
            want = sdpa(q.float(), k.float(), v.float(), attn_mask=mask)
        try:
            with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
                got = sdpa(q, k, v, attn_mask=mask).float()
        except RuntimeError:  # the kernel does not take this input here: nothing to avoid
            return False
    return float((got - want).abs().max()) > PROBE_TOL.get(dtype, 5e-2)


def attention_context(device: torch.device, dtype: torch.dtype) -> Any:
    """A context manager for a forward on ``device`` in ``dtype``: the SDPA backends without the
    memory-efficient kernel where the probe found it wrong, else a no-op."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    key = (str(device), dtype)
    if key not in _DECISIONS:
        _DECISIONS[key] = efficient_kernel_is_wrong(device, dtype)
        if _DECISIONS[key]:
            logger.warning(
                "torch %s: the memory-efficient attention kernel gives wrong outputs on %s (%s) for "
                "grouped-query attention with a mask (see trellis.attention_guard); trellis' forwards use "
                "the math/cuDNN/flash kernels instead. transformers' own generate() is not covered.",
                torch.__version__, device, dtype)
    if not _DECISIONS[key]:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.MATH, SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION])
