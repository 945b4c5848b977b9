"""``declares``: a capability check per class, equal to ``isinstance`` against the protocol."""

from __future__ import annotations

from trellis.capabilities import declares
from trellis.constrain.base import Refines
from trellis.lm_proxy import LMProxy, Normalises, ReindexesRows
from trellis.search.logits_memo import LogitsMemo
from tests.fakes import HashLM


class _Steers:
    def refine(self, states, scores):  # noqa: ANN001, ANN201
        return scores


def test_declares_answers_what_isinstance_answers_per_class() -> None:
    lm = HashLM(16)
    memo = LogitsMemo(lm, 1 << 20)
    cases = [(lm, Normalises), (lm, ReindexesRows), (memo, Normalises), (memo, ReindexesRows),
             (LMProxy(lm), Normalises), (_Steers(), Refines), (object(), Refines)]
    for obj, proto in cases:
        assert declares(obj, proto) == isinstance(obj, proto)
        assert declares(obj, proto) == isinstance(obj, proto)  # the cached answer
    assert declares(memo, Normalises) and not declares(lm, Normalises) and declares(_Steers(), Refines)
