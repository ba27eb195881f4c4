"""The SGLang adapter: a launcher (``specpolicy-sglang``), a plugin for ``sglang.srt.plugins``, and one hook
module
per supported release (``v0_5_23`` bridges SGLang's own AdaptiveController; ``legacy`` adds the
skipped-speculation
step to 0.5.10.post1 and 0.5.12.post1). Nothing here imports SGLang at import time."""
