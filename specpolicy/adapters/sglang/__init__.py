"""The SGLang adapter: a launcher (``specpolicy-sglang``), a plugin for ``sglang.srt.plugins``, and one hook
module per family of releases (``adaptive`` bridges the AdaptiveController of SGLang 0.5.20+; ``legacy`` adds
the skipped-speculation step to 0.5.10.post1 and 0.5.12.post1). Nothing here imports SGLang at import time."""
