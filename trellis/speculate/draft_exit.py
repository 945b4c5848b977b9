"""When to stop drafting a chain: the adaptive draft-exiting of Draft & Verify (Zhang et al. 2024,
"Draft & Verify: Lossless Large Language Model Acceleration via Self-Speculative Decoding", §3.3).

Every drafted token costs one drafter forward, and it pays only if the target accepts it. So a
model drafter stops after the first token whose draft confidence (its top-1 probability) is below a
threshold γ. The drafter's confidence is not calibrated (a layer-skipped model is overconfident),
so γ follows the observed acceptance: the acceptance rate of each round, AR, is smoothed into
AR̃ = β1·AR̃ + (1-β1)·AR; while AR̃ <= α (drafts run past what the target accepts) γ̃ = γ + ε,
else γ̃ = γ - ε; then γ = β2·γ + (1-β2)·γ̃. A round that ran to its length cap says nothing about
where drafting should stop, so it leaves γ alone. Speed only: where a chain stops never changes
what the verifier returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trellis.errors import UsageError


@dataclass
class AdaptiveDraftExit:
    """Confidence threshold ``gamma`` for stopping a drafted chain, adapted to a target acceptance
    rate ``alpha`` (the paper's symbols and defaults: ε = 0.01, β1 = 0.5, β2 = 0.9, γ starts at 0.5)."""

    alpha: float = 0.9
    epsilon: float = 0.01
    beta1: float = 0.5
    beta2: float = 0.9
    gamma: float = 0.5
    rate: float = field(default=0.0, init=False)  # AR̃, the smoothed acceptance rate

    def __post_init__(self) -> None:
        for name in ("alpha", "beta1", "beta2", "gamma"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise UsageError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.epsilon < 0:
            raise UsageError(f"epsilon must be >= 0, got {self.epsilon}")

    def stop(self, confidence: float) -> bool:
        """True when a drafted token this unsure should be the chain's last."""
        return confidence < self.gamma

    def update(self, accepted: int, drafted: int, *, capped: bool) -> None:
        """After verification: ``accepted`` of ``drafted`` chain tokens were kept; ``capped`` = the
        chain stopped at its length limit rather than on confidence."""
        if drafted <= 0:
            return
        self.rate = self.beta1 * self.rate + (1 - self.beta1) * accepted / drafted
        if capped:
            return
        target = self.gamma + self.epsilon if self.rate <= self.alpha else self.gamma - self.epsilon
        self.gamma = min(1.0, max(0.0, self.beta2 * self.gamma + (1 - self.beta2) * target))
