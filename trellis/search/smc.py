"""Sequential Monte Carlo (SMC) over token sequences under a constraint: grammar-aligned sampling.

Masking every step (what ``Sample`` does) draws from a distorted distribution: it renormalises at
each token, so a prefix the model would have avoided, had it seen that the grammar leads nowhere
likely from there, keeps the mass of everything it cut (Park et al., NeurIPS 2024, "Grammar-Aligned
Decoding"). The target here is the model CONDITIONED on the language,

    pi(x) = p(x) 1_L(x) phi(x) / Z,    Z = sum_x p(x) 1_L(x) phi(x)  (= P(x in L) without potentials)

approximated by N weighted particles (Lew et al. 2023, "Sequential Monte Carlo Steering of Large
Language Models using Probabilistic Programs"; Loula et al., ICLR 2025, "Syntactic and Semantic
Control of Large Language Models via Sequential Monte Carlo"). Symbols as there:

- proposal q(x_t | x_<t): the locally constrained model, p masked by the grammar's exact mask and
  renormalised (``Decoder.proposal``);
- incremental weight: p(x_t | x_<t) 1_L / q(x_t | x_<t) = the allowed mass
  Z_t = sum_{v allowed} p(v | x_<t): exact, one masked log-sum-exp per row, no rejection sampling;
  times the twist ratio psi_t / psi_{t-1} of the potentials' ``prefix`` values, and at EOS the
  correction phi / psi_{t-1} (``trellis.search.potentials``);
- resampling of the unfinished particles when their effective sample size
  ESS = (sum w)^2 / sum w^2 falls below ``ess_threshold`` times their number
  (``trellis.search.resampling``); their weights then become their mean, so
  Z^ = (1/N) sum_i w_i at the end is the unbiased estimate of Z, and log Z^ of log P(x in L).
  Finished particles keep their weight and their place (resampling within a subset that keeps
  its total weight is still unbiased); particles with weight 0 give their slots to the copies.

All live particles decode in lockstep: ONE batched forward per step (``Decoder.proposal`` over the
live rows). After resampling the model is asked to copy its KV rows (``ReindexesRows``); a
strategy never touches caches. The last
step of ``max_new_tokens`` proposes EOS alone, so the target is the language's outputs of at most
``max_new_tokens`` tokens, EOS included: a particle that cannot end there gets weight 0
(``ending="length"``).

p is the decoder's model after its penalties, bans and warpers but without the mask (temperature
1 and no filters: the model itself). ``stop`` strings are refused (the target ends at EOS).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal, Sequence

import torch

from trellis.capabilities import declares
from trellis.decoder import FEW, Decoder, Hypothesis, Proposal
from trellis.errors import UsageError
from trellis.lm_proxy import ReindexesRows
from trellis.sampling import draw, draw_few, sample
from trellis.search.logits_memo import LogitsMemo
from trellis.search.potentials import Potential, as_log_weight, prefix_text
from trellis.search.resampling import Resampler, log_ess, mean_log_weight, normalised, resampler
from trellis.search.tree import Searching, SearchResult, TreeRecorder

Ending = Literal["eos", "length", "rejected"]
NEG_INF = float("-inf")


@dataclass(frozen=True)
class Particle:
    """One particle at the end: its hypothesis, log-weight (relative to the others of its run) and
    how it ended: ``"eos"`` (an output of the language), ``"length"`` (no EOS possible within the
    budget: weight 0) or ``"rejected"`` (a potential returned -inf, or no token was allowed)."""

    hypothesis: Hypothesis
    log_weight: float
    ending: Ending
    text: str


@dataclass(frozen=True)
class SMCResult:
    """What one SMC run returns.

    ``particles`` in particle order; ``posterior``: each distinct output text and its probability
    (normalised weights summed over the particles that wrote it), most probable first (empty when
    every weight is 0); ``log_z``: log Z^, the estimate of log P(x in L) (times the potentials);
    ``ess``: the effective sample size of the unfinished (and dead) particles after each step's
    weighting, before resampling (what the threshold is compared with);
    ``resamples``: how many steps resampled; ``output``: the particle ``SMC.output`` chose;
    ``live``: the particles extended at each step; ``rows``: the distinct prefixes among them, the
    rows of the step's one batched forward."""

    particles: tuple[Particle, ...]
    posterior: dict[str, float]
    log_z: float
    ess: tuple[float, ...]
    resamples: int
    output: Particle
    live: tuple[int, ...] = ()
    rows: tuple[int, ...] = ()

    def hypotheses(self) -> list[Hypothesis]:
        """The output first, then every other particle by weight (heaviest first)."""
        rest = sorted((p for p in self.particles if p is not self.output), key=lambda p: -p.log_weight)
        return [self.output.hypothesis] + [p.hypothesis for p in rest]

    def sample(self, generator: torch.Generator | None = None) -> str:
        """One output text drawn from the posterior."""
        if not self.posterior:
            raise UsageError("every particle has weight 0: the posterior is empty")
        texts = list(self.posterior)
        return texts[int(draw(torch.tensor([self.posterior[t] for t in texts], dtype=torch.float64), generator))]


