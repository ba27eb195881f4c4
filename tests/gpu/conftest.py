"""Make scripts/gpu (the live GPU check's modules) and the test-policy package importable for these tests."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT / "scripts", ROOT / "scripts" / "gpu", ROOT / "scripts" / "gpu" / "gpucheck_policies"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
