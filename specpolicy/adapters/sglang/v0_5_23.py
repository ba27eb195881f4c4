"""The former name of ``specpolicy.adapters.sglang.adaptive`` (the bridge to the ``AdaptiveController`` of
SGLang 0.5.20+), kept so that existing imports keep working: importing it gives that very module, so its
attributes (``install``, ``HOOK_TARGETS``, the bridge's module state) are shared, not copied."""

import sys

from . import adaptive as _adaptive
from .adaptive import *  # noqa: F403 - what type checkers and star-importers see

sys.modules[__name__] = _adaptive