def pooled_posterior(results: Sequence[SMCResult]) -> tuple[dict[str, float], float]:
    """Many independent runs as one estimate: each run's posterior weighted by its Z^ (Z^ times a
    run's weighted particles is an unbiased estimate of the unnormalised target, so the pool is
    consistent as runs grow even for a fixed, small N). Returns (posterior, log of the mean Z^)."""
    if not results:
        raise UsageError("no results to pool")
    log_zs = torch.tensor([r.log_z for r in results], dtype=torch.float64)
    if not bool(torch.isfinite(log_zs).any()):
        return {}, NEG_INF
    share = torch.softmax(log_zs, 0).tolist()
    out: dict[str, float] = {}
    for s, r in zip(share, results):
        for text, p in r.posterior.items():
            out[text] = out.get(text, 0.0) + s * p
    log_z = float(torch.logsumexp(log_zs, 0)) - math.log(len(results))
    return dict(sorted(out.items(), key=lambda kv: -kv[1])), log_z


@dataclass(frozen=True)
class SMC(Searching):
    """Sequential Monte Carlo with ``particles`` particles (see the module docstring).

    ``ess_threshold``: resample the unfinished particles when their ESS < ``ess_threshold`` times
    their number (0: never, importance sampling; 1: whenever their weights differ); ``resampler``: ``"systematic"`` or ``"multinomial"``;
    ``potentials``: ``Potential``s whose log weights add (``trellis.search.potentials``);
    ``output``: which particle becomes the result, ``"sample"`` (drawn from the posterior: repeated
    calls sample the conditioned model) or ``"map"`` (the most probable distinct output);
    ``generator`` seeds the proposal, the resampling and the output's draw; ``memo_bytes``: the
    next-token logits of the prefixes seen are kept with the model across runs and calls
    (``LogitsMemo.shared``, least recently used dropped beyond this size, ~1 MB a prefix for a
    262k vocabulary; 0: off), so repeated runs on one prompt, the way posteriors are pooled, pay
    no forward for what an earlier run already computed."""

    particles: int = 8
    ess_threshold: float = 0.5
    resampler: Resampler = "systematic"
    potentials: tuple[Potential, ...] = ()
    output: Literal["sample", "map"] = "sample"
    generator: torch.Generator | None = field(default=None, compare=False)
    memo_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        if not isinstance(self.particles, int) or self.particles < 1:
            raise UsageError(f"particles must be an integer >= 1, got {self.particles!r}")
        if not 0.0 <= self.ess_threshold <= 1.0:
            raise UsageError(f"ess_threshold must be in [0, 1], got {self.ess_threshold}")
        resampler(self.resampler)  # validates the name
        if self.output not in ("sample", "map"):
            raise UsageError(f"output must be 'sample' or 'map', got {self.output!r}")
        object.__setattr__(self, "potentials", tuple(self.potentials))
        bad = [p for p in self.potentials if not isinstance(p, Potential)]
        if bad:
            raise UsageError(f"potentials need prefix(text) and complete(text) methods: {bad[0]!r}")

    # ------------------------------------------------------------------ the strategy
    def search(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int,
               recorder: TreeRecorder | None = None) -> SearchResult:
        """The run's hypotheses (output first) with their log-weights, and the explored tree."""
        res = self.weighted(decoder, root, max_new_tokens=max_new_tokens, recorder=recorder)
        rec = recorder if recorder is not None else TreeRecorder.off(decoder, root)
        weight = {id(p.hypothesis): p.log_weight for p in res.particles}
        hyps = res.hypotheses()
        return rec.result(hyps, [weight.get(id(h), NEG_INF) for h in hyps])

    def weighted(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int,
                 recorder: TreeRecorder | None = None) -> SMCResult:
        """Run SMC from ``root`` for at most ``max_new_tokens`` tokens per particle."""
        if decoder.stop:
            raise UsageError("SMC's target ends at EOS: stop strings are not supported (end the grammar there)")
        if self.potentials and decoder.vocab is None:
            raise UsageError("potentials score text: the decoder needs a vocabulary")
        if root.finished:
            raise UsageError("SMC needs an unfinished root")
        rec = recorder if recorder is not None else TreeRecorder.off(decoder, root)
        if self.memo_bytes > 0:
            decoder = replace(decoder, lm=LogitsMemo.shared(decoder.lm, self.memo_bytes))
        run = _Run(self, decoder, root, rec)
        for t in range(max_new_tokens):
            if not run.step(last=t == max_new_tokens - 1):
                break
        return run.result()


