"""CPU GEMM kernels for short forwards (decode steps, draft-tree verification, small batches),
chosen by measurement per weight shape and row count.

Verifying k drafted tokens should cost about one decode step: a step of Gemma 3 270M reads every
weight once and is memory-bound. Whether it does depends on which sgemm path the BLAS takes, and
that differs per CPU. ``F.linear`` on 2 cores, Gemma's 262,144 x 640 LM head:

- Intel VM (2026-11-22): 40 ms for 3 rows, 113 ms for 4, 209 ms for 16. Against a weight
  prepacked once with ``cblas_sgemm_pack`` (``mkl_packed``), 16 rows took 52 ms.
- AMD EPYC (Zen 1) VM (2026-11-23): 73 ms for 1 row, 245 ms for 4, 395 ms for 16. MKL's packed
  path took 533 ms there. The same product computed as ``W @ x.T`` (``transposed``) took 68 ms for 4
  rows, and oneDNN (``onednn``) 85 ms for 4 rows and 43 ms for 1.

No single kernel is right everywhere, so each (weight shape, row bucket) is timed once on the real
weights and the fastest kernel wins. It must beat ``F.linear`` by ``MARGIN``, so timing noise does
not switch kernels. Every kernel is checked against ``F.linear`` before it can be chosen.

The choices are cached on disk per (CPU, torch version, threads), in ``kernels.json`` under
trellis's cache dir (``TRELLIS_CACHE_DIR=""`` disables it). Tuning all of Gemma 3 270M's shapes
takes ~15 s, once per machine and thread count. Timings taken while other work loads the CPU can pick
a worse kernel (never a wrong one): delete ``kernels.json`` to re-tune on a quiet machine.

One-row forwards (plain decoding) are tuned too. Where a kernel other than ``F.linear`` wins there,
logits differ from transformers' own decoding by float32 rounding (~1e-6), so greedy outputs can
differ from ``model.generate`` only at near-ties.

``int8_blocks`` is a candidate only for a weight that IS int8 blocks: every block of 32 (or 16)
consecutive weights of a row equals one float32 scale times int8 integers, bit for bit, as in a
model dequantised from a Q8_0/Q5_0/Q4_0 GGUF (trellis' Gemma: its 262,144 x 640 LM head is
Q8_0). It reads those integers and scales (4x fewer bytes) in C (``trellis/_qlinear.c``); the
weights it multiplies are the float32 weights exactly, only the summation order differs. Gemma's
LM head on the Zen 4 VM, 2 threads (2026-11-26, /tmp bench of ``_qlinear.linear`` vs
``F.linear``/``W @ x.T`` on the same values): 1 row 11.7 ms vs 56 ms, 2 rows 13.2 vs 22, 4 rows
16.6 vs 28, 8 rows 22.5 vs 49, 16 rows 44.5 vs 89.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import pathlib
import platform
import time
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from trellis.errors import UsageError

BLAS_KERNELS = ("plain", "transposed", "mkl_packed", "onednn")  # the float32 ones (before int8_blocks)
KERNELS = (*BLAS_KERNELS, "int8_blocks")
MIN_ROWS = 1
INT8_VERSION = 2  # 2: the int8 kernel prefetches the rows ahead of its tiles (_qlinear.c, PF_ROWS)
MARGIN = 0.9  # a kernel must take <= MARGIN x F.linear's time to replace it
_REPS = 3  # timed runs per candidate (min); a candidate clearly slower than the best stops early


def mkl_available() -> bool:
    """Whether this torch build has MKL's packed sgemm ops."""
    return bool(getattr(torch._C, "has_mkl", False)) and hasattr(torch.ops.mkl, "_mkl_linear") \
        and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")


def onednn_available() -> bool:
    """Whether this torch build has oneDNN's linear op."""
    return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def buckets(rows: int) -> list[int]:
    """The row counts tuning measures: powers of two from ``MIN_ROWS`` up to ``rows`` (always included)."""
    out, b = [], MIN_ROWS
    while b < rows:
        out.append(b)
        b *= 2
    return out + [rows]


def _bucket(n: int, rows: int) -> int:
    """The smallest tuned row count >= ``n`` (n in MIN_ROWS..rows)."""
    b = MIN_ROWS
    while b < n:
        b *= 2
    return min(b, rows)


# ---------------------------------------------------------------------------------------- kernels
# Each kernel is (prepare(weight, rows) -> prepared weight, run(x2d, prepared, weight, rows) -> y2d).
# Bias is added by the caller, the same way for every kernel.
def _plain(x: Tensor, prep: Any, w: Tensor, rows: int) -> Tensor:
    return F.linear(x, w)


