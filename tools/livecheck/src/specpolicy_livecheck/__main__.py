"""``python -m specpolicy_livecheck``: the same as the ``specpolicy-livecheck`` command."""

import sys

from specpolicy_livecheck.cli import main

sys.exit(main())