class _Run:
    """The mutable state of one SMC run (the strategy object stays frozen)."""

    def __init__(self, smc: SMC, decoder: Decoder, root: Hypothesis, rec: TreeRecorder) -> None:
        n = smc.particles
        self.smc, self.decoder, self.rec = smc, decoder, rec
        self.hyps: list[Hypothesis] = [root] * n
        self.log_w: list[float] = [0.0] * n
        self.log_psi: list[float] = [0.0] * n  # the potentials' prefix value of each particle's text
        self.ending: list[Ending | None] = [None] * n  # None: live
        self.ess: list[float] = []
        self.live: list[int] = []
        self.rows: list[int] = []
        self.resamples = 0
        self._resample = resampler(smc.resampler)
        self._memo: dict[tuple[tuple[int, ...], bool], float] = {}  # potentials by (tokens, complete)

    def step(self, *, last: bool) -> bool:
        """Extend every live particle by one token (one forward), weight, maybe resample; False
        when no particle is left to extend."""
        live = [i for i, e in enumerate(self.ending) if e is None]
        if not live:
            return False
        dec, gen = self.decoder, self.smc.generator
        # Copies of one ancestor that drew the same tokens share a prefix: forward it once (after
        # a resampling step most rows of a peaked model are such copies).
        unique: dict[tuple[int, ...], int] = {}
        firsts: list[Hypothesis] = []
        row_of: list[int] = []
        for i in live:
            r = unique.setdefault(self.hyps[i].tokens, len(firsts))
            if r == len(firsts):
                firsts.append(self.hyps[i])
            row_of.append(r)
        self.live.append(len(live))
        self.rows.append(len(firsts))
        prop = dec.proposal(firsts, eos_only=last)  # one row per distinct prefix
        toks, lq = _draw(prop, row_of, gen)
        masses = prop.log_mass.tolist()
        for j, i in enumerate(live):
            if masses[row_of[j]] == NEG_INF:  # nothing allowed (at the last step: no EOS possible)
                self.log_w[i], self.ending[i] = NEG_INF, "length" if last else "rejected"
                self.rec.mark(self.hyps[i], smc_ending=self.ending[i])
                continue
            tok = toks[j]
            h = dec.extend(self.hyps[i], tok, lq[j])
            self.hyps[i] = h
            self.log_w[i] += masses[row_of[j]] + self._twist(i, h)
            self.rec.add(h, logprob=lq[j])
            self.rec.visit(h)
            if h.finished:
                self.ending[i] = "eos" if self.log_w[i] > NEG_INF else "rejected"
            elif self.log_w[i] == NEG_INF:
                self.ending[i] = "rejected"
        # Resampling acts on the pool of unfinished particles and of dead ones (weight 0, their
        # slots reused); a finished particle keeps its weight and its place. The pool's total
        # weight is kept (each copy gets the pool's mean), so Z^ stays unbiased. Resampling
        # finished particles too let unfinished ones that had not yet paid for the grammar's
        # next constraint (still inside a free string, say) replace finished outputs, and then
        # run out of budget: on Gemma's JSON extraction most runs ended with no output at all.
        pool = [i for i, x in enumerate(self.ending) if x is None or self.log_w[i] == NEG_INF]
        pool_w = [self.log_w[i] for i in pool]
        e = log_ess(pool_w) if pool else NEG_INF
        self.ess.append(math.exp(e) if e > NEG_INF else 0.0)
        rows = dict(zip(live, row_of))  # particle -> its row in this step's batch
        ancestors = list(range(len(self.hyps)))
        limit = self.smc.ess_threshold * len(pool)
        if e > NEG_INF and limit > 0 and e < math.log(limit):
            picks = self._resample(normalised(pool_w), len(pool), gen)
            mean = mean_log_weight(pool_w)
            for slot, k in zip(pool, picks):
                ancestors[slot] = pool[k]
            self.hyps = [self.hyps[a] for a in ancestors]
            self.log_psi = [self.log_psi[a] for a in ancestors]
            self.ending = [self.ending[a] for a in ancestors]
            for slot in pool:
                self.log_w[slot] = mean
            self.resamples += 1
        lm = dec.lm
        if declares(lm, ReindexesRows):  # the next batch's rows continue these rows of this one
            lm.reindex_rows([rows[ancestors[j]] for j, x in enumerate(self.ending) if x is None])
        return True

    def _twist(self, i: int, h: Hypothesis) -> float:
        """log psi_t - log psi_{t-1} for an unfinished particle, log phi - log psi_{t-1} at EOS."""
        pots = self.smc.potentials
        if not pots:
            return 0.0
        key = (h.tokens, h.finished)
        value = self._memo.get(key)
        if value is None:
            vocab = self.decoder.vocab
            assert vocab is not None
            if h.finished:
                value = as_log_weight(sum(p.complete(self.decoder.text(h)) for p in pots))
            else:
                text = prefix_text(vocab.decode(h.new_tokens))
                value = as_log_weight(sum(p.prefix(text) for p in pots))
            self._memo[key] = value
        before = self.log_psi[i]
        self.log_psi[i] = value
        if value == NEG_INF:
            return NEG_INF
        return value - before

    def result(self) -> SMCResult:
        dec = self.decoder
        for i, e in enumerate(self.ending):  # only when the loop ran out early (max_new_tokens < 1)
            if e is None:
                self.ending[i], self.log_w[i] = "length", NEG_INF
        texts = [dec.text(h) if dec.vocab is not None else repr(h.new_tokens) for h in self.hyps]
        parts = tuple(Particle(h, w, e, s) for h, w, e, s in zip(self.hyps, self.log_w, self.ending, texts))  # type: ignore[arg-type]
        finite = any(w > NEG_INF for w in self.log_w)
        posterior: dict[str, float] = {}
        if finite:
            for s, w in zip(texts, normalised(self.log_w).tolist()):
                if w > 0:
                    posterior[s] = posterior.get(s, 0.0) + w
            posterior = dict(sorted(posterior.items(), key=lambda kv: -kv[1]))
        log_z = mean_log_weight(self.log_w) if finite else NEG_INF
        out = self._choose(parts, posterior, finite)
        self.rec.mark(out.hypothesis, smc_output=True)
        return SMCResult(parts, posterior, log_z, tuple(self.ess), self.resamples, out, tuple(self.live),
                         tuple(self.rows))

    def _choose(self, parts: tuple[Particle, ...], posterior: dict[str, float], finite: bool) -> Particle:
        if not finite:  # nothing in the language: the longest attempt, marked by its ending
            return max(parts, key=lambda p: p.hypothesis.num_new)
        if self.smc.output == "map":
            best = next(iter(posterior))
            return max((p for p in parts if p.text == best), key=lambda p: p.log_weight)
        k = draw_few(normalised([p.log_weight for p in parts]).tolist(), 1, self.smc.generator)[0]
        return parts[k]