def _transposed(x: Tensor, prep: Any, w: Tensor, rows: int) -> Tensor:
    # [N, K] @ [K, n]: the BLAS streams the big weight as the left operand (a GEMV-like path).
    return torch.mm(w, x.T).T.contiguous()


def _mkl_pack(w: Tensor, rows: int) -> Tensor:
    return torch.ops.mkl._mkl_reorder_linear_weight(w, rows)


def _mkl_packed(x: Tensor, prep: Any, w: Tensor, rows: int) -> Tensor:
    n = x.shape[0]
    if n != rows:  # a pack is tied to its row count: pad with zero rows
        pad = x.new_zeros(rows, x.shape[1])
        pad[:n] = x
        x = pad
    return torch.ops.mkl._mkl_linear(x, prep, w, None, rows)[:n]


def _onednn(x: Tensor, prep: Any, w: Tensor, rows: int) -> Tensor:
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), prep, None, "none", [], "")


@functools.cache  # asked per module and bucket when routes are built
def qlinear_available() -> bool:
    """Whether the int8-block C kernel was built (``setup.py``; optional)."""
    return importlib.util.find_spec("trellis._qlinear") is not None


def int8_blocks(w: Tensor) -> tuple[Tensor, Tensor, int]:
    """``w`` [N, K] float32 as (q [N, K] int8, d [N, K // g] float32, g) with
    ``w[n, k] == d[n, k // g] * q[n, k]`` bit for bit, g = 32 or 16; ``RuntimeError`` if ``w`` is not
    such blocks (then the kernel is not a candidate for it) or the C kernel was not built.

    A block's scale is its largest |weight| divided by that weight's integer: 127 for Q8_0
    (llama.cpp's quantiser maps the block's absmax to 127), 16 for Q5_0, 8 for Q4_0, 32 or 31 for
    Q6_K's blocks of 16; the other integers are tried only for the blocks these leave, when they
    are at most 1% of all. Every weight is checked against the float32 product of its integer and
    scale, the product the kernel computes, so a wrong guess can only refuse, never change a
    weight. In C (``_qlinear.blocks``): Gemma 3 270M's LM head in 0.4 s, a 2048 x 640 decoder
    weight in 3 ms (99 of its 126 decoder weights are blocks; the other 27 are Q4_K, whose offsets
    no int8 block holds); the same search in torch took 1.5 s and 2.7 s (Zen 4 VM, 2026-11-26)."""
    if not qlinear_available():
        raise RuntimeError("trellis._qlinear was not built")
    from trellis import _qlinear

    if w.dim() != 2 or w.dtype != torch.float32 or w.device.type != "cpu":
        raise RuntimeError("int8 blocks need a 2-D float32 CPU weight")
    w = w.detach().contiguous()
    n, k = w.shape
    for g in (32, 16):
        if k % g:
            continue
        q = torch.empty(n, k, dtype=torch.int8)
        d = torch.empty(n, k // g, dtype=torch.float32)
        if _qlinear.blocks(w.numpy(), q.numpy(), d.numpy(), n, k, g):
            return q, d, g
    raise RuntimeError("the weight is not int8 blocks of 32 or 16 (scale x integer, exactly)")


def _int8_prepare(w: Tensor, rows: int) -> Any:
    return int8_blocks(w)


def qlinear_isa() -> int:
    """The instruction set the C int8 kernel uses on this CPU: 0 plain C, 1 AVX2+FMA, 2 AVX-512."""
    from trellis import _qlinear

    return int(_qlinear.isa())


def int8_linear(x: Tensor, q: Tensor, d: Tensor, g: int, *, threads: int | None = None, isa: int | None = None,
                out: Tensor | None = None) -> Tensor:
    """``x @ (d x q).T`` in float32 for int8 blocks ``(q, d, g)`` of ``int8_blocks`` (C kernel, GIL
    released): ``x`` [n, K] float32, result [n, N]. ``isa`` forces a lower instruction set than
    ``qlinear_isa()`` (tests); ``out`` is written in place. Bad shapes raise ``ValueError``."""
    from trellis import _qlinear

    x = x.detach().contiguous().float()
    n, k = x.shape
    y = torch.empty(n, q.shape[0], dtype=torch.float32) if out is None else out
    args = [x.numpy(), q.numpy(), d.numpy(), y.numpy(), n, k, q.shape[0], g,
            torch.get_num_threads() if threads is None else threads]
    _qlinear.linear(*args, *([] if isa is None else [isa]))
    return y


def _int8_run(x: Tensor, prep: Any, w: Tensor, rows: int) -> Tensor:
    q, d, g = prep
    return int8_linear(x, q, d, g)


_RUN: dict[str, Callable[[Tensor, Any, Tensor, int], Tensor]] = {
    "plain": _plain, "transposed": _transposed, "mkl_packed": _mkl_packed, "onednn": _onednn,
    "int8_blocks": _int8_run}
_PREPARE: dict[str, Callable[[Tensor, int], Any]] = {
    "plain": lambda w, rows: None, "transposed": lambda w, rows: None,
    "mkl_packed": _mkl_pack, "onednn": lambda w, rows: w.to_mkldnn(), "int8_blocks": _int8_prepare}


def _candidates() -> list[str]:
    out = ["plain", "transposed"]
    if mkl_available():
        out.append("mkl_packed")
    if onednn_available():
        out.append("onednn")
    if qlinear_available():
        out.append("int8_blocks")
    return out


def _agrees(kernel: str, prep: Any, w: Tensor, rows: int, n: int) -> bool:
    """The kernel's product equals F.linear's to float32 rounding (never a silently different model)."""
    x = torch.randn(n, w.shape[1], generator=torch.Generator().manual_seed(0))
    ref = F.linear(x, w)
    try:
        got = _RUN[kernel](x, prep, w, rows)
    except RuntimeError:
        return False
    return got.shape == ref.shape and bool(torch.allclose(got, ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max())))


