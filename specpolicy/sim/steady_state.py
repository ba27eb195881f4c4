"""Closed-loop throughput in steady state, computed from a profile without running the simulator.

Used to calibrate fitted profiles (the seed deployment's table) and to cross-check the simulator: at fixed
concurrency c every finished request is replaced at once, so every decode step runs c requests, and in steady
state each step also carries its share of the prefills of the replacements. The engine model is the
simulator's: one prefill step admits every waiting request and emits its first token; each decode step emits
``1 + accepted drafts`` tokens per request (1 when off, or in a speculation-free engine).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..profiles import CostProfile

__all__ = ["ClosedLoop", "expected_tokens_per_step", "closed_loop_tok_s"]


def expected_tokens_per_step(acceptance: float, num_steps: int) -> float:
    """Tokens a request emits per cycle of a k-deep chain, per-token acceptance a: (1 - a^(k+1)) / (1 - a)."""
    if not 0.0 <= acceptance < 1.0:
        raise ValueError(f"acceptance must be in [0, 1), got {acceptance!r}")
    if num_steps < 0:
        raise ValueError(f"num_steps must be >= 0, got {num_steps!r}")
    return (1.0 - acceptance ** (num_steps + 1)) / (1.0 - acceptance)


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """The reference workload's means: prompts 512 and outputs 256 tokens (each uniform within +-50%)."""

    prompt_tokens: float = 512.0
    output_tokens: float = 256.0

    def decode_steps_per_request(self, tokens_per_step: float) -> float:
        """Decode steps a request needs after its first (prefill) token; the last step is cut to what it owes,
        which wastes on average half of the extra tokens a step could emit."""
        return (self.output_tokens - 1.0) / tokens_per_step + 0.5 * (1.0 - 1.0 / tokens_per_step)

    def step_s(self, profile: CostProfile, concurrency: int, num_steps: int | None) -> float:
        """One decode step at the workload's mean context length; ``None`` = speculation-free engine."""
        seq = self.prompt_tokens + 0.5 * self.output_tokens
        if num_steps is None:
            return profile.never_step_s(concurrency, seq)
        return profile.step_time_s(concurrency, num_steps, seq)

    def tok_s(
        self, profile: CostProfile, concurrency: int, num_steps: int | None, acceptance: float | None = None
    ) -> float:
        """Output tokens per second at fixed concurrency.

        ``num_steps`` None is the speculation-free engine, 0 speculation off inside the speculative engine,
        k > 0 a static k-deep chain whose per-token acceptance is ``acceptance`` (default: the profile's own).
        """
        if num_steps:
            a = profile.acceptance if acceptance is None else acceptance
            if a is None:
                raise ValueError(f"profile {profile.name!r} has no acceptance of its own: pass acceptance")
            tau = expected_tokens_per_step(a, num_steps)
        else:
            tau = 1.0
        return self.throughput(
            self.step_s(profile, concurrency, num_steps),
            concurrency,
            tau,
            profile.prefill_fixed_s,
            profile.prefill_per_token_s,
        )

    def _per_step(
        self, concurrency: int, tau: float, prefill_fixed_s: float, prefill_per_token_s: float
    ) -> tuple[float, float]:
        """(requests replaced per decode step, prefill seconds per decode step)."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency!r}")
        steps = self.decode_steps_per_request(tau)
        finishing = concurrency / steps
        # One prefill step admits every replacement; it runs before a decode step whenever at least one
        # request finished in the step before.
        p_prefill = 1.0 - (1.0 - min(1.0, 1.0 / steps)) ** concurrency
        return finishing, p_prefill * prefill_fixed_s + finishing * self.prompt_tokens * prefill_per_token_s

    def throughput(
        self, step_s: float, concurrency: int, tau: float, prefill_fixed_s: float, prefill_per_token_s: float
    ) -> float:
        """Output tokens per second when every decode step at this concurrency costs ``step_s``."""
        finishing, prefill = self._per_step(concurrency, tau, prefill_fixed_s, prefill_per_token_s)
        return finishing * self.output_tokens / (step_s + prefill)

    def required_step_s(
        self, tok_s: float, concurrency: int, tau: float, prefill_fixed_s: float, prefill_per_token_s: float
    ) -> float:
        """The decode step time that yields ``tok_s``, the inverse of ``throughput`` (to fit profiles)."""
        finishing, prefill = self._per_step(concurrency, tau, prefill_fixed_s, prefill_per_token_s)
        step = finishing * self.output_tokens / tok_s - prefill
        if step <= 0:
            raise ValueError(
                f"{tok_s:g} tok/s at concurrency {concurrency} is unreachable: prefill alone takes longer"
            )
        return step


def closed_loop_tok_s(
    profile: CostProfile,
    concurrency: int,
    num_steps: int | None,
    acceptance: float | None = None,
    workload: ClosedLoop | None = None,
) -> float:
    """Shorthand for ``ClosedLoop().tok_s(...)`` on the reference workload."""
    return (workload or ClosedLoop()).tok_s(profile, concurrency, num_steps, acceptance)
