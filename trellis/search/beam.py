"""Beam search (with transformers' length penalty and early-stopping rules) and Diverse Beam Search
(Vijayakumar et al. 2018, "Diverse Beam Search: Decoding Diverse Solutions from Neural Sequence Models").

Beam scores are sums of the masked, renormalised (and warped) log-probs the ``Decoder`` gives; a
finished hypothesis is ranked by ``sum_logprobs / generated_len ** length_penalty``. Each step is
ONE batched ``decoder.log_probs(beams)`` call: all beams have the same length, and the LM's prefix
KV reuse means only the newest token of each beam is forwarded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from trellis.decoder import Decoder, Hypothesis
from trellis.errors import UsageError
from trellis.search.tree import Searching, SearchResult, TreeRecorder

EarlyStopping = bool | Literal["never"]


class _Finished:
    """The finished hypotheses of one beam (or group), transformers' ``_beam_search`` bookkeeping:
    at most ``size`` kept, best first; new ones admitted only while the early-stop heuristic says
    the running beams could still improve on them."""

    def __init__(self, size: int, length_penalty: float, early_stopping: EarlyStopping, max_new: int) -> None:
        self.size, self.lp, self.early, self.max_new = size, length_penalty, early_stopping, max_new
        self.items: list[tuple[float, Hypothesis]] = []
        self.improvable = True  # transformers' is_early_stop_heuristic_unsatisfied

    @property
    def full(self) -> bool:
        return len(self.items) >= self.size

    def accepting(self) -> bool:
        """Whether this step's finished candidates may enter (fixed for the whole step)."""
        return self.improvable and not (self.full and self.early is True)

    def add(self, hyp: Hypothesis, total: float, gen_len: int) -> None:
        self.items.append((total / gen_len ** self.lp, hyp))
        self.items.sort(key=lambda x: -x[0])  # stable: earlier entries win ties
        del self.items[self.size:]

    def check(self, best_running: float | None, gen_len: int) -> None:
        """After a step: can the best running beam (summed log-prob ``best_running``) still beat the
        worst kept hypothesis? ``early_stopping=False`` assumes its current length is its best;
        ``"never"`` with a positive length penalty assumes the longest possible length."""
        if best_running is None or not self.full:
            return
        length = self.max_new if (self.early == "never" and self.lp > 0.0) else gen_len
        if best_running / length ** self.lp <= self.items[-1][0]:
            self.improvable = False

    def done(self) -> bool:
        return not self.improvable or (self.full and self.early is True)


def _validate(width: int, n_best: int | None, length_penalty: float, early_stopping: EarlyStopping) -> None:
    if width < 1:
        raise UsageError(f"width must be >= 1, got {width}")
    if n_best is not None and not 1 <= n_best <= width:
        raise UsageError(f"n_best must be in [1, width={width}], got {n_best}")
    if early_stopping not in (True, False, "never"):
        raise UsageError(f"early_stopping must be True, False or 'never', got {early_stopping!r}")


@dataclass(frozen=True)
class Beam(Searching):
    """Beam search over the masked distribution, equal to transformers' ``generate(num_beams=width)``
    when unconstrained (same candidates, same finished-beam bookkeeping, same stopping rules).

    Per step the ``(1 + max(1, #eos)) * width`` best continuations by summed log-prob are examined in
    order; those that finish (EOS in an accepting state, a stop string, or the token budget) enter
    the finished set only if among the first ``width``, the rest keep running (``width`` of them).
    ``length_penalty``: finished score = sum_logprobs / generated_len ** length_penalty (> 0 favours
    long outputs). ``early_stopping``: True stops once ``width`` hypotheses finished; False stops
    when the best running beam, at its current length, cannot beat the worst finished one; "never"
    uses the longest possible length for that test when ``length_penalty > 0``. Returns the
    ``n_best`` best finished (or budget-cut) hypotheses; ``SearchResult.scores`` are their
    length-penalised scores.
    """

    width: int = 4
    length_penalty: float = 1.0
    early_stopping: EarlyStopping = False
    n_best: int = 1

    def __post_init__(self) -> None:
        _validate(self.width, self.n_best, self.length_penalty, self.early_stopping)

    def search(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int,
               recorder: TreeRecorder | None = None) -> SearchResult:
        rec = recorder if recorder is not None else TreeRecorder(decoder, root)
        if max_new_tokens <= 0 or root.finished:
            return rec.result([root], [0.0])
        nb = self.width
        keep = max(2, 1 + len(decoder.eos)) * nb  # candidates examined per step (transformers' beams_to_keep)
        done = _Finished(nb, self.length_penalty, self.early_stopping, max_new_tokens)
        running, totals = [root], torch.zeros(1)  # totals: [R] float32 summed log-probs, as transformers keeps them
        for step in range(max_new_tokens):
            lp = decoder.log_probs(running)  # [R, V], on the model's device
            rec.pruned(running)
            flat = (lp + totals.to(lp.device)[:, None]).flatten()  # [R*V]
            k = min(keep, int(torch.isfinite(flat).sum()))
            if k == 0:
                break  # the constraint allows nothing anywhere
            top = torch.topk(flat, k)
            vsize = lp.shape[-1]
            last = step + 1 == max_new_tokens
            accept = done.accepting()
            nxt: list[Hypothesis] = []
            nxt_totals: list[float] = []
            all_finish = True
            for rank, (total, i) in enumerate(zip(top.values.tolist(), top.indices.tolist())):
                r, tok = divmod(i, vsize)
                token_lp = float(lp[r, tok])
                child = decoder.extend(running[r], tok, token_lp)
                if child.finished or last:
                    if rank < nb and accept:
                        done.add(child, total, step + 1)
                    rec.add(child, logprob=token_lp, kept=rank < nb and accept)
                else:
                    all_finish = False
                    kept = len(nxt) < nb
                    if kept:
                        nxt.append(child)
                        nxt_totals.append(total)
                    rec.add(child, logprob=token_lp, kept=kept)
            running, totals = nxt, torch.tensor(nxt_totals, dtype=torch.float32, device=lp.device)
            done.check(nxt_totals[0] if nxt_totals else None, step + 1)
            if done.done() or all_finish or not running:
                break
        items = done.items[: self.n_best]
        return rec.result([h for _, h in items], [s for s, _ in items])


