"""specpolicy: decide, step by step, whether and how deep an LLM serving engine should speculate."""

from . import _pydantic_plugins  # noqa: F401 - first: guards pydantic's plugin lookup (see there)
from .errors import ConfigError
from .mode import MAX_NUM_STEPS, SpecMode
from .policy import Policy, PolicyConfig, PolicyEntry, ReportsEstimates
from .registry import available_policies, make_policy, parse_config
from .stats import StepStats

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "MAX_NUM_STEPS",
    "Policy",
    "PolicyConfig",
    "PolicyEntry",
    "ReportsEstimates",
    "SpecMode",
    "StepStats",
    "available_policies",
    "make_policy",
    "parse_config",
    "__version__",
]
