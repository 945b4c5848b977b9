"""Best-of-N and test-guided best-of-N on a vLLM engine: the N samples as ONE request.

Best-of-N's samples are independent given the prompt, so vLLM can draw them as one request with
``n=N``: the prompt is prefilled once and its KV blocks shared by the N sequences (vLLM forks
them), the N sequences decode in its continuous batch beside other requests, and each is
constrained by ``TrellisLogitsProcessor`` (the request's ``extra_args``). The ranking is trellis'
own: ``BestOfN.rank`` (finished first, then the scorer) and, for code, ``TestGuided``'s visible
tests as the reward, the held-out tests judging the winner (``solve_best_of_n``, what ``solve(...,
strategy="best-of-n")`` does on transformers).

    llm = LLM(model_dir, logits_processors=[TrellisLogitsProcessor], logprobs_mode="processed_logprobs")
    sampler = VLLMSampler(llm)
    ranked = best_of_n(sampler, prompt, BestOfN(n=8), max_new_tokens=64, temperature=0.8,
                       extra_args={"trellis_schema": schema})

Exactness of the scores: trellis' ``Hypothesis.logprob`` is the sum of the *masked, warped,
renormalised* log-probs of the sampled tokens. vLLM reports that only with
``logprobs_mode="processed_logprobs"`` (after logits processors, temperature, top-k/top-p); its
default reports the raw model's. So a scorer that reads log-probs ("logprob", "mean_logprob")
refuses an engine in another mode; "mbr" and rewards do not read them. What vLLM does not expose:
the full next-token distribution of a prefix on demand, which MCTS priors, beam search and
lookahead need step by step (top-k logprobs are not exact for them): those strategies stay on the
transformers path.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import networkx as nx

from trellis.decoder import Hypothesis
from trellis.errors import UsageError
from trellis.search.best_of_n import BestOfN

__all__ = ["VLLMSampler", "best_of_n", "solve_best_of_n", "CODE_STOPS"]

# Top-level statements that end a completed function: stop strings only save tokens (vLLM cuts
# the output before them); the program is cut where its function ends by ``extract_program``.
CODE_STOPS = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\nassert ", "\n#", "\n@", "\nimport ",
              "\nfrom ", '\n"""')


