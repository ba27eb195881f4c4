"""The simulator: workloads, an engine model and reports (``specpolicy simulate``); the step-cost profiles
it replays are ``specpolicy.profiles``."""
