"""DraftBudget: the node budget follows measured throughput, forgets old rounds, honours caps."""

from __future__ import annotations

import pytest

from trellis.speculate import DraftBudget


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(budget: DraftBudget, clock: FakeClock, rounds: int, payoff) -> list[int]:
    chosen = []
    for _ in range(rounds):
        n = budget.choose(cap=15)
        tokens, seconds = payoff(n)
        clock.now += seconds
        budget.update(tokens)
        chosen.append(n)
    return chosen


def test_picks_the_arm_with_the_best_tokens_per_second_and_follows_a_change():
    clock = FakeClock()
    b = DraftBudget(arms=(0, 2, 15), clock=clock)
    copying = {0: (1, 1.0), 2: (2, 1.1), 15: (8, 1.6)}  # a copy span: deep drafts accepted
    chosen = run(b, clock, 60, copying.__getitem__)
    assert chosen[-20:].count(15) >= 17
    free_text = {0: (1, 1.0), 2: (1.3, 1.1), 15: (1, 1.6)}  # nothing accepted: drafting only costs
    chosen = run(b, clock, 80, free_text.__getitem__)
    assert chosen[-30:].count(15) <= 3
    assert chosen[-30:].count(0) + chosen[-30:].count(2) >= 27


def test_tries_every_arm_largest_first_and_respects_the_cap():
    clock = FakeClock()
    b = DraftBudget(arms=(6, 0, 2), clock=clock)
    assert b.arms == (0, 2, 6)
    first = run(b, clock, 3, lambda n: (1, 1.0))
    assert first == [6, 2, 0]
    assert b.choose(cap=1) in (0, 1)  # arm 2 stands for the cap
    b.update(1)
    assert b.choose(cap=0) == 0


def test_a_single_arm_is_a_fixed_budget():
    clock = FakeClock()
    b = DraftBudget(arms=(7,), clock=clock)
    assert run(b, clock, 5, lambda n: (1, 1.0)) == [7] * 5
    assert b.choose(cap=3) == 3
    assert b.favourite == 7


@pytest.mark.parametrize("bad", [dict(arms=()), dict(arms=(-1, 2)), dict(discount=0.0)])
def test_bad_settings_raise(bad):
    with pytest.raises(ValueError):
        DraftBudget(**bad)
