"""Engine adapters: one package per engine, plus the engine-agnostic step controller and observability."""
