"""Speculative decoding is lossless: greedy outputs are identical to greedy decoding for every
drafter (with and without a constraint), and sampled outputs follow the target distribution
(chi-square, 20k draws) for chain and tree verifiers, with and without a mask."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
import torch

from fakes import BigramLM, tiny_gemma3, tiny_llama
from test_decoding import OnlyTokens
from trellis.decoder import Decoder, Hypothesis
from trellis.hf_lm import HFLanguageModel
from trellis.search import Greedy
from trellis.speculate import (ChainRejectionSampler, Composite, Draft, GrammarForced, GreedyVerifier, LayerSkip, ModelDrafter,
                               PromptLookup, Speculative, TokenRecycling, TreeRejectionSampler)
from trellis.speculate.base import prune
from trellis.tokens import TokenTree, Vocabulary


def vocab_of(n: int) -> Vocabulary:
    return Vocabulary(tuple([b""] * 3 + [bytes([65 + i % 26]) for i in range(n - 3)]), eos=frozenset({2}),
                      special=frozenset({0, 1, 2}))


PROMPTS = [[5, 6, 7, 8, 5, 6, 7, 9, 5, 6], [10, 11, 12, 13, 14, 10, 11], [3, 4] * 6, list(range(20, 40))]


def drafters(vocab_size: int, model) -> dict[str, object]:
    return {
        "prompt-lookup": PromptLookup(),
        "recycling": TokenRecycling(vocab_size),
        "recycling-static": TokenRecycling(vocab_size, dynamic=False),
        "draft-model": ModelDrafter(tiny_llama(vocab_size=vocab_size, seed=11)),
        "draft-tree": ModelDrafter(tiny_llama(vocab_size=vocab_size, seed=11), width=3),
        "self-draft": ModelDrafter(model, stopping=None),  # full chains: the target never rejects itself
        "layer-skip": LayerSkip(model),
        "composite": Composite([PromptLookup(), TokenRecycling(vocab_size)]),
    }


@pytest.mark.parametrize("make", [tiny_llama, tiny_gemma3])
@pytest.mark.parametrize("constrained", [False, True])
def test_greedy_speculation_is_token_for_token_greedy(make, constrained):
    model = make()
    v = model.config.vocab_size
    con = OnlyTokens(vocab_of(v), set(range(3, v, 2)) | {5, 6, 7, 8, 9}, n=6) if constrained else None
    dec = Decoder(HFLanguageModel(model), con, temperature=0) if con else Decoder(HFLanguageModel(model), temperature=0)
    for prompt in PROMPTS:
        if constrained:
            prompt = [t for t in prompt if t in con.allowed] or [5]
        ref = Greedy()(dec, dec.start(prompt), max_new_tokens=48)[0]
        for name, d in drafters(v, model).items():
            spec = Speculative(d, max_nodes=12)
            out = spec(dec, dec.start(prompt), max_new_tokens=48)[0]
            assert out.tokens == ref.tokens, name
            assert abs(out.logprob - ref.logprob) < 1e-3, name
            if name == "self-draft":  # the target drafting for itself is always right
                assert spec.stats.rounds < 48 / 2


def test_grammar_forced_drafter_proposes_what_the_constraint_forces():
    class Forcing(OnlyTokens):
        def forced_tokens(self, state):
            return [7, 7, 7] if state < 3 else []

    model = tiny_llama()
    con = Forcing(vocab_of(97), {7, 8}, n=5)
    dec = Decoder(HFLanguageModel(model), con, temperature=0)
    ref = Greedy()(dec, dec.start([5]), max_new_tokens=10)[0]
    spec = Speculative(GrammarForced())
    out = spec(dec, dec.start([5]), max_new_tokens=10)[0]
    assert out.tokens == ref.tokens and spec.stats.drafted > 0


def test_grammar_forced_then_continues_from_the_chain_end():
    class Forcing(OnlyTokens):
        def forced_tokens(self, state):
            return [7, 8] if state == 0 else []

    @dataclass
    class Echo:  # proposes the last two tokens of whatever hypothesis it is given
        name: str = "echo"

        def draft(self, decoder, hyp, *, max_nodes, max_depth):
            return Draft(TokenTree.from_paths([list(hyp.tokens[-2:])[:max_depth]]), None, ("echo",) * 2)

    model = tiny_llama()
    con = Forcing(vocab_of(97), {7, 8}, n=6)
    dec = Decoder(HFLanguageModel(model), con, temperature=0)
    d = GrammarForced(then=Echo()).draft(dec, dec.start([5]), max_nodes=8, max_depth=8)
    assert d.tree.tokens.tolist() == [7, 8, 7, 8] and d.tree.parents.tolist() == [-1, 0, 1, 2]
    assert d.sources == ("grammar-forced",) * 2 + ("echo",) * 2
    later = dec.extend(dec.extend(dec.start([5]), 7), 8)  # nothing forced: the follower drafts alone
    assert GrammarForced(then=Echo()).draft(dec, later, max_nodes=8, max_depth=8).tree.tokens.tolist() == [7, 8]
    ref = Greedy()(dec, dec.start([5]), max_new_tokens=10)[0]
    spec = Speculative(GrammarForced(then=Composite([PromptLookup(), TokenRecycling(97)])))
    assert spec(dec, dec.start([5]), max_new_tokens=10)[0].tokens == ref.tokens


def test_prune_drops_forbidden_nodes_and_their_subtrees():
    dec = Decoder(BigramLM(10), OnlyTokens(vocab_of(10), {4, 5}, n=1))
    tree = TokenTree(torch.tensor([4, 6, 5, 4, 2]), torch.tensor([-1, 0, 1, 0, 3]))  # 6 forbidden, 2 = EOS
    out = prune(dec, dec.start([3]), Draft(tree, None, ("x",) * 5))
    assert out.tree.tokens.tolist() == [4, 4] and out.tree.parents.tolist() == [-1, 0]


def test_lm_commit_keeps_the_cache_on_the_accepted_path():
    model = tiny_llama()
    lm = HFLanguageModel(model)
    dec = Decoder(lm, temperature=0)
    spec = Speculative(ModelDrafter(model))
    out = spec(dec, dec.start([5, 6, 7]), max_new_tokens=30)[0]
    # every round forwards only its bonus token plus the draft: no re-prefill of accepted tokens
    assert lm.stats.cache_resets == 1
    assert out.num_new == 30


# ----------------------------------------------------------------------------- distributions
@dataclass
class FixedTree:
    """A deterministic drafter that always proposes the same tree (children of the last token)."""

    paths: list[list[int]]

    def draft(self, decoder, hyp, *, max_nodes, max_depth):
        paths = [p[:max_depth] for p in self.paths if max_depth > 0]
        tree = TokenTree.from_paths(paths) if paths else Draft.empty().tree
        return Draft(tree, None, ("fixed",) * len(tree))


@dataclass
class SampledTree:
    """A stochastic drafter: ``k`` distinct children drawn WITHOUT replacement from the draft
    distribution q, each with one sampled grandchild (the RSD setting)."""

    lm: BigramLM
    k: int
    generator: torch.Generator

    def draft(self, decoder, hyp, *, max_nodes, max_depth):
        from dataclasses import replace

        dq = replace(decoder, lm=self.lm)
        q0 = dq.log_probs([hyp])[0].exp()  # [V]
        kids = torch.multinomial(q0, min(self.k, int((q0 > 0).sum())), replacement=False, generator=self.generator)
        toks, pars, probs = [], [], [q0]
        for c in kids.tolist():
            toks.append(c)
            pars.append(-1)
            probs.append(None)
        if max_depth > 1:
            for i, c in enumerate(list(toks)):
                h = dq.extend(hyp, c)
                qc = dq.log_probs([h])[0].exp()
                probs[i + 1] = qc
                toks.append(int(torch.multinomial(qc, 1, generator=self.generator)))
                pars.append(i)
                probs.append(torch.zeros_like(qc))
        probs = [p if p is not None else torch.zeros_like(q0) for p in probs]
        return Draft(TokenTree(torch.tensor(toks), torch.tensor(pars)), torch.stack(probs), ("sampled",) * len(toks))


def exact_two_token_distribution(dec: Decoder, root: Hypothesis) -> dict[tuple[int, int], float]:
    out = {}
    p1 = dec.log_probs([root])[0].exp()
    for a in torch.nonzero(p1).flatten().tolist():
        h = dec.extend(root, a)
        p2 = dec.log_probs([h])[0].exp()
        for b in torch.nonzero(p2).flatten().tolist():
            out[(a, b)] = float(p1[a] * p2[b])
    return out


V = 7


def make_decoder(masked: bool, target: BigramLM) -> Decoder:
    # the EOS id is never allowed here (n is unreachable), so every run emits exactly two tokens
    con = OnlyTokens(vocab_of(V), {3, 4, 5, 6}, n=99) if masked else None
    return Decoder(target, con, temperature=0.9) if con else Decoder(target, temperature=0.9)


CASES = {
    "chain-deterministic": lambda g: (FixedTree([[4, 5, 3]]), ChainRejectionSampler()),
    "chain-draft-model": lambda g: (ModelDrafter(BigramLM(V, seed=5), generator=g), ChainRejectionSampler()),
    "tree-deterministic": lambda g: (FixedTree([[4, 5], [3, 6], [6], [2, 4]]), TreeRejectionSampler()),
    "tree-sampled": lambda g: (SampledTree(BigramLM(V, seed=6), 3, g), TreeRejectionSampler()),
    "tree-draft-model": lambda g: (ModelDrafter(BigramLM(V, seed=5), generator=g), TreeRejectionSampler()),
    "tree-draft-model-dynamic": lambda g: (ModelDrafter(BigramLM(V, seed=5), width=2), TreeRejectionSampler()),
}


@pytest.mark.slow
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_sampled_distribution_equals_target_chi_square(case, masked):
    from scipy.stats import chisquare

    target = BigramLM(V, seed=1)
    dec = make_decoder(masked, target)
    root = dec.start([3])
    exact = exact_two_token_distribution(dec, root)
    g = torch.Generator().manual_seed(1234)
    drafter, verifier = CASES[case](g)
    n = 20000
    counts = dict.fromkeys(exact, 0)
    for _ in range(n):
        spec = Speculative(drafter, verifier, generator=g, max_nodes=8)
        out = spec(dec, root, max_new_tokens=2)[0].new_tokens
        assert tuple(out) in counts, f"{out} has probability 0 under the target"
        counts[tuple(out)] += 1
    keys = sorted(exact)
    obs = [counts[k] for k in keys]
    exp = [exact[k] * n for k in keys]
    s = sum(exp)
    exp = [e * n / s for e in exp]
    assert chisquare(obs, exp).pvalue > 1e-3, (case, masked)


def test_chi_square_test_detects_a_biased_verifier():
    """The statistical test above can fail: a verifier that always accepts is caught."""
    from scipy.stats import chisquare

    class AlwaysAccept:
        def __call__(self, target, draft, generator):
            return [0], int(torch.multinomial(target[1].exp(), 1, generator=generator))

    target = BigramLM(V, seed=1)
    dec = Decoder(target, temperature=0.9)
    root = dec.start([3])
    exact = exact_two_token_distribution(dec, root)
    g = torch.Generator().manual_seed(0)
    counts = dict.fromkeys(exact, 0)
    for _ in range(5000):
        out = Speculative(FixedTree([[4]]), AlwaysAccept(), generator=g)(dec, root, max_new_tokens=2)[0].new_tokens
        counts[tuple(out)] += 1
    keys = sorted(exact)
    assert chisquare([counts[k] for k in keys], [exact[k] * 5000 for k in keys]).pvalue < 1e-6


def test_greedy_verifier_on_a_tree():
    target = torch.full((4, 5), -10.0)
    target[0, 2] = 0.0  # after prefix: 2
    target[2, 4] = 0.0  # after node 1 (token 2): 4
    tree = TokenTree(torch.tensor([1, 2, 4]), torch.tensor([-1, -1, 1]))
    # node 2 (token 4) is accepted too; the bonus comes from its row
    target[3, 0] = 0.0
    assert GreedyVerifier()(target, Draft(tree)) == ([1, 2], 0)


def test_chain_sampler_refuses_trees():
    tree = TokenTree(torch.tensor([1, 2]), torch.tensor([-1, -1]))
    with pytest.raises(ValueError):
        ChainRejectionSampler()(torch.zeros(3, 4), Draft(tree), None)


GEMMA_PROMPTS = [
    "Summarize: The committee met on Tuesday. The committee agreed that the budget for the new library "
    "would be increased. The budget for the new library will be presented next week.\nSummary: The committee",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "The three most important inventions of the nineteenth century were",
]


def test_a_seed_fixes_the_node_budget_so_sampled_speculation_repeats():
    """The default budget learns from the wall clock, and a round's node count decides how many
    random draws it makes: with a generator (a seed) the budget is fixed, also when generate()
    sets the generator by dataclasses.replace, and one seed gives one output."""
    import dataclasses

    from trellis import generate
    from trellis.models import ModelHandle
    from trellis.speculate.base import SEEDED_NODES

    drafter = PromptLookup()
    assert Speculative(drafter).draft_budget.arms == (0, 2, 6, 15)
    assert Speculative(drafter, generator=torch.Generator()).draft_budget.arms == (SEEDED_NODES,)
    seeded = dataclasses.replace(Speculative(drafter), generator=torch.Generator())
    assert seeded.draft_budget.arms == (SEEDED_NODES,)
    assert Speculative(drafter, max_nodes=3, generator=torch.Generator()).draft_budget.arms == (3,)

    vocab = vocab_of(97)
    h = ModelHandle(tiny_llama(vocab_size=97, seed=4), None, vocab, "tiny")
    prompt = [5, 6, 7, 8, 5, 6, 7, 9, 5, 6]
    outs = {tuple(generate(h, prompt, strategy=Speculative(TokenRecycling(97)), temperature=1.0, seed=11,
                           max_new_tokens=30).tokens) for _ in range(3)}
    assert len(outs) == 1


@pytest.mark.model
@pytest.mark.parametrize("prompt", GEMMA_PROMPTS)
def test_gemma_greedy_speculation_is_greedy(gemma, prompt):
    from trellis.speculate.drafters import drafter_from_name

    dec = Decoder(HFLanguageModel(gemma.model), temperature=0, vocab=gemma.vocab)
    ids = gemma.tokenizer(prompt).input_ids
    ref = Greedy()(dec, dec.start(ids), max_new_tokens=48)[0]
    for drafter in ("prompt-lookup", "recycling", "auto", "layer-skip"):
        spec = Speculative(drafter_from_name(drafter, vocab_size=gemma.vocab_size, model=gemma.model))
        out = spec(dec, dec.start(ids), max_new_tokens=48)[0]
        assert out.tokens == ref.tokens, drafter


@pytest.mark.model
def test_gemma_greedy_speculation_under_json_grammar(gemma):
    import json

    from trellis.constrain.compile import compile as compile_grammar
    from trellis.speculate.drafters import drafter_from_name

    dec = Decoder(HFLanguageModel(gemma.model), compile_grammar("json.lark", gemma.vocab), temperature=0,
                  vocab=gemma.vocab)
    ids = gemma.tokenizer('Text: "Maria Lopez, 34, lives in Madrid."\nThe person as JSON: ').input_ids
    ref = Greedy()(dec, dec.start(ids), max_new_tokens=40)[0]
    spec = Speculative(drafter_from_name("auto", vocab_size=gemma.vocab_size))
    out = spec(dec, dec.start(ids), max_new_tokens=40)[0]
    assert out.tokens == ref.tokens
    assert spec.stats.rounds < 40
    if ref.finished:
        json.loads(dec.text(ref))


def test_layer_skip_restricts_its_head_and_learns_a_layer_set():
    model = tiny_gemma3()
    v = model.config.vocab_size
    vocab = Vocabulary(tuple([b""] * 3 + [bytes([65 + i % 26, 97 + i // 26]) for i in range(v - 3)]),
                       eos=frozenset({2}), special=frozenset({0, 1, 2}))  # two-character tokens
    dec = Decoder(HFLanguageModel(model), temperature=0, vocab=vocab)
    ls = LayerSkip(model, candidates=[[0, 5], [0, 1, 2, 3, 5]], head_size=20)
    prompt = [40, 41, 42, 43]
    ref = Greedy()(dec, dec.start(prompt), max_new_tokens=24)[0]
    spec = Speculative(ls, max_nodes=4)
    out = spec(dec, dec.start(prompt), max_new_tokens=24)[0]
    assert out.tokens == ref.tokens
    head = ls._arms[0]._lm.head.tolist()
    base = set(range(3, 23)) | set(prompt)  # the 20 lowest text ids + the prompt's tokens
    assert base <= set(head) <= base | set(out.tokens)  # + tokens the target produced outside it
    assert 2 <= sum(ls._pulls) <= spec.stats.rounds and min(ls._pulls) >= 1
    assert ls.choice in ([0, 5], [0, 1, 2, 3, 5])
    assert 0 < ls.cost(0) < ls.cost(1) < 1


SPEC_BENCH = __import__("pathlib").Path(__file__).resolve().parents[2] / "shared" / "data" / "spec_bench" / "question.jsonl"


def spec_bench_prompts(n: int) -> list[str]:
    """``n`` Spec-Bench prompts, round-robin over its 13 categories (first prompts first)."""
    import json

    rows = [json.loads(line) for line in SPEC_BENCH.read_text().splitlines() if line.strip()]
    by_cat: dict[str, list[str]] = {}
    for r in rows:
        by_cat.setdefault(r["category"], []).append(r["turns"][0] + "\n\n")
    out = [p for group in itertools.zip_longest(*by_cat.values()) for p in group if p is not None]
    return out[:n]


@pytest.mark.model
@pytest.mark.exhaustive
@pytest.mark.parametrize("grammar", [None, "json.lark"])
def test_gemma_lossless_on_20_spec_bench_prompts(gemma, grammar):
    """Issue 6's acceptance: 20 prompts x 128 tokens, every drafter (Gemma has no smaller sibling
    sharing its tokenizer offline, so the draft model is layer-skip's own layer subset), with and
    without a grammar: token-for-token identical to greedy decoding."""
    if not SPEC_BENCH.exists():
        pytest.skip("needs ../shared/data/spec_bench")
    from trellis.constrain.compile import compile as compile_grammar
    from trellis.speculate.drafters import drafter_from_name

    lm = HFLanguageModel(gemma.model)
    dec = Decoder(lm, compile_grammar(grammar, gemma.vocab), temperature=0, vocab=gemma.vocab) if grammar \
        else Decoder(lm, temperature=0, vocab=gemma.vocab)
    names = ["prompt-lookup", "recycling", "auto", "layer-skip"] + (["grammar-forced"] if grammar else [])
    mismatches = []
    for prompt in spec_bench_prompts(20):
        ids = gemma.tokenizer(prompt).input_ids
        ref = Greedy()(dec, dec.start(ids), max_new_tokens=128)[0]
        for name in names + ["recycling-static"]:
            d = TokenRecycling(gemma.vocab_size, dynamic=False) if name == "recycling-static" else \
                drafter_from_name(name, vocab_size=gemma.vocab_size, model=gemma.model)
            out = Speculative(d)(dec, dec.start(ids), max_new_tokens=128)[0]
            if out.tokens != ref.tokens:
                mismatches.append((prompt[:40], name))
    assert not mismatches, mismatches
