"""``python -m specpolicy.adapters.sglang``: the same as ``specpolicy-sglang``."""

import sys

from .launch import main

sys.exit(main())
