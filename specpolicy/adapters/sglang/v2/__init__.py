"""specpolicy on SGLang 0.5.13+, whose one worker family (``EAGLEWorkerV2``, ``StandaloneWorkerV2``) serves
overlap and non-overlap scheduling alike.

An off step is the target's plain decode (``ForwardMode.DECODE``, with decode CUDA graphs captured beside
the verify graphs at start-up) and nothing of the drafter; the drafter is caught up in one batched extend
before the next speculative step (the missed positions' tokens, and for EAGLE / EAGLE-3 the target's hidden
states of those positions, kept in a bounded window), so it proposes exactly what it would have proposed had
it never been skipped. The result handed to the scheduler has the shape of SGLang's own steps=0 result (one
accepted token, stride 1, lengths grown by one), which its result processor consumes natively.

Where SGLang runs its ``AdaptiveController`` (EAGLE / EAGLE-3 with ``--speculative-adaptive``), the
controller stays the way in for the speculative depths: the policy sits in the controller's params slot
(``adaptive.SpecPolicyParams``) and depth 0 is this package's decode step instead of SGLang's trivial
verify. Without a controller (a draft model, which SGLang's adaptive mode refuses, or no
``--speculative-adaptive``) the policy runs as on/off at the launch depth.

Public API: ``install(settings=None) -> InstallInfo`` (in the scheduler process: the plugin's
``register()``); ``InstallError``.
"""

from __future__ import annotations

from .install import InstallError, InstallInfo, install

__all__ = ["InstallError", "InstallInfo", "install"]
