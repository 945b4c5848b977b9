"""`trellis generate --strategy ...`: every strategy name builds its strategy; a Gemma run writes a tree."""

from __future__ import annotations

import pytest

from trellis.cli import STRATEGIES, ObservedSearch, search_strategy, build_parser
from trellis.search import MCTS, Beam, BestOfN, DiverseBeam, EntropyGate, Greedy, Lookahead, Sample


@pytest.mark.parametrize("name", STRATEGIES)
def test_every_strategy_name_builds(name):
    args = build_parser().parse_args(["generate", "hi", "--strategy", name, "--width", "4", "--include", "x",
                                      "--seed", "1", "--temperature", "0.5"])
    s = search_strategy(args)
    inner = s.strategy if isinstance(s, ObservedSearch) else s
    expected = {"greedy": Greedy, "sample": Sample, "beam": Beam, "diverse-beam": DiverseBeam,
                "lookahead": Lookahead, "mcts": MCTS, "best-of-n": BestOfN, "entropy-gate": EntropyGate}[name]
    assert isinstance(inner, expected)
    if name == "lookahead":
        assert inner.clauses == (("x",),)


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
