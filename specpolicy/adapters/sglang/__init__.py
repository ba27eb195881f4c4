"""The SGLang adapter: a launcher (``specpolicy-sglang``), a plugin for ``sglang.srt.plugins``, the release
table (``releases``: what each tested release runs), and the code for each route (``adaptive`` bridges
SGLang's own AdaptiveController on 0.5.20+; ``legacy`` adds the skipped-speculation step to 0.5.10.post1 and
0.5.12.post1). Nothing here imports SGLang at import time."""
