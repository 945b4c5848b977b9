"""EntropyGate: pauses exactly where the masked next-token entropy exceeds the threshold, reranks by
lookahead there, is greedy elsewhere; calibrate() hits the requested pause rate on held-out prompts."""

from __future__ import annotations

import pytest
import torch

from fakes import HashLM
from tests.search.tasks import OnlyTokens, letters_vocab
from trellis.decoder import Decoder
from trellis.sampling import entropy
from trellis.search import EntropyGate, Greedy

V = 20


def test_pauses_only_where_entropy_exceeds_the_threshold():
    vocab = letters_vocab(V)
    lm = HashLM(V, seed=11, scale=1.5)
    dec = Decoder(lm, OnlyTokens(vocab, set(range(3, 15)), n=50))
    gate = EntropyGate(threshold=1.6, k=3, depth=3)
    paused = steady = 0
    for p in range(10):
        root = dec.start([1, p + 3])
        res = gate.search(dec, root, max_new_tokens=12)
        hyp = res.hypotheses[0]
        t = res.tree
        cur = root
        nodes = {d["depth"]: (n, d) for n, d in t.nodes(data=True) if "entropy" in d}
        assert len(nodes) == hyp.num_new
        for i, tok in enumerate(hyp.new_tokens):
            _, d = nodes[i]
            lp = dec.log_probs([cur])[0]
            h = float(entropy(lp.unsqueeze(0))[0])  # independent recomputation
            assert abs(h - d["entropy"]) < 1e-5
            assert d["paused"] == (h > gate.threshold)
            if d["paused"]:
                paused += 1
                assert tok in torch.topk(lp, 3).indices.tolist()
            else:
                steady += 1
                assert tok == int(lp.argmax())  # greedy where the model is sure
            cur = dec.extend(cur, tok, float(lp[tok]))
        assert abs(cur.logprob - hyp.logprob) < 1e-4
    assert paused >= 10 and steady >= 10  # both branches were exercised


def test_pausing_changes_choices_and_threshold_inf_is_greedy():
    dec = Decoder(HashLM(V, seed=2, scale=1.5))
    differ = 0
    for p in range(10):
        root = dec.start([1, p + 3])
        g = Greedy()(dec, root, max_new_tokens=10)[0]
        assert EntropyGate(threshold=float("inf"))(dec, root, max_new_tokens=10)[0].tokens == g.tokens
        differ += EntropyGate(threshold=0.0)(dec, root, max_new_tokens=10)[0].tokens != g.tokens
    assert differ >= 3  # the lookahead rerank is not a no-op


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_calibrate_gives_the_requested_pause_rate_on_held_out_prompts(rate):
    dec = Decoder(HashLM(V, seed=7, scale=2.0))
    train = [[1, a, b] for a in range(3, 8) for b in range(3, 7)]  # 20 prompts
    held = [[1, a, b] for a in range(8, 13) for b in range(7, 11)]  # 20 different prompts
    gate = EntropyGate.calibrate(dec, train, pause_rate=rate, max_new_tokens=15)
    pauses = steps = 0
    for p in held:
        res = gate.search(dec, dec.start(p), max_new_tokens=15)
        flags = [d["paused"] for _, d in res.tree.nodes(data=True) if "paused" in d]
        pauses += sum(flags)
        steps += len(flags)
    assert steps == 300
    print(f"requested {rate}, held-out pause rate {pauses / steps:.3f}")
    assert abs(pauses / steps - rate) <= 0.06, pauses / steps
