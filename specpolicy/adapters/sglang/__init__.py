"""The SGLang adapter: a launcher (``specpolicy-sglang``), a plugin for ``sglang.srt.plugins``, the release
table (``releases``: what each tested release runs), and the code for each route (``v2``: the off step on the
v2-only workers of 0.5.13+, with ``adaptive``'s bridge in SGLang's AdaptiveController; ``legacy``: the off
step on 0.5.10.post1 and 0.5.12.post1). Nothing here imports SGLang at import time."""
