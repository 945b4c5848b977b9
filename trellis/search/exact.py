"""The exact posterior p(x | x in L) * phi(x) / Z by walking the whole token tree: the oracle for
``SMC`` on a vocabulary and a grammar small enough to enumerate.

Level by level from the root, every allowed token of every open prefix (one batched
``Decoder.proposal`` per chunk of a level, so the probabilities are the very ones SMC weighs):
p(x) is the product of the unmasked model's probabilities, an output ends at EOS, the last level
of ``max_new_tokens`` proposes EOS alone (SMC's target), and each finished output is multiplied by
the potentials' ``complete`` value. Prefixes a potential's ``prefix`` rejects are dropped (the
``Potential`` contract says none of their completions counts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from trellis.decoder import Decoder, Hypothesis
from trellis.errors import UsageError
from trellis.search.potentials import Potential, prefix_text

NEG_INF = float("-inf")


@dataclass(frozen=True)
class ExactPosterior:
    """``by_text``: each output text's probability under the target, most probable first;
    ``by_tokens``: the same per token sequence (generated tokens, EOS included); ``log_z``: the
    exact log Z (log P(x in L) without potentials); ``outputs``: how many token sequences end;
    ``masked``: each output text's probability under the locally masked sampler (``Sample``: the
    product of the renormalised masked probabilities), what grammar-aligned sampling corrects
    (it sums to P(the sampler ends inside the budget), and ignores the potentials)."""

    by_text: dict[str, float]
    by_tokens: dict[tuple[int, ...], float]
    log_z: float
    outputs: int
    masked: dict[str, float]


def exact_posterior(decoder: Decoder, root: Hypothesis, *, max_new_tokens: int,
                    potentials: tuple[Potential, ...] = (), max_prefixes: int = 200_000,
                    chunk: int = 256) -> ExactPosterior:
    """Enumerate every output of at most ``max_new_tokens`` tokens (EOS included) below ``root``.
    Raises ``UsageError`` once more than ``max_prefixes`` prefixes are open at one level."""
    if potentials and decoder.vocab is None:
        raise UsageError("potentials score text: the decoder needs a vocabulary")
    # (prefix, log p of its generated tokens, log q of them under the masked sampler)
    level: list[tuple[Hypothesis, float, float]] = [(root, 0.0, 0.0)]
    finished: dict[tuple[int, ...], tuple[str, float]] = {}
    masked: dict[str, float] = {}
    for depth in range(max_new_tokens):
        if not level:
            break
        nxt: list[tuple[Hypothesis, float, float]] = []
        for start in range(0, len(level), chunk):
            part = level[start:start + chunk]
            hyps = [h for h, _, _ in part]
            prop = decoder.proposal(hyps, eos_only=depth == max_new_tokens - 1)
            log_p = prop.log_q + prop.log_mass[:, None]  # the unmasked model on the allowed tokens, -inf elsewhere
            # the masked sampler (the mask, then the warpers; never cut to EOS at the last step): the
            # same prefixes, so the model answers from its cache
            sampler = decoder.log_probs(hyps)
            for row, (h, lp, lq) in enumerate(part):
                allowed = (torch.isfinite(log_p[row]) | torch.isfinite(sampler[row])).nonzero().flatten().tolist()
                vals = log_p[row, allowed].double().tolist()
                qs = sampler[row, allowed].double().tolist()
                for tok, v, q in zip(allowed, vals, qs):
                    child = decoder.extend(h, tok, 0.0)
                    total, sampled = lp + v, lq + q
                    if child.finished:
                        text = decoder.text(child) if decoder.vocab is not None else repr(child.new_tokens)
                        if sampled > NEG_INF:
                            masked[text] = masked.get(text, 0.0) + math.exp(sampled)
                        phi = sum(p.complete(text) for p in potentials) if potentials and total > NEG_INF else 0.0
                        if phi > NEG_INF and total > NEG_INF:
                            finished[child.new_tokens] = (text, total + phi)
                    elif depth < max_new_tokens - 1 and (not potentials or _prefix_ok(decoder, child, potentials)):
                        nxt.append((child, total, sampled))
        if len(nxt) > max_prefixes:
            raise UsageError(f"more than {max_prefixes} open prefixes at depth {depth + 1}: "
                             "too large to enumerate (raise max_prefixes or use SMC)")
        level = nxt
    masked = dict(sorted(masked.items(), key=lambda kv: -kv[1]))
    if not finished:
        return ExactPosterior({}, {}, NEG_INF, 0, masked)
    keys = list(finished)
    logs = torch.tensor([finished[k][1] for k in keys], dtype=torch.float64)
    log_z = float(torch.logsumexp(logs, 0))
    probs = torch.exp(logs - log_z).tolist()
    by_tokens = dict(sorted(zip(keys, probs), key=lambda kv: -kv[1]))
    by_text: dict[str, float] = {}
    for k, p in zip(keys, probs):
        t = finished[k][0]
        by_text[t] = by_text.get(t, 0.0) + p
    return ExactPosterior(dict(sorted(by_text.items(), key=lambda kv: -kv[1])), by_tokens, log_z, len(keys), masked)


def total_variation(p: dict, q: dict) -> float:
    """TV distance between two distributions given as {outcome: probability} (missing = 0)."""
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


def _prefix_ok(decoder: Decoder, h: Hypothesis, potentials: tuple[Potential, ...]) -> bool:
    assert decoder.vocab is not None
    text = prefix_text(decoder.vocab.decode(h.new_tokens))
    return all(p.prefix(text) > NEG_INF for p in potentials)