@dataclass
class VLLMSampler:
    """A ``vllm.LLM`` (built with ``TrellisLogitsProcessor`` for constrained requests) drawing
    ``n`` samples of one prompt per request. ``tokens`` / ``seconds`` count what it has spent:
    prompt tokens prefilled once per request plus every generated token, and wall time."""

    llm: Any
    tokens: int = 0
    seconds: float = 0.0

    @property
    def logprobs_processed(self) -> bool:
        cfg = self.llm.llm_engine.vllm_config.model_config
        return cfg.logprobs_mode == "processed_logprobs"

    def sample(self, prompt: str | Sequence[int], n: int, *, max_new_tokens: int, temperature: float = 1.0,
               top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
               extra_args: Mapping[str, Any] | None = None, stop: Sequence[str] = ()) -> list[Hypothesis]:
        """``n`` samples of ``prompt`` as hypotheses (prompt ids + output ids; ``logprob`` the
        summed processed log-probs, 0.0 when the engine does not report them; ``finished`` when
        EOS or a stop string ended it). Constraint states are not carried (``state=None``)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if temperature <= 0:
            raise UsageError("best-of-n samples: it needs temperature > 0")
        keep_logprobs = self.logprobs_processed  # raw ones are not the sampled distribution's: not asked for
        params = SamplingParams(n=n, temperature=temperature, top_k=top_k if top_k > 0 else -1, top_p=top_p,
                                seed=seed, max_tokens=max_new_tokens, logprobs=0 if keep_logprobs else None,
                                extra_args=dict(extra_args) if extra_args else None, stop=list(stop))
        req = TokensPrompt(prompt_token_ids=list(prompt)) if not isinstance(prompt, str) else prompt
        t0 = time.perf_counter()
        out = self.llm.generate([req], params, use_tqdm=False)[0]
        self.seconds += time.perf_counter() - t0
        ids = tuple(out.prompt_token_ids)
        self.tokens += len(ids)
        hyps = []
        for c in out.outputs:
            new = tuple(c.token_ids)
            self.tokens += len(new)
            lp = sum(next(iter(d.values())).logprob for d in (c.logprobs or []) if d) if keep_logprobs else 0.0
            hyps.append(Hypothesis(ids + new, len(ids), None, float(lp), c.finish_reason == "stop"))
        return hyps


def best_of_n(sampler: VLLMSampler, prompt: str | Sequence[int], strategy: BestOfN, *, max_new_tokens: int,
              temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
              extra_args: Mapping[str, Any] | None = None) -> tuple[list[Hypothesis], list[float]]:
    """``strategy.n`` samples drawn in one vLLM request, ranked by ``strategy.rank`` (best first)."""
    if strategy.scorer in ("logprob", "mean_logprob") and not sampler.logprobs_processed:
        raise UsageError(f"scorer {strategy.scorer!r} reads the sampled distribution's log-probs: build the "
                         "LLM with logprobs_mode='processed_logprobs' (vLLM's default reports the raw model's)")
    hyps = sampler.sample(prompt, strategy.n, max_new_tokens=max_new_tokens, temperature=temperature,
                          top_k=top_k, top_p=top_p, seed=seed, extra_args=extra_args)
    return strategy.rank(hyps)


def solve_best_of_n(sampler: VLLMSampler, prompt: str, tests: Any, *, held_out: Any = None,
                    visible_fraction: float = 0.5, entry_point: str | None = None, n: int = 8,
                    temperature: float = 1.0, max_new_tokens: int = 256, seed: int = 0,
                    timeout: float = 5.0) -> Any:
    """Test-guided best-of-N on vLLM: ``n`` completions of ``prompt`` in one request, each program
    (cut where its function ends) run against the visible tests, the best by visible pass
    fraction (then by the model's order) judged on the held-out tests. Same split, reward,
    sandbox and ``Solution`` as ``solve(..., strategy="best-of-n")``; ``tokens`` counts the prompt
    once plus every generated token."""
    from trellis.codegen import Solution, TestGuided, run_tests, visible_and_held_out
    from trellis.codegen.syntax import extract_program

    t0 = time.monotonic()
    visible, hidden = visible_and_held_out(prompt, tests, entry_point=entry_point, held_out=held_out,
                                           visible_fraction=visible_fraction, seed=seed)
    guided = TestGuided(visible, strategy="best-of-n", prompt=prompt, n=n, timeout=timeout, progress=False)
    spent0 = sampler.tokens
    hyps = sampler.sample(prompt, n, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                          stop=CODE_STOPS)
    tok = sampler.llm.get_tokenizer()
    programs = [extract_program(prompt, tok.decode(h.new_tokens, skip_special_tokens=True)) for h in hyps]
    rewards = [guided.report(p).fraction for p in programs]
    program_of = {h.new_tokens: p for h, p in zip(hyps, programs)}
    reward_of = {h.new_tokens: r for h, r in zip(hyps, rewards)}
    ranked, _ = BestOfN(n=n, scorer=lambda h: reward_of[h.new_tokens], early_stop=False).rank(hyps)
    best = program_of[ranked[0].new_tokens]
    tree = nx.DiGraph()
    tree.add_node(0, tokens=hyps[0].tokens[:hyps[0].prompt_len])
    for i, (h, r) in enumerate(zip(hyps, rewards), start=1):
        tree.add_node(i, tokens=h.new_tokens, reward=r, finished=h.finished)
        tree.add_edge(0, i)
    return Solution(program=best, completion=best[len(prompt):] if best.startswith(prompt) else best,
                    visible=guided.report(best),
                    held_out=run_tests(best, hidden, timeout=timeout) if len(hidden) else None,
                    tokens=sampler.tokens - spent0, seconds=time.monotonic() - t0,
                    programs=len(guided.reports), pruned=0, strategy="best-of-n (vLLM)", tree=tree)