_EVICT_BYTES = 128 << 20
_evict_buf: list[Tensor] = []


def _evict_caches() -> None:
    """Write a buffer larger than the CPU caches, so the next product reads its weight from memory.

    Why: in a forward every weight is read once, after the other layers' weights went through the
    caches, so a decode step streams them from DRAM. Timed hot, one after another, Gemma's 640 x 640
    products took 0.03 ms with F.linear; inside decode steps its 122 decoder products took 30 ms a
    step, 0.25 ms each (cProfile, Zen 4 VM, 2026-11-26), and the hot timing preferred F.linear to
    a kernel that reads 4x fewer bytes."""
    if not _evict_buf:
        _evict_buf.append(torch.empty(_EVICT_BYTES // 4, dtype=torch.float32))
    _evict_buf[0].fill_(1.0)


def _time(kernel: str, fn: Callable[[], Any], best: float) -> float:
    """Min wall time of ``fn`` (running ``kernel``) over ``_REPS`` runs, each with cold caches
    (``_evict_caches``); stops early when clearly slower than ``best``. No separate warm-up:
    ``_agrees`` has run every other kernel once on the weight."""
    t = float("inf")
    for _ in range(_REPS):
        _evict_caches()
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
        if t > 1.5 * best:
            break
    return t


def _cpu_name() -> str:
    """The CPU as the kernel cache key names it. Family and model are part of it because VMs often
    report just "AMD EPYC", which would let a cache carried to another generation keep choices
    timed on the old one."""
    info: dict[str, str] = {}
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            key, sep, value = line.partition(":")
            if not sep:
                break  # the first processor's block ends at a blank line
            info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = info.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in info and "model" in info:
        name += f" (family {info['cpu family']} model {info['model']})"
    return name


def _cache_file() -> pathlib.Path | None:
    if os.environ.get("TRELLIS_CACHE_DIR") == "":
        return None
    from trellis.models import cache_dir

    return cache_dir() / "kernels.json"


class TunedLinears:
    """Every covered ``nn.Linear`` routed, inside ``with kernels.active():``, through the kernel timed
    fastest for its weight shape and row count (``MIN_ROWS``..``rows`` input rows; others take
    ``F.linear``). Tuning runs on the first ``active()`` under a given thread count (or is read from
    the disk cache). ``kernel=`` forces one kernel everywhere it applies (tests, benchmarks);
    ``timer(kernel, fn, best) -> seconds`` is injectable for tests."""

    def __init__(self, modules: Sequence[torch.nn.Linear], rows: int = 16, *, kernel: str | None = None,
                 timer: Callable[[str, Callable[[], Any], float], float] = _time,
                 kernels: Sequence[str] | None = None) -> None:
        if rows < MIN_ROWS:
            raise UsageError(f"rows must be >= {MIN_ROWS}, got {rows}")
        if kernel is not None and kernel not in KERNELS:
            raise UsageError(f"unknown kernel {kernel!r}; expected one of {KERNELS}")
        unknown = set(kernels or ()) - set(KERNELS)
        if unknown:
            raise UsageError(f"unknown kernels {sorted(unknown)}; expected some of {KERNELS}")
        # ``kernels``: the candidates tuning may choose among (default all this build has); a
        # benchmark restricts them to time the paths before a kernel existed
        self._allowed = None if kernels is None else frozenset(kernels) | {"plain"}
        self.rows = rows
        self.kernel = kernel
        self._modules = list(modules)
        self._timer = timer
        self.enabled = bool(self._modules) and all(
            m.weight.device.type == "cpu" and m.weight.dtype == torch.float32 for m in self._modules)
        # threads -> {shape key -> {bucket -> kernel}}; prepared weights per (kernel, module index)
        self._choices: dict[int, dict[str, dict[int, str]]] = {}
        self._prepared: dict[tuple[str, int], Any] = {}
        self._checked: dict[tuple[str, int], bool] = {}  # (kernel, module) agrees with F.linear
        self._routes: dict[int, list[tuple[torch.nn.Linear, Callable[[Tensor], Tensor]]]] = {}  # per thread count

    @classmethod
    def for_model(cls, model: Any, rows: int = 16, **kw: Any) -> "TunedLinears":
        """Every ``nn.Linear`` of ``model``, the LM head included (a submodule like the others)."""
        return cls([m for m in model.modules() if isinstance(m, torch.nn.Linear)], rows, **kw)

    def _kinds(self) -> list[str]:
        return [k for k in _candidates() if self._allowed is None or k in self._allowed]

    def applies(self, rows: int) -> bool:
        """Whether a forward over ``rows`` input rows is routed through the tuned kernels."""
        return self.enabled and MIN_ROWS <= rows <= self.rows

    @staticmethod
    def _shape_key(m: torch.nn.Linear) -> str:
        return f"{m.out_features}x{m.in_features}"

    def choices(self) -> dict[str, dict[int, str]]:
        """{"outxin": {bucket: kernel}} under the current thread count (tunes if needed)."""
        return self._tuned()

    def _cache_key(self) -> str:
        # the candidate set is part of the key: a kernel added to trellis (or a C kernel now built)
        # is measured instead of losing to choices stored before it existed; so is the int8
        # kernel's version (``INT8_VERSION``): choices timed against an older one are retimed
        return (f"{_cpu_name()} | torch {torch.__version__} | threads {torch.get_num_threads()} | rows {self.rows}"
                f" | kernels {'+'.join(self._kinds())} | cold | int8 v{INT8_VERSION}")

    def _tuned(self) -> dict[str, dict[int, str]]:
        threads = torch.get_num_threads()
        if threads not in self._choices:
            self._choices[threads] = self._decide()
        return self._choices[threads]

    def _decide(self) -> dict[str, dict[int, str]]:
        reps: dict[str, int] = {}  # shape key -> index of one module with that shape
        for i, m in enumerate(self._modules):
            reps.setdefault(self._shape_key(m), i)
        if self.kernel is not None:
            return {s: {b: self._usable(self.kernel, i) for b in buckets(self.rows)} for s, i in reps.items()}
        path, key = _cache_file(), self._cache_key()
        stored: dict[str, Any] = {}
        if path is not None and path.exists():
            try:
                stored = json.loads(path.read_text())
            except (OSError, ValueError):
                stored = {}
        known = stored.get(key, {})
        out: dict[str, dict[int, str]] = {}
        for s, i in reps.items():
            row = known.get(s)
            if row is not None and all(str(b) in row and row[str(b)] in KERNELS for b in buckets(self.rows)):
                out[s] = {b: self._usable(row[str(b)], i) for b in buckets(self.rows)}
            else:
                out[s] = self._measure(i)
        fresh = {s: {str(b): k for b, k in r.items()} for s, r in out.items()}
        if path is not None and any(known.get(s) != r for s, r in fresh.items()):
            stored[key] = {**known, **fresh}  # other models' shapes under the same key stay
            with contextlib.suppress(OSError):
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(stored, indent=1, sort_keys=True))
                tmp.replace(path)
        self._drop_unused(out)
        _evict_buf.clear()  # 128 MB held only while timing
        return out

    def _prep(self, kernel: str, i: int) -> Any:
        if (kernel, i) not in self._prepared:
            with torch.no_grad():
                self._prepared[kernel, i] = _PREPARE[kernel](self._modules[i].weight.detach(), self.rows)
        return self._prepared[kernel, i]

    def _usable(self, kernel: str, i: int) -> str:
        """``kernel`` if it is available and agrees with F.linear on module ``i``, else "plain".
        Checked once, on 3 rows (a padded product for ``mkl_packed``)."""
        if kernel == "plain" or kernel not in self._kinds():
            return "plain"
        if (kernel, i) not in self._checked:
            try:
                prep = self._prep(kernel, i)
                self._checked[kernel, i] = _agrees(kernel, prep, self._modules[i].weight.detach(), self.rows,
                                                   min(3, self.rows))
            except RuntimeError:
                self._checked[kernel, i] = False
        return kernel if self._checked[kernel, i] else "plain"

    def _measure(self, i: int) -> dict[int, str]:
        w = self._modules[i].weight.detach()
        gen = torch.Generator().manual_seed(0)
        # a kernel that applies only to some weights of a shape (int8_blocks: a GGUF mixes block
        # formats within one shape) is timed on the first module of the shape it applies to
        same = [j for j, m in enumerate(self._modules) if self._shape_key(m) == self._shape_key(self._modules[i])]
        on = {k: next((j for j in same if self._usable(k, j) == k), None) for k in self._kinds()}
        kernels = [k for k in self._kinds() if on[k] is not None]  # "plain" first
        row: dict[int, str] = {}
        with torch.no_grad():
            for b in buckets(self.rows):
                x = torch.randn(b, w.shape[1], generator=gen)
                best, best_t = "plain", float("inf")
                for k in kernels:
                    j = on[k]
                    prep, wk = self._prep(k, j), self._modules[j].weight.detach()  # type: ignore[index]
                    t = self._timer(k, lambda: _RUN[k](x, prep, wk, self.rows), best_t / MARGIN)
                    if k == "plain":
                        best_t = t * MARGIN  # the others must beat F.linear by MARGIN
                    elif t < best_t:
                        best, best_t = k, t
                row[b] = best
        return row

    def _drop_unused(self, choice: dict[str, dict[int, str]]) -> None:
        # Prepared copies cost memory (an MKL pack or oneDNN copy is ~1x the weight): keep only the
        # ones some bucket uses under some thread count.
        used = {(k, s) for c in [*self._choices.values(), choice] for s, r in c.items() for k in r.values()}
        for k, i in list(self._prepared):
            if (k, self._shape_key(self._modules[i])) not in used:
                del self._prepared[k, i]

    def _forward(self, m: torch.nn.Linear, i: int, row: dict[int, str]) -> Callable[[Tensor], Tensor]:
        rows, weight, bias = self.rows, m.weight, m.bias
        preps = {k: self._prep(k, i) for k in set(row.values()) if k != "plain"}

        def forward(x: Tensor) -> Tensor:
            flat = x.reshape(-1, x.shape[-1])
            n = flat.shape[0]
            if not MIN_ROWS <= n <= rows:
                return F.linear(x, weight, bias)
            b = _bucket(n, rows)
            k = row[b]
            if k != "plain" and n < b:
                # Run the product at the row count it was timed at: the BLAS' path depends on the
                # count (W @ x.T on the AMD VM: 66 ms for 3 rows of the LM head, 47 ms for 4).
                flat = torch.cat([flat, flat.new_zeros(b - n, flat.shape[1])])
            out = _RUN[k](flat, preps.get(k), weight, rows)[:n]
            if bias is not None:
                out = out + bias
            return out.reshape(*x.shape[:-1], out.shape[-1])

        return forward

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Route every covered linear through its chosen kernel inside the block (instance attributes
        shadow the class ``forward`` and are deleted afterwards, so the model is untouched outside)."""
        if not self.enabled:
            yield
            return
        threads = torch.get_num_threads()
        if threads not in self._routes:
            choice = self._tuned()
            rows = [{b: k if self._usable(k, i) == k else "plain" for b, k in choice[self._shape_key(m)].items()}
                    for i, m in enumerate(self._modules)]  # a kernel chosen for the shape may not apply to this weight
            self._routes[threads] = [(m, self._forward(m, i, rows[i])) for i, m in enumerate(self._modules)
                                     if any(k != "plain" for k in rows[i].values())]
        routes = self._routes[threads]
        for m, fn in routes:
            m.forward = fn  # type: ignore[method-assign]
        try:
            yield
        finally:
            for m, _ in routes:
                del m.forward