@dataclass(frozen=True)
class DiverseBeam(Searching):
    """Diverse Beam Search (Vijayakumar et al. 2018): ``width`` beams in ``groups`` groups of
    B' = width / groups; at step t group g maximises log p(y_t | y_<t) - lambda * Delta(y_t), where
    Delta counts how often groups 1..g-1 chose the token y_t at this step (Hamming diversity) and
    lambda = ``diversity_penalty``. Groups are processed in order within a step; all groups' beams
    share ONE batched ``decoder.log_probs`` call.

    Within a group, running beams are ranked by their summed augmented objective (as in the paper);
    ``Hypothesis.logprob`` stays the plain sum of masked, renormalised log-probs, and finished
    hypotheses of every group are ranked together by logprob / generated_len ** length_penalty.
    Finished-set bookkeeping per group is ``Beam``'s. Returns ``n_best`` (default: ``width``).
    """

    width: int = 4
    groups: int = 2
    diversity_penalty: float = 1.0
    length_penalty: float = 1.0
    early_stopping: EarlyStopping = False
    n_best: int | None = None

    def __post_init__(self) -> None:
        _validate(self.width, self.n_best, self.length_penalty, self.early_stopping)
        if self.groups < 1 or self.width % self.groups:
            raise UsageError(f"groups ({self.groups}) must divide width ({self.width})")
        if self.diversity_penalty < 0:
            raise UsageError("diversity_penalty must be >= 0")

    def search(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int,
               recorder: TreeRecorder | None = None) -> SearchResult:
        rec = recorder if recorder is not None else TreeRecorder(decoder, root)
        if max_new_tokens <= 0 or root.finished:
            return rec.result([root], [0.0])
        bg = self.width // self.groups  # B'
        keep = max(2, 1 + len(decoder.eos)) * bg
        pools = [_Finished(bg, self.length_penalty, self.early_stopping, max_new_tokens) for _ in range(self.groups)]
        # per group: running beams and their summed augmented objective
        running: list[list[Hypothesis]] = [[root] for _ in range(self.groups)]
        objective: list[list[float]] = [[0.0] for _ in range(self.groups)]
        active = [True] * self.groups
        base = root.logprob
        for step in range(max_new_tokens):
            live = [g for g in range(self.groups) if active[g] and running[g]]
            if not live:
                break
            flat_beams = [h for g in live for h in running[g]]
            lp_all = decoder.log_probs(flat_beams)  # [sum R_g, V]
            rec.pruned(flat_beams)
            vsize = lp_all.shape[-1]
            chosen = torch.zeros(vsize, device=lp_all.device)  # [V] how often earlier groups picked each token at this step
            last = step + 1 == max_new_tokens
            row = 0
            for g in live:
                beams = running[g]
                lp = lp_all[row: row + len(beams)]  # [R_g, V]
                row += len(beams)
                aug = lp - self.diversity_penalty * chosen + torch.tensor(objective[g], device=lp.device)[:, None]  # [R_g, V]
                flat = aug.flatten()
                k = min(keep, int(torch.isfinite(flat).sum()))
                if k == 0:
                    active[g] = False
                    continue
                top = torch.topk(flat, k)
                pool = pools[g]
                accept = pool.accepting()
                nxt, nxt_obj, all_finish = [], [], True
                for rank, (val, i) in enumerate(zip(top.values.tolist(), top.indices.tolist())):
                    r, tok = divmod(i, vsize)
                    token_lp = float(lp[r, tok])
                    child = decoder.extend(beams[r], tok, token_lp)
                    if child.finished or last:
                        if rank < bg and accept:
                            pool.add(child, child.logprob - base, step + 1)
                        rec.add(child, logprob=token_lp, kept=rank < bg and accept, group=g)
                    else:
                        all_finish = False
                        kept = len(nxt) < bg
                        if kept:
                            nxt.append(child)
                            nxt_obj.append(val)
                            chosen[tok] += 1
                        rec.add(child, logprob=token_lp, kept=kept, group=g)
                running[g], objective[g] = nxt, nxt_obj
                best_lp = max((h.logprob - base for h in nxt), default=None)
                pool.check(best_lp, step + 1)
                if pool.done() or all_finish:
                    active[g] = False
        items = sorted((it for p in pools for it in p.items), key=lambda x: -x[0])
        items = items[: self.n_best or self.width]
        return rec.result([h for _, h in items], [s for s, _ in items])
