"""Draft & Verify's adaptive draft-exiting: a model drafter's chain ends at its first unsure token,
and the confidence threshold follows the acceptance the target grants."""

from __future__ import annotations

import pytest

from fakes import ScriptedLM
from trellis.decoder import Decoder
from trellis.speculate import AdaptiveDraftExit, ModelDrafter, Speculative
from trellis.search import Greedy


class UnsureAt(ScriptedLM):
    """ScriptedLM whose top token at the generation steps in ``unsure`` has a logit margin of
    only 0.5 over the rest (top-1 probability ~0.08 over 20 tokens) instead of 10."""

    def __init__(self, vocab_size: int, script, prompt_len: int, unsure: set[int]) -> None:
        super().__init__(vocab_size, script, prompt_len)
        self.unsure = unsure

    def _row(self, prefix):
        row = super()._row(prefix)
        if len(prefix) - self.prompt_len in self.unsure:
            row = row / 20.0
        return row


def test_threshold_rises_on_rejections_falls_on_acceptance_and_ignores_capped_rounds():
    ex = AdaptiveDraftExit()
    assert ex.stop(0.49) and not ex.stop(0.51)
    ex.update(0, 4, capped=True)  # ran to the cap: says nothing about where to stop
    assert ex.gamma == 0.5 and ex.rate == 0.0
    for _ in range(20):
        ex.update(0, 4, capped=False)
    high = ex.gamma
    assert high > 0.5
    for _ in range(40):
        ex.update(3, 3, capped=False)
    assert ex.rate > ex.alpha and ex.gamma < high
    with pytest.raises(ValueError):
        AdaptiveDraftExit(alpha=1.5)


def test_chain_ends_at_its_first_unsure_token_unless_stopping_is_off():
    script = [4, 5, 6, 7, 8, 9]
    draft_lm = UnsureAt(20, script, prompt_len=2, unsure={2})
    dec = Decoder(draft_lm, temperature=0)
    hyp = dec.start([1, 3])
    stopping = ModelDrafter(draft_lm)
    d = stopping.draft(dec, hyp, max_nodes=6, max_depth=6)
    assert d.tree.tokens.tolist() == [4, 5, 6]  # the unsure token is proposed, then drafting stops
    assert not stopping._capped
    full = ModelDrafter(draft_lm, stopping=None).draft(dec, hyp, max_nodes=6, max_depth=6)
    assert full.tree.tokens.tolist() == script


def test_stopped_chains_stay_lossless_and_raise_the_threshold_when_rejected():
    # the target follows the draft for 2 tokens, then disagrees exactly where the draft is unsure
    target = ScriptedLM(20, [4, 5, 11, 12, 13, 14] * 4, prompt_len=2)
    draft_lm = UnsureAt(20, [4, 5, 6, 7, 8, 9] * 4, prompt_len=2, unsure={2})
    dec = Decoder(target, temperature=0)
    drafter = ModelDrafter(draft_lm)
    spec = Speculative(drafter, max_nodes=6)
    out = spec(dec, dec.start([1, 3]), max_new_tokens=12)[0]
    ref = Greedy()(dec, dec.start([1, 3]), max_new_tokens=12)[0]
    assert out.tokens == ref.tokens
    assert drafter.stopping.gamma > 0.5  # acceptance below alpha pushed the threshold up