def _draw(prop: Proposal, row_of: list[int], generator: torch.Generator | None) -> tuple[list[int], list[float]]:
    """One token per particle from its row of the proposal, and its log q.

    Copies of one row draw together; a row that lists its few allowed tokens (most steps under a
    grammar) is sampled over those alone: on Gemma's 262,144-token rows, exp and a float64
    cumulative sum of the whole row took ~1 ms per particle per step (2026-11-28, 2-core AMD EPYC,
    bench_smc.py peer --task yesno, profiled), more than everything else in a step the memo served."""
    wanted: dict[int, int] = {}
    for r in row_of:
        wanted[r] = wanted.get(r, 0) + 1
    drawn: dict[int, list[tuple[int, float]]] = {}  # row -> its (token, log q) draws, in order
    for r, k in wanted.items():
        idx, vals = prop.allowed[r], prop.sparse_log_q[r]
        if idx is None or vals is None:
            row = prop.row(r)
            toks = sample(row.expand(k, -1), generator)
            drawn[r] = list(zip(toks.tolist(), row[toks].tolist()))
        elif len(idx) == 0:
            drawn[r] = [(-1, NEG_INF)] * k  # nothing allowed: the particle ends with weight 0
        elif len(idx) <= FEW:
            lq = vals.tolist()
            ids = idx.tolist()
            drawn[r] = [(ids[j], lq[j]) for j in draw_few(vals.exp().tolist(), k, generator)]
        else:
            picks = draw(vals.exp().expand(k, -1), generator).flatten()
            drawn[r] = list(zip(idx[picks].tolist(), vals[picks].tolist()))
    for got in drawn.values():
        got.reverse()  # popped from the end below: each row's draws go to its particles in order
    picked = [drawn[r].pop() for r in row_of]
    return [t for t, _ in picked], [q for _, q in picked]
