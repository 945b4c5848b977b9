"""Declared extension points (issue 26): optional capabilities are protocols that callers test with
``isinstance``, wrappers say which ones they offer, every built-in strategy returns its tree, and
``import trellis`` loads neither transformers nor networkx."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from fakes import HashLM, tiny_llama
from trellis.constrain import compile
from trellis.constrain.base import (ForcesTokens, HasByteClasses, HintsCompletion, Refines, Unconstrained,
                                    forced_tokens, refine_scores)
from trellis.constrain.finish import Budgeted
from trellis.constrain.tools import EitherConstraint
from trellis.decoder import Decoder
from trellis.search import Greedy, Sample, TreeSearch
from trellis.search.tree import TreeRecorder
from trellis.speculate import Composite, NamedDrafter, PromptLookup, drafter_name
from trellis.tokens import Vocabulary

BYTES = tuple(bytes([b]) for b in range(32, 127))
VOCAB = Vocabulary((b"",) + BYTES + (b"true", b"null", b'{"'), eos=frozenset({0}), special=frozenset({0}))
JSON = compile("json.lark", VOCAB, cache=False)


def test_the_grammar_engine_declares_its_capabilities():
    assert isinstance(JSON, ForcesTokens) and isinstance(JSON, HintsCompletion) and isinstance(JSON, HasByteClasses)
    assert not isinstance(JSON, Refines)
    plain = Unconstrained(VOCAB)
    assert not isinstance(plain, (ForcesTokens, Refines, HintsCompletion, HasByteClasses))
    assert forced_tokens(plain, plain.start()) == []
    scores = torch.randn(2, len(VOCAB))
    assert refine_scores(plain, [0, 0], scores) is scores


def test_budgeted_offers_only_the_capabilities_that_read_its_own_states():
    """``Budgeted`` forwards the inner constraint's data attributes, but not ``completion_hint`` or
    ``byte_classes``: those take inner states, and a budgeted state is (inner, left, steered)."""
    b = Budgeted(JSON, 10)
    assert isinstance(b, ForcesTokens) and isinstance(b, Refines)
    assert not isinstance(b, HintsCompletion) and not isinstance(b, HasByteClasses)
    with pytest.raises(AttributeError):
        b.completion_hint  # noqa: B018
    assert b.vocab is VOCAB
    # forced tokens through the wrapper: after `t` the grammar forces "rue" (as the inner says)
    t = VOCAB.tokens.index(b"t")
    inner = JSON.advance(JSON.start(), t)
    assert forced_tokens(b, b.advance(b.start(), t)) == forced_tokens(JSON, inner)[:8]
    assert forced_tokens(JSON, inner)


def test_either_constraint_forces_through_its_live_branch():
    e = EitherConstraint(JSON, Unconstrained(VOCAB))
    assert isinstance(e, ForcesTokens)
    t = VOCAB.tokens.index(b"t")
    sa = JSON.advance(JSON.start(), t)
    assert forced_tokens(e, (sa, None)) == forced_tokens(JSON, sa)
    assert forced_tokens(e, (sa, 0)) == []  # two live branches: nothing forced


@pytest.mark.parametrize("strategy", [Greedy(), Sample(generator=torch.Generator().manual_seed(3))])
def test_one_path_strategies_return_their_path_as_a_tree(strategy):
    dec = Decoder(HashLM(len(VOCAB), seed=1), JSON, temperature=0.0 if isinstance(strategy, Greedy) else 1.0,
                  vocab=VOCAB)
    root = dec.start([1])
    assert isinstance(strategy, TreeSearch)
    rec = TreeRecorder(dec, root)
    res = strategy.search(dec, root, max_new_tokens=12, recorder=rec)
    if isinstance(strategy, Sample):  # the same draws again for __call__
        strategy = Sample(generator=torch.Generator().manual_seed(3))
    (hyp,) = strategy(dec, root, max_new_tokens=12)
    assert res.hypotheses == (hyp,)
    tree = res.tree
    assert tree.number_of_nodes() == len(hyp.tokens) - len(root.tokens) + 1  # a path: root + one node a token
    leaf = max(tree.nodes, key=lambda n: tree.nodes[n]["depth"])
    assert tree.nodes[leaf]["returned"] == 0 and tree.nodes[leaf]["score"] == pytest.approx(hyp.logprob)
    total = sum(d["logprob"] for n, d in tree.nodes(data=True) if n != 0)
    assert total == pytest.approx(hyp.logprob - root.logprob)


def test_drafters_name_themselves_or_are_named_by_their_class():
    class Anonymous:
        def draft(self, decoder, hyp, *, max_nodes, max_depth):
            raise AssertionError("not called")

    assert isinstance(PromptLookup(), NamedDrafter) and drafter_name(PromptLookup()) == "prompt-lookup"
    assert not isinstance(Anonymous(), NamedDrafter) and drafter_name(Anonymous()) == "Anonymous"
    assert drafter_name(Composite([PromptLookup()])) == "composite"


def test_import_trellis_loads_neither_transformers_nor_networkx():
    code = ("import sys, trellis, trellis.constrain, trellis.search, trellis.speculate; "
            "print(sorted(m for m in ('transformers', 'networkx', 'accelerate', 'gguf') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_load_without_the_model_extra_says_which_extra(monkeypatch):
    import importlib.util

    from trellis import models

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    for model in (None, "/nonexistent/model.gguf"):  # the embedded model and GGUF files are converted
        with pytest.raises(models.ModelExtraMissing, match=r"gguf.*trellis-decoding\[model\]"):
            models.load(model)
    with pytest.raises(FileNotFoundError, match="no such model path"):  # a HF folder needs no gguf
        models.load("/nonexistent")
    # a model object the caller built needs transformers alone
    handle = models.load(tiny_llama())
    assert handle.tokenizer is None and handle.model.training is False


def test_misuse_raises_a_typed_usage_error_that_is_still_a_value_error():
    from trellis import TrellisError, UsageError
    from trellis.constrain.errors import GrammarError
    from trellis.search import MCTS, strategy_from_name

    cases = [lambda: Decoder(HashLM(len(VOCAB)), JSON, repetition_penalty=0, vocab=VOCAB),
             lambda: strategy_from_name("no-such-strategy"),
             lambda: MCTS(reward=lambda h: 0.0, k=0),
             lambda: Budgeted(JSON, 0),
             lambda: compile("json.lark", VOCAB, engine="no-such-engine")]
    for make in cases:
        with pytest.raises(UsageError) as info:
            make()
        assert isinstance(info.value, ValueError) and isinstance(info.value, TrellisError)
    assert issubclass(GrammarError, TrellisError)
