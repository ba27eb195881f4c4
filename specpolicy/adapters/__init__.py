"""Engine adapters: one package per engine. The engine-agnostic runtime they assemble is
``specpolicy.runtime``."""
