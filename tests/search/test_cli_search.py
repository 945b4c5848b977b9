"""`trellis generate --strategy ...`: every strategy name builds its strategy; a Gemma run writes a tree."""

from __future__ import annotations

import pytest

from trellis.cli import STRATEGIES, build_parser, search_strategy
from trellis.cli_observe import ObservedSearch, ObservedSMC
from trellis.search import MCTS, SMC, Beam, BestOfN, DiverseBeam, EntropyGate, Greedy, Lookahead, Sample


@pytest.mark.parametrize("name", STRATEGIES)
def test_every_strategy_name_builds(name):
    args = build_parser().parse_args(["generate", "hi", "--strategy", name, "--width", "4", "--include", "x",
                                      "--seed", "1", "--temperature", "0.5"])
    s = search_strategy(args)
    inner = s.strategy if isinstance(s, (ObservedSearch, ObservedSMC)) else s
    expected = {"greedy": Greedy, "sample": Sample, "beam": Beam, "diverse-beam": DiverseBeam,
                "lookahead": Lookahead, "mcts": MCTS, "best-of-n": BestOfN, "entropy-gate": EntropyGate,
                "smc": SMC}[name]
    assert isinstance(inner, expected)
    if name == "lookahead":
        assert inner.clauses == (("x",),)


def test_smc_flags_build_its_particles_and_need_its_strategy(capsys):
    from trellis.cli import main

    args = build_parser().parse_args(["generate", "hi", "--strategy", "smc", "--particles", "5", "--ess-threshold",
                                      "0.3", "--resampler", "multinomial", "--seed", "2"])
    s = search_strategy(args)
    assert isinstance(s, ObservedSMC) and s.particles == 5
    assert (s.strategy.ess_threshold, s.strategy.resampler) == (0.3, "multinomial")
    for argv, message in ((["generate", "hi", "--particles", "4"], "--particles applies to --strategy smc"),
                          (["generate", "hi", "--strategy", "smc", "--temperature", "0"], "temperature"),
                          (["generate", "hi", "--strategy", "smc", "--particles", "0"], "--particles")):
        assert main(argv) == 2
        assert message in capsys.readouterr().err


@pytest.mark.model
def test_cli_smc_prints_its_posterior_on_gemma(capsys, gemma):
    from trellis.cli import main

    assert main(["generate", "Is the sky blue? Answer yes or no:", "--grammar", 'start: " yes" | " no"',
                 "--strategy", "smc", "--particles", "4", "--seed", "0", "--max-new-tokens", "4"]) == 0
    out = capsys.readouterr()
    assert out.out.strip() in ("yes", "no")
    assert "[smc: 4 particles" in out.err and "log Z^" in out.err


def test_default_is_generates_own_choice():
    assert search_strategy(build_parser().parse_args(["generate", "hi"])) is None


@pytest.mark.model
def test_cli_beam_writes_tree_on_gemma(tmp_path, capsys, gemma):
    from trellis.cli import main

    out = tmp_path / "tree.svg"
    assert main(["generate", "The capital of France is", "--strategy", "beam", "--width", "2",
                 "--max-new-tokens", "3", "--tree-out", str(out)]) == 0
    assert "<svg" in out.read_text()[:3000]
    assert "tree:" in capsys.readouterr().err


def test_the_mcts_bar_counts_rollouts_against_its_total():
    """The command line's MCTS progress bar ticks once per iteration, out of --max-rollouts (it
    counted LM calls, with no total to read progress from: issue 57)."""
    from fakes import HashLM
    from trellis.decoder import Decoder
    from trellis.tokens import Vocabulary

    class Bar:
        n = 0

        def update(self, k):
            self.n += k

    vocab = Vocabulary(tuple(bytes([b]) for b in range(32, 96)) + (b"",), eos=frozenset({64}))
    dec = Decoder(HashLM(65, seed=3), vocab=vocab)
    root = dec.start([1, 2])
    from trellis.cli_observe import ObservedSearch, RolloutTicks

    bar = Bar()
    res = MCTS(reward=lambda h: h.logprob, k=2, max_rollouts=7).search(dec, root, max_new_tokens=6,
                                                                      recorder=RolloutTicks(dec, root, bar))
    assert bar.n == 7 and res.hypotheses
    holder: dict = {}
    hyps = ObservedSearch(MCTS(reward=lambda h: h.logprob, k=2, max_rollouts=5), holder)(dec, root, max_new_tokens=6)
    assert hyps and holder["tree"].number_of_nodes() > 1
